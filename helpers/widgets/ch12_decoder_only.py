"""Chapter 12's explorer: a prompt, the decoder-only model's next-token distribution under
temperature, top-k and top-p, seeded samples, and the last position's attention."""

import copy
import numbers
from collections import OrderedDict

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib import text as mpl_text
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.transforms import Bbox

from helpers import validation
from helpers.contexts import evaluating, plainly
from helpers.decoder_only import (
    DecoderOnlyTranslator,
    _sample_texts,
    load_tokenizer_with_separator,
    load_translator,
    text_prompt,
)
from helpers.gpt import is_current, next_token_probabilities, read_prompt
from helpers.translation import MAX_SOURCE_TOKENS, MAX_WORDS, shown_tokens
from helpers.widgets.base import (
    Dropdown,
    Explorer,
    FloatSlider,
    IntSlider,
    Text,
    artist_look,
    check_vocabulary,
    remember,
)

__all__ = ["DecoderOnlyExplorer"]

TASKS = {"translate": "decoder-only", "continue": "decoder-only-lm"}  # task -> model in data/
TOP = 10  # next tokens shown
SAMPLES = 3
CONTINUE_TOKENS = 15  # tokens written after a "continue" prompt
MAX_PROMPT = MAX_SOURCE_TOKENS + 1  # <bos>, at most MAX_SOURCE_TOKENS - 1 pieces, <sep>
PROBABILITY_LIMITS = (0.1, 0.25, 0.5, 1.0)  # the distribution axis: the smallest that fits
MAX_SAMPLE_CHARACTERS = 110  # a sample longer than this is cut to fit the figure
# readings of a prompt (each up to 1.3 MB of caches) and samples (a few lines) kept: a learner
# going back to a setting gets it at once
REMEMBERED_READINGS, REMEMBERED_SAMPLES = 8, 64
SAMPLE_LINE_STEP = 0.27  # the samples' lines, a fraction of their axes' height apart


class DecoderOnlyExplorer(Explorer):
    """Chapter 12: type a prompt (an English sentence to translate, or the start of one to
    continue); choose temperature, top-k, top-p and a seed; see the ten most likely next
    tokens with what the sampling settings keep of them, three seeded samples, and where the
    prompt's last position looked in a chosen layer and head."""

    def __init__(self, prompt: str = "Tom has a blue car.", task: str = "translate", models=None):
        """models: {"translate": model, "continue": model}, DecoderOnlyTranslators (default:
        data/decoder-only.pt and data/decoder-only-lm.pt, each loaded when first needed)."""
        _check_reading(task, prompt)
        self.tokenizer, self.separator_id = load_tokenizer_with_separator()
        self.models = {}
        if models is not None:
            self.models = self._checked_models(models)
        first = self.model(task)
        layers, heads = first.config.num_layers, first.config.num_heads
        self._reading, self._samples = OrderedDict(), OrderedDict()  # the latest ones
        controls = {
            "prompt": Text(
                value=prompt,
                description="prompt",
                placeholder=f"an English sentence, up to {MAX_WORDS} words",
                layout=widgets.Layout(width="40%"),
            ),
            "task": Dropdown(options=list(TASKS), value=task, description="task"),
            "temperature": FloatSlider(
                value=1.0, min=0.0, max=1.5, step=0.05, description="temperature (0 = greedy)"
            ),
            "top_k": Dropdown(options=["off", 1, 3, 10, 50], description="top-k"),
            "top_p": FloatSlider(
                value=0.9, min=0.05, max=1.0, step=0.05, description="top-p (1 = off)"
            ),
            "seed": IntSlider(value=0, min=0, max=9, description="seed"),
            "layer": Dropdown(options=range(1, layers + 1), value=layers, description="layer"),
            "head": Dropdown(options=range(1, heads + 1), value=1, description="head"),
        }
        figure = self._build_figure()
        self._panels = {  # the figure's parts, each drawn anew only when its look changed
            "title": [figure.axes[0].title],
            **{f"line {i}": [line] for i, line in enumerate(self._sample_lines)},
            "tokens": self._token_labels,
            "distribution": [
                *self._model_bars,
                *self._sampled_bars,
                *self._value_labels,
                self._cut_line,
                self._cut_label,
                self._distribution_ax.title,
            ],
            "keys": self._key_labels,
            "attention": [*self._attention_bars, self._attention_ax.title],
        }
        self._drawn, self._regions = {}, None  # each panel's look when last drawn; its place
        dynamic = [artist for artists in self._panels.values() for artist in artists]
        rows = [["prompt", "task", "layer", "head"], ["temperature", "top_k", "top_p", "seed"]]
        super().__init__(controls, figure, dynamic, rows)

    def model(self, task: str) -> DecoderOnlyTranslator:
        """The task's model, loaded from data/ the first time it is needed."""
        _check_task(task)
        return self._model(task)

    def _model(self, task: str) -> DecoderOnlyTranslator:
        if task not in self.models:
            model = load_translator(TASKS[task])[0]
            self._check_model(f"data/{TASKS[task]}.pt", model)
            _check_same_menus({**self.models, task: model})
            self.models[task] = model
        return self.models[task]

    def _checked_models(self, models: object) -> dict:
        if not isinstance(models, dict) or set(models) != set(TASKS):
            found = type(models).__name__
            if isinstance(models, dict):
                found = f"the keys {list(models)}"
            raise TypeError(
                f"models must be a dict with the keys {list(TASKS)} (one DecoderOnlyTranslator "
                f"each), got {found}"
            )
        for task, model in models.items():
            if not isinstance(model, DecoderOnlyTranslator):
                raise TypeError(
                    f"models[{task!r}] must be a DecoderOnlyTranslator, got {type(model).__name__}"
                )
            self._check_model(f"models[{task!r}]", model)
        _check_same_menus(models)
        return dict(models)

    def _check_model(self, name: str, model: DecoderOnlyTranslator) -> None:
        check_vocabulary(name, model.config.vocab_size, self.tokenizer.get_vocab_size())
        if model.separator_id != self.separator_id:
            raise ValueError(
                f"{name} reads <sep> as id {model.separator_id}; the tokenizer's is "
                f"{self.separator_id}"
            )

    def _build_figure(self) -> Figure:
        figure = Figure(figsize=(10.5, 6.2), layout="constrained")
        grid = figure.add_gridspec(2, 2, height_ratios=(1, 2.6), width_ratios=(1, 1.3))
        text_ax = figure.add_subplot(grid[0, :])  # first: the base class's errors go here
        text_ax.axis("off")
        self._sample_lines = [
            text_ax.text(0.0, 1 - SAMPLE_LINE_STEP * i, "", va="top", fontsize=10, parse_math=False)
            for i in range(SAMPLES + 1)
        ]
        self._build_distribution(figure.add_subplot(grid[1, 0]))
        self._build_attention(figure.add_subplot(grid[1, 1]))
        return figure

    def _build_distribution(self, ax) -> None:
        rows = np.arange(TOP)
        self._model_bars = ax.barh(
            rows,
            np.zeros(TOP),
            height=0.8,
            color="tab:blue",
            alpha=0.3,
            label="the model (temperature 1)",
        )
        self._sampled_bars = ax.barh(
            rows, np.zeros(TOP), height=0.4, color="tab:blue", label="sampled from (the number)"
        )
        self._token_labels = [
            ax.text(
                -0.02,
                row,
                "",
                ha="right",
                va="center",
                transform=ax.get_yaxis_transform(),
                parse_math=False,
            )
            for row in rows
        ]
        self._value_labels = [
            ax.text(0, row, "", va="center", fontsize=8, parse_math=False) for row in rows
        ]
        self._cut_line = ax.axhline(-1, color="tab:red", ls="--", lw=1.5)
        self._cut_label = ax.text(
            0.98, 0, "", ha="right", va="top", color="tab:red", fontsize=9, parse_math=False,
            transform=ax.get_yaxis_transform(),
        )  # fmt: skip
        ax.set_ylim(TOP - 0.5, -0.5)  # the most likely token at the top
        ax.set_yticks([])
        ax.set_xlim(0, PROBABILITY_LIMITS[-1])
        ax.set_xlabel("probability of the next token")
        ax.set_ylabel(f"the {TOP} most likely next tokens", labelpad=70)
        ax.legend(loc="lower right", fontsize=9)
        self._distribution_ax = ax

    def _build_attention(self, ax) -> None:
        positions = np.arange(MAX_PROMPT)
        self._attention_bars = ax.bar(positions, np.zeros(MAX_PROMPT), color="tab:red")
        self._key_labels = [
            ax.text(
                position,
                -0.02,
                "",
                ha="right",
                va="top",
                rotation=60,
                rotation_mode="anchor",
                transform=ax.get_xaxis_transform(),
                parse_math=False,
            )
            for position in positions
        ]
        ax.set_xticks([])
        ax.set_ylim(0, 1)
        ax.set_ylabel("attention weight")
        ax.set_xlabel("prompt tokens (keys)", labelpad=55)
        self._attention_ax = ax

    @plainly
    def reading(self, task: str, prompt: str) -> dict:
        """What the sampling controls do not change: the prompt's ids and tokens, the logits
        after it, each layer's attention of its last position, (layers, heads, P), and the
        prompt read for SAMPLES rows, from which every sample setting writes. A copy: the
        explorer keeps its own (a reading edited in place is read again, as is_current tells)."""
        _check_reading(task, prompt)
        found = self._read(task, prompt)
        return {
            key: value.clone() if isinstance(value, torch.Tensor) else copy.copy(value)
            for key, value in found.items()
        }

    def _read(self, task: str, prompt: str) -> dict:
        """The reading kept, if the task's model has not changed since it was made; else the
        prompt read again, and the samples kept of it (written from an older reading, perhaps
        of the model before a change) forgotten."""
        key, model = (task, prompt), self._model(task)
        if key in self._reading and is_current(self._reading[key]["read"], model):
            self._reading.move_to_end(key)
        else:
            self._reading.pop(key, None)
            for old in [old for old in self._samples if old[:2] == key]:
                del self._samples[old]
            ids = text_prompt(self.tokenizer, self.separator_id, prompt, task)  # (1, P)
            context = model.config.context_length
            if ids.shape[1] > context:  # the model would ask to cut ids it does not show
                raise ValueError(
                    f"the prompt's {ids.shape[1]} tokens do not fit the model's context of "
                    f"{context} tokens: type a shorter sentence"
                )
            with evaluating(model), torch.no_grad():
                logits = model(ids)[:, -1]  # (1, V)
                attention = torch.stack([maps[0, :, -1] for maps in model.attention_maps()])
            remember(
                self._reading,
                key,
                {
                    "ids": ids,
                    "tokens": shown_tokens([self.tokenizer.id_to_token(i) for i in ids[0]]),
                    "logits": logits,
                    "attention": attention,
                    "read": read_prompt(model, ids.expand(SAMPLES, -1)),
                },
                REMEMBERED_READINGS,
            )
        return self._reading[key]

    @plainly
    def samples(self, task: str, prompt: str, temperature, top_k, top_p, seed) -> list[str]:
        """SAMPLES seeded continuations of the prompt: for a translation up to twice as many
        tokens as the English has, and 5 more; CONTINUE_TOKENS after the start of a sentence.
        top_k and top_p None: off."""
        _check_reading(task, prompt)
        temperature, top_k, top_p, seed = _checked_sampling(temperature, top_k, top_p, seed)
        found = self._read(task, prompt)  # first: a new reading drops the prompt's samples
        return list(self._sample(found, task, prompt, temperature, top_k, top_p, seed))  # a copy

    def _sample(
        self, found: dict, task: str, prompt: str, temperature, top_k, top_p, seed
    ) -> list[str]:
        """The samples kept of the setting (as _checked_sampling gives it), or written from
        found, the prompt's reading that _read has just given (it drops the samples of an older
        reading)."""
        key = (task, prompt, temperature, top_k, top_p, seed)
        if key in self._samples:
            self._samples.move_to_end(key)
        else:
            model, ids = self._model(task), found["ids"]
            wanted = CONTINUE_TOKENS
            if task == "translate":
                wanted = 2 * (ids.shape[1] - 2) + 5  # the English is the prompt less <bos>, <sep>
            room = model.config.context_length - ids.shape[1]
            vocab_size = model.config.vocab_size
            sampling = (temperature, None if top_k is None else min(top_k, vocab_size), top_p)
            count = min(wanted, room)
            written = _sample_texts(  # found["read"] is current: _read has just checked it
                model, self.tokenizer, ids, SAMPLES, count, sampling, seed, found["read"]
            )
            remember(self._samples, key, written, REMEMBERED_SAMPLES)
        return self._samples[key]

    @plainly
    def draw(self, prompt, task, temperature, top_k, top_p, seed, layer, head) -> None:
        layer, head = self._check_view(task, layer, head)
        top_k = None if isinstance(top_k, str) and top_k == "off" else top_k
        try:
            top_p = None if _checked_top_p(top_p) == 1 else top_p
            _check_reading(task, prompt)
            temperature, top_k, top_p, seed = _checked_sampling(temperature, top_k, top_p, seed)
            found = self._read(task, prompt)
            written = self._sample(found, task, prompt, temperature, top_k, top_p, seed)
        except ValueError as problem:
            self.show_error(self.figure.axes[0], problem)
            return
        logits = found["logits"]
        drawn_from = logits.double()  # as generate draws: a float32 mass of 1e-50 would be 0
        if temperature == 0:  # greedy: all the mass on the most likely token
            sampled_from = torch.zeros_like(drawn_from).scatter(-1, logits.argmax(-1, True), 1.0)
        else:
            sampled_from = next_token_probabilities(drawn_from, temperature, top_k, top_p)
        probabilities = logits.softmax(-1)[0]
        top_ids = probabilities.topk(TOP).indices
        kept = int((sampled_from > 0).sum())
        self.state = {
            "prompt_tokens": found["tokens"],
            "top_ids": top_ids.tolist(),
            "top_tokens": shown_tokens([self.tokenizer.id_to_token(i) for i in top_ids]),
            "probabilities": probabilities[top_ids],
            "sampled_from": sampled_from[0, top_ids],
            "kept": kept,
            "attention": found["attention"][layer - 1, head - 1],
            "samples": written,
        }
        context = self._model(task).config.context_length
        nothing = "(wrote <eos> at once)"  # what an empty sample says
        if found["ids"].shape[1] >= context:
            nothing = f"(no room left: the prompt fills the model's context of {context} tokens)"
        settings = f"{_settings(temperature, top_k, top_p)}, seed {seed}"
        self._draw_samples(prompt, task, written, settings, nothing)
        self._draw_distribution()
        self._draw_attention(layer, head)

    def _check_view(self, task: object, layer: object, head: object) -> tuple[int, int]:
        """(layer, head) as ints, if they are what the menus offer (numpy's whole numbers
        too); draw() called directly is held to them as well."""
        config = self.model(task).config
        for name, value, count in (
            ("layer", layer, config.num_layers),
            ("head", head, config.num_heads),
        ):
            if (
                isinstance(value, bool | np.bool_)
                or not isinstance(value, numbers.Integral)
                or not 1 <= value <= count
            ):
                raise ValueError(
                    f"{name} must be one of 1..{count}, got {validation.shown(value):.40}"
                )
        return int(layer), int(head)

    def render_png(self) -> bytes:
        """Only the panels whose look changed are drawn anew (a new seed changes the title and
        the samples that differ, a layer or head the attention's bars); the others keep their
        pixels."""
        looks = {
            panel: [artist_look(a) for a in artists] for panel, artists in self._panels.items()
        }
        if self._background is None:  # the base class draws the whole figure
            png = super().render_png()
            if self._regions is None:  # the layout is fixed from the first draw on
                self._regions = self._panel_regions()
                png = super().render_png()  # again, with each panel's texts clipped to it
            self._drawn = looks
            return png
        canvas = self.figure.canvas
        height = self.figure.bbox.height
        for panel, look in looks.items():
            if self._drawn.get(panel) == look:
                continue
            x0, y0, x1, y1 = self._regions[panel]  # display coordinates, y up
            canvas.restore_region(self._background, (x0, height - y1, x1, height - y0), (0, 0))
            for artist in self._panels[panel]:
                self.figure.draw_artist(artist)
        self._drawn = looks
        return self.canvas_png()

    def _panel_regions(self) -> dict:
        """Each panel's rectangle of the figure, (x0, y0, x1, y1) in pixels, y up: the samples'
        title and each of their lines, the gaps between them split in the middle, above the gap
        under their axes; below it, the distribution up to the attention axes' labels (its
        value labels may pass its right edge), the tokens' names left of its axes; the
        attention from there, the prompt's tokens under its axes. Each panel's texts are
        clipped to it, so that drawing one panel anew never leaves a piece of another's."""
        renderer = self.figure.canvas.get_renderer()
        width, height = self.figure.bbox.width, self.figure.bbox.height
        text_box = self.figure.axes[0].bbox
        above_titles = self._distribution_ax.title.get_window_extent(renderer).y1
        middle = round((text_box.y0 + above_titles) / 2)
        line_height = renderer.get_text_width_height_descent(
            "Tg", FontProperties(size=self._sample_lines[0].get_fontsize()), ismath=False
        )[1]
        tops = [text_box.y1 - SAMPLE_LINE_STEP * i * text_box.height for i in range(SAMPLES + 1)]
        cuts = [height, round(text_box.y1) + 2]  # the title ends its pad above the first line
        cuts += [
            round((top - line_height + below) / 2)
            for top, below in zip(tops, tops[1:], strict=False)
        ]
        cuts += [middle]
        between = round(self._attention_ax.yaxis.get_tightbbox(renderer).x0 - 1)  # ticks, label
        left = round(self._distribution_ax.bbox.x0) - 3  # the names end 2% of the axes before
        below = round(self._attention_ax.bbox.y0) - 3  # and the prompt's tokens begin 2% below
        regions = {
            "title": (0, cuts[1], width, cuts[0]),
            **{f"line {i}": (0, cuts[i + 2], width, cuts[i + 1]) for i in range(SAMPLES + 1)},
            "tokens": (0, 0, left, middle),
            "distribution": (left, 0, between, middle),
            "keys": (between, 0, width, below),
            "attention": (between, below, width, middle),
        }
        for panel, artists in self._panels.items():
            box = Bbox.from_extents(*regions[panel])
            for artist in artists:
                if isinstance(artist, mpl_text.Text):  # bars and lines keep their axes' clip
                    artist.set_clip_box(box)
                    artist.set_clip_on(True)
        return regions

    def _draw_samples(
        self, prompt: str, task: str, written: list[str], settings: str, nothing: str
    ) -> None:
        """nothing: the line of a sample that wrote nothing."""
        prompt = " ".join(prompt.split())  # tabs and line breaks as the tokenizer reads them
        shown_prompt = f"{prompt} <sep>" if task == "translate" else prompt
        lines = [f"prompt: {shown_prompt}"] + [
            f"{i + 1}. {_shortened(text) or nothing}" for i, text in enumerate(written)
        ]
        for artist, line in zip(self._sample_lines, lines, strict=True):
            artist.set_text(line)
        self._sample_lines[0].set_color("dimgray")
        ax = self.figure.axes[0]
        verb = "translations" if task == "translate" else "continuations"
        ax.set_title(
            f"{SAMPLES} {verb}: {settings}",  # short: a new seed draws it anew, 75 µs a letter
            color="black",
            fontsize=11,
            parse_math=False,
        )

    def _draw_distribution(self) -> None:
        state = self.state
        probabilities, sampled_from = state["probabilities"], state["sampled_from"]
        largest = float(max(probabilities.max(), sampled_from.max()))
        self._fit_probability_axis(largest)
        limit = self._distribution_ax.get_xlim()[1]
        rows = zip(
            self._model_bars,
            self._sampled_bars,
            self._token_labels,
            self._value_labels,
            state["top_tokens"],
            probabilities.tolist(),
            sampled_from.tolist(),
            strict=True,
        )
        for model_bar, sampled_bar, label, value, token, p, q in rows:
            model_bar.set_width(p)
            model_bar.set_facecolor("tab:blue" if q > 0 else "lightgray")
            sampled_bar.set_width(q)
            label.set_text(token)
            label.set_color("black" if q > 0 else "darkgray")
            value.set_text(_probability(q) if q > 0 else "cut")
            value.set_x(min(max(p, q), limit) + 0.01 * limit)
            value.set_color("black" if q > 0 else "darkgray")
        kept_here = int((sampled_from > 0).sum())  # a prefix of the ten: the order is the same
        cut_visible = kept_here < TOP
        self._cut_line.set_visible(cut_visible)
        self._cut_label.set_visible(cut_visible)
        if cut_visible:
            self._cut_line.set_ydata([kept_here - 0.5] * 2)
            self._cut_label.set_y(kept_here - 0.45)
            self._cut_label.set_text("cut: below this line, never drawn")
        vocabulary = self.tokenizer.get_vocab_size()
        self._distribution_ax.set_title(
            f"next token: {state['kept']:,} of {vocabulary:,} tokens can be drawn",
            color="black",
            fontsize=11,
            parse_math=False,
        )

    def _fit_probability_axis(self, largest: float) -> None:
        """The smallest of a few fixed limits that holds the longest bar (the axis is part of
        the background: it is redrawn only when the limit changes)."""
        ax = self._distribution_ax
        right = next((limit for limit in PROBABILITY_LIMITS if largest <= limit * 0.8), 1.0)
        if ax.get_xlim()[1] != right:
            ax.set_xlim(0, right)
            self.redraw_background()

    def _draw_attention(self, layer: int, head: int) -> None:
        weights, tokens = self.state["attention"], self.state["prompt_tokens"]
        for position, (bar, label) in enumerate(
            zip(self._attention_bars, self._key_labels, strict=True)
        ):
            inside = position < len(tokens)
            bar.set_height(float(weights[position]) if inside else 0.0)
            label.set_text(tokens[position] if inside else "")
            label.set_fontsize(8 if len(tokens) > 20 else 10)  # a long prompt's labels crowd
        ax = self._attention_ax
        ax.set_xlim(-0.6, len(tokens) - 0.4)  # no ticks on this axis: the background stays
        ax.set_title(
            f"attention of the last position ({tokens[-1]}): layer {layer}, head {head}",
            color="black",
            fontsize=11,
            parse_math=False,
        )

    def show_error(self, ax, problem: Exception | str) -> None:
        """The problem as the title, over emptied panels: no earlier samples, bars or prompt
        stay beside it (the base class calls this too, for a menu set to nothing)."""
        self.state = {"error": str(problem)}
        for bar in (*self._model_bars, *self._sampled_bars):
            bar.set_width(0)
        for bar in self._attention_bars:
            bar.set_height(0)
        texts = (*self._sample_lines, *self._token_labels, *self._value_labels, *self._key_labels)
        for text in texts:
            text.set_text("")
        self._cut_line.set_visible(False)
        self._cut_label.set_visible(False)
        for each in self.figure.axes:
            each.set_title("")
        super().show_error(ax, problem)


def _check_task(task: object) -> None:
    if not isinstance(task, str) or task not in TASKS:
        raise ValueError(f"task must be one of {list(TASKS)}, got {validation.shown(task)}")


def _check_reading(task: object, prompt: object) -> None:
    """A task and a prompt as they key the readings kept (a list would fail there as
    unhashable)."""
    _check_task(task)
    if not isinstance(prompt, str):
        raise TypeError(f"prompt must be text (a str), got {type(prompt).__name__}")


def _checked_sampling(temperature: object, top_k: object, top_p: object, seed: object) -> tuple:
    """(temperature, top_k, top_p, seed) as helpers.gpt.generate takes them (a float, ints,
    None for off), checked before they key the samples kept: True equals 1 there, and would
    fetch the samples of 1; numpy's int32 seed would reach torch's manual_seed, which refuses it."""
    temperature = validation.positive_number(temperature, "temperature", allow_zero=True)
    top_k = None if top_k is None else validation.whole_number(top_k, "top_k")
    top_p = None if top_p is None else _checked_top_p(top_p)
    return temperature, top_k, top_p, validation.seed(seed)


def _check_same_menus(models: dict) -> None:
    """One layer menu and one head menu serve both tasks: the models must agree on them."""
    shapes = {task: (m.config.num_layers, m.config.num_heads) for task, m in models.items()}
    if len(set(shapes.values())) > 1:
        found = ", ".join(f"{task}: {shape[0]} of {shape[1]}" for task, shape in shapes.items())
        raise ValueError(
            f"the models must have the same layers and heads (one menu serves both), got layers "
            f"of heads {found}"
        )


def _settings(temperature: float, top_k, top_p) -> str:
    if temperature == 0:
        return "temperature 0 (greedy)"
    shown_k = "off" if top_k is None else validation.shown(top_k)
    return (
        f"temperature {temperature:.3g}, top-k {shown_k}, "
        f"top-p {'off' if top_p is None else f'{top_p:.3g}'}"
    )


def _checked_top_p(top_p: object) -> float:
    """The top-p control's value: a number in (0, 1], 1 keeping every token."""
    if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1:
        raise ValueError(
            f"top_p must be a number in (0, 1] (1: off), got {validation.shown(top_p)}"
        )
    return float(top_p)


def _probability(p: float) -> str:
    return f"{p:.2f}" if p >= 0.005 else "<0.01"


def _shortened(text: str) -> str:
    if len(text) <= MAX_SAMPLE_CHARACTERS:
        return text
    return text[: MAX_SAMPLE_CHARACTERS - 1] + "…"
