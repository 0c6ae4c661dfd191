"""Chapter 13's explorer: the phase change, frame by frame. A training-step slider over the
stored snapshots of the one-layer and the two-layer attention-only model, a layer and a head,
a sequence (a random block copied right after itself, placed anywhere among tokens that all
differ, or typed tokens): the head's attention map, the loss per position, and where on the
log's second-copy loss curve that step lies."""

import copy
import math
import re
from collections import OrderedDict

import ipywidgets as widgets
import numpy as np
import torch
import torch.nn.functional as F
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import MaxNLocator

from helpers import validation
from helpers.contexts import plainly
from helpers.gpt import GPT
from helpers.induction import (
    LARGEST_ID,
    MODEL_LAYERS,
    Recipe,
    blank_model,
    check_log,
    check_snapshots,
    load_training,
    measure,
    model_config,
    placed_repeats,
    previous_token_score,
)
from helpers.plotting import TokenHeatmap
from helpers.widgets.base import (
    Dropdown,
    Explorer,
    IntSlider,
    IntText,
    SelectionSlider,
    Text,
    ToggleButtons,
)

__all__ = ["InductionExplorer"]

SEQUENCES = ("repeat", "typed")
REPEAT_LENGTH = 24  # the default repeat: a random block of 24 tokens, then its copy
DEFAULT_TOKENS = "5 9 12 5 9 12"
MOST_LABELLED = 24  # longer sequences are labelled by position (every 4th), not by token
LOSS_LIMITS = (8.0, 16.0, 32.0)  # the loss axis: the smallest that holds the line
KEPT_BACKGROUNDS = 4  # a repeat's and a typed sequence's, say: switching back costs no redraw
COLOURS = {"previous": "tab:blue", "induction": "tab:green", "first": "tab:orange"}
MOST_POSITIONS = 256  # the map draws context x context cells: more cannot be read (nor held)
MOST_DRAWN_LOSS = 1e100  # the log's loss axis: beyond this, its limits and ticks overflow


class InductionExplorer(Explorer):
    """Chapter 13: choose a model, a training step (a stored snapshot), a layer, a head and a
    sequence (a random block of `length` tokens at `start`, copied right after itself among
    tokens that all differ, made from a seed; or typed token numbers). See the head's attention
    map with the previous-token diagonal and the induction stripe marked, the
    loss of predicting each next token, the head's scores, and where that step lies on the
    training log's second-copy loss: before, during or after the phase change."""

    def __init__(
        self,
        model: str = "two-layer",
        step: int | None = None,
        layer: int | None = None,
        head: int | None = None,
        sequence: str = "repeat",
        tokens: str | None = None,
        seed: int = 0,
        start: int = 0,
        length: int | None = None,
        training: dict | None = None,
    ):
        """step: a snapshot's step (default: the last); layer: default the model's last;
        head: default the one with the highest induction score in the log's last row;
        tokens: space-separated token numbers for sequence="typed" (default "5 9 12 5 9 12");
        start, length: where the repeat's block starts (default 0) and how long it is (default
        24, or half the context; its copy follows it at once, and both must fit in it);
        training: the dict helpers.induction.load_training() returns (default: loaded from
        data/)."""
        model, sequence = str(_model_name(model)), str(_sequence_name(sequence))  # not numpy's
        if tokens is None:
            tokens = DEFAULT_TOKENS
        if not isinstance(tokens, str):
            raise TypeError(
                f"tokens must be text (a str) of token numbers such as {DEFAULT_TOKENS!r}, got "
                f"{type(tokens).__name__}"
            )
        seed = validation.seed(seed)
        self.training = _checked_training(load_training() if training is None else training)
        step, layer, head = self._checked_choices(model, step, layer, head)
        self._snapshots, self._reading = {}, {}
        self._backgrounds = OrderedDict()  # the last few rendered backgrounds, by their axes
        self._refused = None  # a length or start follow() put back: said by the next draw
        config = self.training["models"][model].config
        if length is None:  # a block of 24, or as long as the context holds twice
            length = min(REPEAT_LENGTH, config.context_length // 2)
        length, start = _placement(length, start, config.context_length)
        self._placed = (length, start)  # what follow() puts back a length or start that won't fit
        if sequence == "typed":  # raised here, at the call, not drawn into the figure
            parse_tokens(tokens, config.vocab_size, config.context_length)
        controls = {
            "model": ToggleButtons(options=list(MODEL_LAYERS), value=model, description="model"),
            "step": SelectionSlider(
                options=self.steps(model), value=step, description="training step"
            ),
            "layer": Dropdown(options=range(config.num_layers), value=layer, description="layer"),
            "head": Dropdown(options=range(config.num_heads), value=head, description="head"),
            "sequence": ToggleButtons(options=SEQUENCES, value=sequence, description="sequence"),
            "seed": IntText(value=seed, description="seed (repeat)"),
            "length": IntSlider(
                min=2, max=config.context_length // 2, value=length, description="block length"
            ),
            "start": IntSlider(
                min=0, max=config.context_length - 2 * length, value=start, description="start"
            ),
            "tokens": Text(
                value=tokens,
                description="typed tokens",
                placeholder=f"token numbers 0..{config.vocab_size - 1}, e.g. {DEFAULT_TOKENS}",
                continuous_update=False,
                layout=widgets.Layout(width="40%"),
            ),
        }
        figure = self._build_figure()
        dynamic = [
            self._step_line,
            self._step_dot,
            *self._heatmap.artists,
            self._previous_line,
            self._induction_line,
            *self._copy_spans,
            self._loss_line,
            *(ax.title for ax in (self._log_ax, self._map_ax, self._loss_ax)),
        ]
        rows = [
            ["model", "step", "layer", "head"],
            ["sequence", "seed", "length", "start"],
            ["tokens"],
        ]
        super().__init__(controls, figure, dynamic, rows)

    # What the controls may choose

    def steps(self, model: str) -> list[int]:
        """The steps of the model's stored snapshots, in order."""
        return sorted(self.training["snapshots"][_model_name(model)])

    def _checked_choices(self, model: str, step, layer, head) -> tuple[int, int, int]:
        config = self.training["models"][_model_name(model)].config
        steps = self.steps(model)
        if step is None:
            step = steps[-1]
        elif validation.whole_number(step, "step", minimum=0) not in steps:
            raise ValueError(
                f"step {validation.shown(step)} is not a stored snapshot of the {model} model: "
                f"one of {', '.join(map(str, steps))}"
            )
        layer = config.num_layers - 1 if layer is None else _index(layer, "layer", model, config)
        if head is None:  # the head that scores highest as an induction head in the last row
            head = int(self.training["logs"][model]["induction"][-1, layer].argmax())
        return int(step), layer, _index(head, "head", model, config)

    def follow(self, control) -> None:
        """The controls that depend on the one that moved: the model's steps, layers and heads;
        typing tokens shows them; the seed, the length and the start show the random repeat,
        and the start can go as far as the length leaves room for. A length or a start that
        does not fit in the context (set from code past the slider's ends) is put back, and
        the view says why."""
        controls = self.controls
        if control is controls["model"]:
            if controls["model"].value is None:
                return  # unset: update() asks for a value
            config = self.training["models"][controls["model"].value].config
            _offer(controls["step"], self.steps(controls["model"].value))
            _offer(controls["layer"], list(range(config.num_layers)))
            _offer(controls["head"], list(range(config.num_heads)))
        elif control is controls["tokens"]:
            controls["sequence"].value = "typed"
        elif control in (controls["seed"], controls["length"], controls["start"]):
            controls["sequence"].value = "repeat"
            self._place_repeat(control)

    def _place_repeat(self, moved) -> None:
        """The length's and the start's ranges from the context; a value outside them put back
        to the last one that fitted (the start moves in when a longer block leaves less room)."""
        context = self.training["recipe"].context_length
        length, start = self.controls["length"], self.controls["start"]
        try:  # a new length fits if it fits at start 0: the start then moves in
            _placement(length.value, 0 if moved is length else start.value, context)
            placed = (length.value, start.value)
        except ValueError as problem:
            self._refused, placed = problem, self._placed
        room = context - 2 * placed[0]
        _set_range(length, 2, context // 2, placed[0])
        _set_range(start, 0, room, min(placed[1], room))
        self._placed = (length.value, start.value)

    # The figure

    def _build_figure(self) -> Figure:
        models = self.training["models"].values()
        most = max(model.config.context_length for model in models)
        vocab_size = max(model.config.vocab_size for model in models)
        figure = Figure(figsize=(11, 7.4), layout="constrained")
        grid = figure.add_gridspec(2, 2, height_ratios=(1, 3.2), width_ratios=(1.2, 1))
        self._log_ax = figure.add_subplot(grid[0, :])  # first: the base class's errors go here
        self._map_ax = figure.add_subplot(grid[1, 0])
        self._loss_ax = figure.add_subplot(grid[1, 1])
        self._build_log(math.log(vocab_size))
        self._heatmap = TokenHeatmap(self._map_ax, most, most, "Reds")
        figure.colorbar(self._heatmap.mesh, ax=self._map_ax, label="attention weight", shrink=0.8)
        marks = {"ls": "none", "marker": "o", "ms": 2.5, "alpha": 0.7}  # dots: the cells show
        (self._previous_line,) = self._map_ax.plot(
            [], [], color=COLOURS["previous"], label="the previous token", **marks
        )
        (self._induction_line,) = self._map_ax.plot(
            [], [], color=COLOURS["induction"], label="induction: after the earlier copy", **marks
        )
        self._map_ax.legend(  # outside: the map is drawn over the background
            loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, fontsize=8, markerscale=2
        )
        self._map_ax.set_xlabel("keys", labelpad=18)  # below the labels TokenHeatmap writes
        self._map_ax.set_ylabel("queries", labelpad=22)
        self._build_loss(math.log(vocab_size))
        return figure

    def _build_log(self, log_vocab: float) -> None:
        ax, logs = self._log_ax, self.training["logs"]
        for name, style in zip(MODEL_LAYERS, ("--", "-"), strict=True):
            ax.plot(logs[name]["step"], logs[name]["second_copy_loss"], ls=style, label=name)
        self._step_line = ax.axvline(0, color="black", lw=1)
        (self._step_dot,) = ax.plot([], [], "o", color="black", ms=5)
        top = max(max(logs[name]["second_copy_loss"]) for name in MODEL_LAYERS)
        ax.set_ylim(0, top * 1.1 if top else log_vocab)  # all 0: the axis still needs a height
        ax.set_xlabel("training step")
        ax.set_ylabel("second-copy loss")
        ax.legend(loc="lower left", fontsize=8)

    def _build_loss(self, log_vocab: float) -> None:
        ax = self._loss_ax
        self._copy_spans = []
        for which, colour in (("first", COLOURS["first"]), ("second", COLOURS["induction"])):
            span = Rectangle(
                (0, 0),
                0,
                1,
                transform=ax.get_xaxis_transform(),  # x: positions, y: the axes' full height
                color=colour,
                alpha=0.12,
                label=f"{which} copy",
            )
            self._copy_spans.append(ax.add_patch(span))
        (self._loss_line,) = ax.plot([], [], "o-", ms=3, lw=1, color="black", label="loss")
        ax.axhline(log_vocab, color="gray", ls="--", lw=1)
        ax.set_xlabel("position of the predicted token")
        ax.set_ylabel("loss: cross-entropy of the next token (nats)")
        ax.set_ylim(0, LOSS_LIMITS[0])
        ax.set_xlim(0.5, self.training["models"]["two-layer"].config.context_length - 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # positions: whole numbers
        uniform = f"ln {round(math.exp(log_vocab))} = {log_vocab:.2f}: a uniform guess"
        handles = [
            self._loss_line,
            Line2D([], [], color="gray", ls="--", lw=1, label=uniform),
            *self._copy_spans,
        ]
        ax.legend(
            handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, fontsize=8
        )

    def render_png(self) -> bytes:
        """The base class's PNG, with a background drawn before for the same axes reused
        instead of drawn again (switching between a repeat and typed tokens changes the
        axes' labels and limits, and a whole background takes longer than the rest)."""
        key = (self._loss_ax.get_xlim(), self._loss_ax.get_ylim())  # (the map's labels follow n)
        if self._background is None and key in self._backgrounds:
            self._background = self._backgrounds[key]
        png = super().render_png()
        self._backgrounds[key] = self._background
        self._backgrounds.move_to_end(key)
        if len(self._backgrounds) > KEPT_BACKGROUNDS:
            self._backgrounds.popitem(last=False)
        return png

    # The numbers, each from helpers

    @plainly
    def snapshot(self, model: str, step: int) -> GPT:
        """The model's weights at that step in a float64 copy in eval mode: the caller's own
        (the explorer keeps the one it reads, which a change to this one leaves alone)."""
        return copy.deepcopy(self._snapshot(model, step))

    def _snapshot(self, model: str, step: int) -> GPT:
        """The explorer's own float64 copy of the snapshot (built once)."""
        validation.whole_number(step, "step", minimum=0)  # None would stand for the last step
        step = self._checked_choices(model, step, 0, 0)[0]
        key = (model, step)
        if key not in self._snapshots:
            exact = blank_model(self.training["models"][model].config).double().eval()
            exact.load_state_dict(self.training["snapshots"][model][step])
            self._snapshots[key] = exact
        return self._snapshots[key]

    @plainly
    def sequence_ids(
        self,
        sequence: str,
        seed: int,
        tokens: str,
        vocab_size: int,
        context: int,
        start: int = 0,
        length: int = REPEAT_LENGTH,
    ):
        """(1, n) int64 ids: the seed's random block at start and its copy among tokens that
        all differ (n = context), or the typed tokens; either fits in the context."""
        if _sequence_name(sequence) == "repeat":
            context = validation.whole_number(context, "context_length")
            vocab_size = validation.whole_number(vocab_size, "vocab_size")
            if context > vocab_size:
                raise ValueError(
                    f"the context ({validation.shown(context)}) must be at most vocab_size "
                    f"({validation.shown(vocab_size)}) for a repeat among tokens that all differ"
                )
            length, start = _placement(length, start, context)
            generator = torch.Generator().manual_seed(validation.seed(seed))
            return placed_repeats(1, context, start, length, vocab_size, generator)
        return parse_tokens(tokens, vocab_size, context)

    @plainly
    def reading(self, model: str, step: int, ids: torch.Tensor) -> dict:
        """What the layer and head do not change: every head's attention (layers, heads, n, n),
        the loss of predicting each token from the ones before it (n - 1,), and, where a block
        is followed at once by its copy, its place and helpers.induction.measure()'s numbers.
        A copy: the explorer keeps its own, which a change to this one leaves alone."""
        return copy.deepcopy(self._read(model, step, ids))

    @torch.no_grad()
    def _read(self, model: str, step: int, ids: torch.Tensor) -> dict:
        """The reading the explorer keeps (the last one only)."""
        exact = self._snapshot(model, step)
        _check_ids(ids, exact.config)
        ids = ids.long()  # cross_entropy's targets: int64 (the check takes any integer dtype)
        key = (model, step, tuple(ids[0].tolist()))
        if key not in self._reading:
            logits = exact(ids)  # (1, n, vocab)
            losses = F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="none")  # (n - 1,)
            attention = torch.stack([maps[0] for maps in exact.attention_maps()])
            found = find_repeat(ids)
            start, length = found if found else (None, None)
            measured = None if found is None else measure(exact, ids, length, start=start)
            self._reading = {
                key: {
                    "attention": attention,
                    "losses": losses,
                    "start": start,
                    "length": length,
                    "measured": measured,
                }
            }
        return self._reading[key]

    def draw(self, model, step, layer, head, sequence, seed, length, start, tokens) -> None:
        chosen = {"step": step, "layer": layer, "head": head}
        unset = [name for name, value in chosen.items() if value is None]
        if unset:  # the constructor's defaults stand for None; a view asks for a value
            raise ValueError(f"choose a value for {', '.join(unset)}")
        refused, self._refused = self._refused, None
        step, layer, head = self._checked_choices(model, step, layer, head)
        config = self.training["models"][model].config
        try:
            ids = self.sequence_ids(
                sequence, seed, tokens, config.vocab_size, config.context_length, start, length
            )
        except ValueError as problem:
            self._show_problem(problem, model, step)
            return
        found = self._read(model, step, ids)
        largest = float(found["losses"].max())
        if not largest <= LOSS_LIMITS[-1]:  # NaN too: the line would be drawn off the axis
            problem = ValueError(
                f"losses reach {largest:.2g} nats at step {step:,}, beyond the "
                f"{LOSS_LIMITS[-1]:g}-nat loss axis"
            )
            self._show_problem(problem, model, step)
            return
        weights, measured = found["attention"][layer, head].clone(), found["measured"]
        self.state = {
            "model": model,
            "step": step,
            "layer": layer,
            "head": head,
            "ids": ids[0].tolist(),
            "attention": weights,
            "losses": found["losses"].clone(),  # the state is the caller's: the reading stays
            "start": found["start"],
            "length": found["length"],
            "previous_token": float(previous_token_score(weights)),
            "induction": None,
            "first_copy_loss": None,
            "second_copy_loss": None,
        }
        if measured is not None:
            self.state.update(
                induction=float(measured["induction"][layer, head]),
                previous_token=float(measured["previous_token"][layer, head]),
                first_copy_loss=measured["first_copy_loss"],
                second_copy_loss=measured["second_copy_loss"],
            )
        self._draw_log(model, step)
        self._draw_map()
        self._draw_loss()
        if refused is not None:  # drawn: the settings put back; said: why
            self.state["refused"] = str(refused)
            self.show_error(self._log_ax, refused)

    def _draw_log(self, model: str, step: int) -> None:
        log = self.training["logs"][model]
        self._step_line.set_xdata([step, step])
        title = f"second-copy loss on held-out sequences during training; {model} at step {step:,}"
        if step in log["step"]:
            loss = log["second_copy_loss"][log["step"].index(step)]
            self._step_dot.set_data([step], [loss])
            title += f": {loss:.2f}"
        else:
            self._step_dot.set_data([], [])
        self._log_ax.set_title(title, color="black", fontsize=10, parse_math=False)

    def _draw_map(self) -> None:
        state = self.state
        ids, n, length, start = state["ids"], len(state["ids"]), state["length"], state["start"]
        if n <= MOST_LABELLED:
            labels, kind = [str(token) for token in ids], "token numbers"
        else:
            labels, kind = [str(p) if p % 4 == 0 else "" for p in range(n)], "positions"
        self._heatmap.show(state["attention"].numpy(), labels, labels)
        self._label_map_axes(kind)
        queries = np.arange(1, n) + 0.5  # cell centres of (t, t - 1)
        self._previous_line.set_data(queries - 1, queries)
        if length is None:
            self._induction_line.set_data([], [])
        else:
            queries = np.arange(start + length, start + 2 * length) + 0.5  # (t, t - length + 1)
            self._induction_line.set_data(queries - length + 1, queries)
        self._map_ax.set_title(
            f"{state['model']} model, layer {state['layer']}, head {state['head']}, step "
            f"{state['step']:,}\n{_scores(state)}",
            color="black",
            fontsize=10,
            parse_math=False,
        )

    def _label_map_axes(self, kind: str) -> None:
        """The map's axis labels say what its tick labels are (part of the background: redrawn
        only when the kind changes)."""
        if self._map_ax.get_xlabel() != f"keys ({kind})":
            self._map_ax.set_xlabel(f"keys ({kind})")
            self._map_ax.set_ylabel(f"queries ({kind})")
            self.redraw_background()

    def _draw_loss(self) -> None:
        state = self.state
        losses, n, length = state["losses"].numpy(), len(state["ids"]), state["length"]
        start = state["start"]
        self._loss_line.set_data(np.arange(1, n), losses)
        first, second = self._copy_spans
        first.set_visible(length is not None)
        second.set_visible(length is not None)
        if length is not None:
            first.set_x(start - 0.5)
            first.set_width(length)
            second.set_x(start + length - 0.5)
            second.set_width(length)
            title = (
                f"loss per position: first copy {state['first_copy_loss']:.2f}, second copy "
                f"{state['second_copy_loss']:.2f}"
            )
        else:
            title = f"loss per position: mean {losses.mean():.2f}"
        self._loss_ax.set_title(title, color="black", fontsize=10, parse_math=False)
        self.fit_y_limit(self._loss_ax, float(losses.max()), LOSS_LIMITS)
        if self._loss_ax.get_xlim() != (0.5, n - 0.5):
            self._loss_ax.set_xlim(0.5, n - 0.5)
            self.redraw_background()

    def _show_problem(self, problem: Exception, model: str, step: int) -> None:
        self.state = {"error": str(problem)}
        self._draw_log(model, step)
        self._heatmap.hide()
        for line in (self._previous_line, self._induction_line, self._loss_line):
            line.set_data([], [])
        for span in self._copy_spans:
            span.set_visible(False)
        for ax in (self._map_ax, self._loss_ax):
            ax.set_title("")
        self.show_error(self._log_ax, problem)


@plainly
def parse_tokens(text: str, vocab_size: int, context_length: int) -> torch.Tensor:
    """Typed token numbers (separated by spaces or commas) as (1, n) int64 ids, or a
    ValueError that says what to type instead."""
    if not isinstance(text, str):
        raise ValueError(f"type token numbers as text, got {type(text).__name__}")
    vocab_size = validation.whole_number(vocab_size, "vocab_size")
    if vocab_size > LARGEST_ID + 1:
        raise ValueError(
            f"vocab_size must be at most 2^63 (int64 ids), got {validation.shown(vocab_size)}"
        )
    context_length = validation.whole_number(context_length, "context_length")
    words = [word for word in re.split(r"[\s,]+", text) if word]
    example = f"type token numbers 0..{vocab_size - 1} separated by spaces, e.g. {DEFAULT_TOKENS}"
    if not words:
        raise ValueError(f"no tokens: {example}")
    for word in words:
        if not re.fullmatch(r"[0-9]+", word):
            shown = ascii(word[:20])  # escapes: another script's digit, or an invisible character
            raise ValueError(f"{shown} is not a token number: {example}")
    digits = [word.lstrip("0") or "0" for word in words]  # 0007 is 7, however many zeros
    for number in digits:  # a number too long for the vocabulary is not read (nor printed) whole
        if len(number) > len(str(vocab_size - 1)) or int(number) >= vocab_size:
            shown = number if len(number) <= 12 else f"{number[:6]}... ({len(number)} digits)"
            raise ValueError(
                f"token {shown} is outside the vocabulary 0..{vocab_size - 1}: {example}"
            )
    numbers = [int(number) for number in digits]
    if len(numbers) > context_length:
        raise ValueError(
            f"{len(numbers)} tokens do not fit in the context of {context_length}: type at most "
            f"{context_length}"
        )
    if len(numbers) < 2:
        raise ValueError("one token has no next token to predict: type at least 2")
    return torch.tensor([numbers])


def _check_ids(ids: object, config) -> None:
    """ids as reading() takes them: (1, n), one sequence of 2 or more ids (one has no next token
    to predict) that fits the model's context, each in its vocabulary."""
    validation.token_ids(ids, "ids", config.vocab_size, "(1, n)")
    if ids.shape[0] != 1 or not 2 <= ids.shape[1] <= config.context_length:
        raise ValueError(
            f"ids must be (1, n), one sequence of 2..{config.context_length} tokens, got shape "
            f"{tuple(ids.shape)}"
        )


@plainly
def find_repeat(ids: torch.Tensor) -> tuple[int, int] | None:
    """(start, length) of the longest block of length >= 2 in ids (1, n) that is followed at
    once by its copy (the earliest, of blocks alike in length), or None if there is none."""
    validation.token_ids(ids, "ids", None, "(1, n), one sequence")  # whole numbers, not NaN
    if ids.shape[0] != 1:
        raise ValueError(f"ids must be (1, n), one sequence, got shape {tuple(ids.shape)}")
    if ids.shape[1] > MOST_POSITIONS:  # the search takes time n^3
        raise ValueError(
            f"ids must be at most {MOST_POSITIONS} tokens (the explorer's longest context), got "
            f"{ids.shape[1]}"
        )
    tokens = ids[0].tolist()
    n = len(tokens)
    for length in range(n // 2, 1, -1):
        for start in range(n - 2 * length + 1):
            middle = start + length
            if tokens[start:middle] == tokens[middle : middle + length]:
                return start, length
    return None


def _placement(length: object, start: object, context: int) -> tuple[int, int]:
    """length and start of a repeat that fits in the context, or a ValueError saying why."""
    length = validation.whole_number(length, "length", minimum=2)
    start = validation.whole_number(start, "start", minimum=0)
    if start + 2 * length > context:
        raise ValueError(
            f"a block of {validation.shown(length)} at start {validation.shown(start)} and its "
            f"copy do not fit in the context of {context}: start + 2 x length must be at most "
            f"{context}"
        )
    return length, start


def _scores(state: dict) -> str:
    previous = f"previous-token score {state['previous_token']:.2f}"
    if state["induction"] is None:
        return f"{previous}; no induction score: no block followed at once by its copy"
    return f"induction score {state['induction']:.2f} · {previous}"


def _set_range(control, low: int, high: int, value: int) -> None:
    """A slider's ends and value, checked together once all three are set (one at a time,
    ipywidgets would refuse or clamp a value between old and new ends)."""
    with control.hold_trait_notifications():
        control.min, control.max, control.value = low, high, value


def _offer(control, options: list[int]) -> None:
    """New options for a control, keeping its value where the new options hold it (else the
    last option: the latest step, the last layer)."""
    value = control.value
    if list(control.options) != options:
        control.options = options
    control.value = value if value in options else options[-1]


def _model_name(model: object) -> str:
    if not isinstance(model, str) or model not in MODEL_LAYERS:
        raise ValueError(
            f"model must be one of {list(MODEL_LAYERS)}, got {validation.shown(model)}"
        )
    return model


def _sequence_name(sequence: object) -> str:
    if not isinstance(sequence, str) or sequence not in SEQUENCES:
        raise ValueError(
            f"sequence must be one of {list(SEQUENCES)}, got {validation.shown(sequence)}"
        )
    return sequence


def _index(value: object, name: str, model: str, config) -> int:
    count = config.num_layers if name == "layer" else config.num_heads
    value = validation.whole_number(value, name, minimum=0)
    if value >= count:
        where = "the model has" if name == "layer" else "each layer has"
        raise ValueError(
            f"{name} {validation.shown(value)} is out of range for the {model} model: {where} "
            f"{count} {name}{'s' * (count != 1)}, 0..{count - 1}"
        )
    return value


def _checked_training(training: object) -> dict:
    """training shaped as load_training() returns it: its logs and snapshots as
    helpers.induction checks a saved file's."""
    if not isinstance(training, dict):
        raise TypeError(
            "training must be the dict helpers.induction.load_training() returns, got "
            f"{type(training).__name__}"
        )
    missing = [key for key in ("recipe", "models", "snapshots", "logs") if key not in training]
    if missing:
        raise ValueError(
            f"training lacks {missing}: it must be the dict helpers.induction.load_training() "
            "returns"
        )
    recipe = training["recipe"]
    if not isinstance(recipe, Recipe):
        raise TypeError(f"training['recipe'] must be a Recipe, got {type(recipe).__name__}")
    if recipe.context_length > MOST_POSITIONS:
        raise ValueError(
            f"the explorer draws contexts of at most {MOST_POSITIONS} positions (a map of "
            f"context x context cells), got training['recipe'].context_length "
            f"{recipe.context_length}"
        )
    names = sorted(MODEL_LAYERS)
    for key in ("models", "snapshots", "logs"):
        if not isinstance(training[key], dict) or sorted(training[key], key=str) != names:
            found = (
                sorted(training[key], key=str) if isinstance(training[key], dict) else training[key]
            )
            raise ValueError(f"training[{key!r}] must name {names}, found {found!r:.80}")
    for name in names:
        model = training["models"][name]
        if not isinstance(model, GPT):
            raise TypeError(
                f"training['models'][{name!r}] must be a GPT, got {type(model).__name__}"
            )
        if model.config != model_config(recipe, MODEL_LAYERS[name]):
            raise ValueError(
                f"training['models'][{name!r}] must be the model training['recipe'] builds, "
                f"{model_config(recipe, MODEL_LAYERS[name])}, got {model.config}"
            )
        layers = MODEL_LAYERS[name]
        check_snapshots(
            f"training['snapshots'][{name!r}]", training["snapshots"][name], recipe, layers
        )
        check_log(f"training['logs'][{name!r}]", training["logs"][name], recipe, layers)
        drawn = max(training["logs"][name]["second_copy_loss"])
        if drawn > MOST_DRAWN_LOSS:
            raise ValueError(
                f"training['logs'][{name!r}]'s second_copy_loss reaches {drawn:.4g}: the explorer "
                f"draws losses up to {MOST_DRAWN_LOSS:g} nats"
            )
    return training
