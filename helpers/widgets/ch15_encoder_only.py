"""Chapter 15's explorer: hide one piece of a typed sentence, see the encoder's top guesses (it
reads both sides) beside its causal twin's (the left side only), and a layer and head's
attention over the sentence; type a translation, and the fine-tuned pair model's match
probability and its attention over the pair."""

import copy
import numbers
import re
from collections import OrderedDict

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib import text as mpl_text
from matplotlib.figure import Figure
from matplotlib.transforms import Bbox

from helpers import validation
from helpers.encoder_only import (
    CLS,
    ENCODER_TOKENS,
    MASK,
    SEP,
    PairClassifier,
    TextEncoder,
    load_encoder_tokenizer,
    load_finetuned,
    load_pretrained,
    pair_row,
    sentence_rows,
)
from helpers.plotting import TokenHeatmap
from helpers.translation import check_text, clean, shown_tokens
from helpers.widgets.base import Dropdown, Explorer, Text, artist_look, check_vocabulary, remember

__all__ = ["FillInExplorer"]

TOP = 5  # guesses shown per model
GROUPS = ("both ways", "left only")  # the encoder ([MASK] in place), the causal twin
GROUP_NAMES = {
    "both ways": "both ways: the encoder, [MASK] in place",
    "left only": "left only: the causal twin, the left side",
}
COLOURS = {"both ways": "tab:blue", "left only": "tab:orange", "truth": "tab:green"}
OWN_TOKENS = re.compile(r"\[(?:CLS|SEP|MASK)\]|<(?:pad|bos|eos|unk)>")  # the models' own
REMEMBERED = 16  # readings kept per kind: a learner going back to a setting gets it at once
PICTURES_KEPT = 6  # each panel's latest looks, as pixels (up to 1.5 MB each): drawn at once
SHOWN_CHARACTERS, SHOWN_TRANSLATION = 60, 45  # longer ones are cut in the headline
# the fixed layout, in fractions of the figure: the headline's axes (its title above it), the
# guesses' axes and the map's (left, bottom, width, height); the panels' regions meet at
# TOP_CUT (under the headline) and SPLIT (between the guesses and the map's token labels)
HEADER, BARS, MAP = 0.9, (0.12, 0.09, 0.28, 0.7), (0.545, 0.2, 0.36, 0.59)
TOP_CUT, SPLIT = 0.885, 0.44
REDRAWN_IF_CHANGED = ("header", "bars", "labels")  # the map is drawn on every update


class FillInExplorer(Explorer):
    """Chapter 15: type a sentence (English or French) and pick a piece to hide; see the
    encoder's five best guesses for it (it reads both sides of the blank) next to its causal
    twin's (it reads only the left side), and where a chosen layer and head of the encoder
    attends while it reads the sentence with [MASK] in place. Type a translation too, and the
    fine-tuned pair model reads [CLS] sentence [SEP] translation [SEP]: its match probability,
    and its attention over the pair."""

    def __init__(
        self,
        sentence: str = "Tom has a blue car.",
        token: int | None = None,
        layer: int | None = None,
        head: int | str = 1,
        translation: str = "",
        models: dict | None = None,
        pair_model: PairClassifier | None = None,
    ):
        """token: the position of the piece to hide in the row [CLS] pieces [SEP], 1 for the
        first piece (default: the middle piece); layer: 1 to the encoder's layers (default: the
        last); head: 1 to its heads, or "mean". models: load_pretrained()'s dict, with "masked"
        and "causal" TextEncoders (default: data/encoder_only_pretrained.pt); pair_model: a
        PairClassifier (default: load_finetuned()["pair"], data/encoder_only_finetuned.pt). The
        explorer computes with float64 copies of the models made here: a model changed later
        is not seen."""
        for name, text in (("sentence", sentence), ("translation", translation)):
            if not isinstance(text, str):
                raise TypeError(f"{name} must be text (a str), got {type(text).__name__}")
        models = load_pretrained() if models is None else models
        self.models = _checked_models(models)
        pair_model = load_finetuned()["pair"] if pair_model is None else pair_model
        self.pair_model = _checked_pair_model(pair_model, self.models["masked"])
        self.tokenizer, self.token_ids = load_encoder_tokenizer()
        vocabulary = self.tokenizer.get_vocab_size()
        for name, model in (
            ("models['masked']", self.models["masked"]),
            ("models['causal']", self.models["causal"]),
            ("pair_model's encoder", pair_model.encoder),
        ):
            check_vocabulary(name, model.config.vocab_size, vocabulary)
        self._copies = {  # float64, eval mode: the numbers shown, the same on any thread count
            name: copy.deepcopy(model).double().eval()
            for name, model in (*self.models.items(), ("pair", pair_model))
        }
        config = self.models["masked"].config
        self.max_len = min(model.config.max_len for model in self.models.values())
        self.pair_max_len = pair_model.encoder.config.max_len
        layers, heads = config.num_layers, config.num_heads
        layer, head = self._check_view(layers if layer is None else layer, head)
        self._readings, self._pairs = OrderedDict(), OrderedDict()  # the latest ones
        row = self.sentence_row(sentence)  # a sentence the explorer cannot read is refused here
        token = _middle(row) if token is None else _checked_token(token, row)
        if clean(translation):
            self._read_pair(sentence, translation)
        controls = {
            "sentence": Text(
                value=sentence,
                description="sentence",
                placeholder="an English or French sentence",
                layout=widgets.Layout(width="45%"),
            ),
            "token": Dropdown(
                options=self._token_options(row), value=token, description="token to hide"
            ),
            "layer": Dropdown(options=range(1, layers + 1), value=layer, description="layer"),
            "head": Dropdown(
                options=[*range(1, heads + 1), "mean"], value=head, description="head"
            ),
            "translation": Text(
                value=translation,
                description="translation (pair view)",
                placeholder="empty: the sentence alone",
                layout=widgets.Layout(width="45%"),
            ),
        }
        figure = self._build_figure(max(self.max_len, self.pair_max_len))
        self._panels = {  # the figure's parts, each drawn anew only when its look changed
            "header": [self._header.title],
            "bars": [*self._bars, *self._bar_labels, *self._value_labels, self._bars_ax.title],
            "labels": [*self._map.x_labels, *self._map.y_labels],
            "map": [self._map.mesh, self._map_ax.title],  # drawn on every update
        }
        self._regions = self._panel_regions(figure)
        self._drawn, self._pictures = {}, {}  # each panel's look when last drawn, and its pixels
        dynamic = [artist for artists in self._panels.values() for artist in artists]
        rows = [["sentence", "token"], ["translation", "layer", "head"]]
        super().__init__(controls, figure, dynamic, rows)

    # What the models read

    def sentence_row(self, sentence: str) -> list[int]:
        """The ids [CLS] pieces [SEP] of a sentence, or a ValueError that says what is wrong
        with it (nothing to read, the models' own tokens typed, characters the tokenizer has
        never seen, more tokens than the models read)."""
        row = self._row("sentence", sentence)
        if len(row) > self.max_len:
            raise ValueError(
                f"the sentence splits into {len(row) - 2} pieces: with [CLS] and [SEP], "
                f"{len(row)} tokens, more than the {self.max_len} the models read; type a "
                f"shorter sentence"
            )
        return row

    def guesses(self, sentence: str, token: int) -> dict:
        """The sentence with the piece at `token` hidden: its pieces, each model's TOP guesses
        (ids, probabilities; as helpers.encoder_only.fill_in computes them, in float64), the
        hidden piece's probability and rank under each, and the encoder's attention, (layers,
        heads, n, n), reading the row with [MASK] in place. A copy of what the explorer keeps."""
        found = self._read(sentence, token)
        return copy.deepcopy(found)

    def pair(self, sentence: str, translation: str) -> dict:
        """The fine-tuned pair model reading [CLS] sentence [SEP] translation [SEP]: its
        tokens, the match probability (softmax of its logits, index 1, "a translation",
        computed in float64) and its attention, (layers, heads, n, n). A copy."""
        return copy.deepcopy(self._read_pair(sentence, translation))

    def _row(self, name: str, text: str) -> list[int]:
        check_text(text, name)
        text = clean(text)
        if not text:
            example = "Tom a une voiture bleue." if name == "translation" else "Tom has a blue car."
            raise ValueError(f"type a {name} (English or French), for example: {example}")
        marks = OWN_TOKENS.findall(text)
        if marks:
            raise ValueError(
                f"{marks[0]} is one of the models' own tokens, not text: they place [CLS] and "
                f"[SEP] themselves, and the token menu chooses the piece to hide; type the "
                f"{name} alone"
            )
        unknown = sorted({c for c in text if c != " " and self.tokenizer.token_to_id(c) is None})
        if unknown:
            shown = ", ".join(_named_character(c) for c in unknown[:5])
            raise ValueError(f"the tokenizer has never seen these characters: {shown}")
        return sentence_rows(self.tokenizer, [text], self.token_ids)[0]

    def _read(self, sentence: str, token: object) -> dict:
        check_text(sentence, "sentence")
        if not _whole(token):
            raise ValueError(
                f"token must be a whole number, the position of a piece, got "
                f"{validation.shown(token):.40}"
            )
        key = (sentence, int(token))
        if key in self._readings:
            self._readings.move_to_end(key)
            return self._readings[key]
        row = self.sentence_row(sentence)
        token = _checked_token(token, row, ValueError)
        ids = torch.tensor([row])
        masked = ids.clone()
        masked[0, token] = self.token_ids[MASK]
        where, first = torch.tensor([token]), torch.tensor([0])
        found = {"row": row, "pieces": [self.tokenizer.id_to_token(i) for i in row]}
        with torch.no_grad():
            for name, model, read in (
                ("both ways", self._copies["masked"], masked),
                ("left only", self._copies["causal"], ids),
            ):
                before = where - 1 if name == "left only" else where  # fill_in's positions
                features = model(read)[first, before]  # (1, d_model)
                probabilities = model.output(features).softmax(-1)  # (1, vocab)
                top = probabilities.topk(TOP, dim=-1)
                truth = probabilities[0, row[token]]
                found[name] = {
                    "ids": top.indices[0].tolist(),
                    "probabilities": top.values[0].tolist(),
                    "truth": truth.item(),
                    "rank": int((probabilities[0] > truth).sum()) + 1,
                }
                if name == "both ways":
                    found["attention"] = _attention(model)
        remember(self._readings, key, found, REMEMBERED)
        return found

    def _read_pair(self, sentence: str, translation: str) -> dict:
        check_text(sentence, "sentence")
        check_text(translation, "translation")
        key = (sentence, translation)
        if key in self._pairs:
            self._pairs.move_to_end(key)
            return self._pairs[key]
        self._row("sentence", sentence)
        self._row("translation", translation)
        row, segments = pair_row(self.tokenizer, self.token_ids, sentence, translation)
        if len(row) > self.pair_max_len:
            raise ValueError(
                f"the pair reads as {len(row)} tokens ([CLS] sentence [SEP] translation [SEP]), "
                f"more than the {self.pair_max_len} the pair model reads; type shorter sentences"
            )
        model = self._copies["pair"]
        with torch.no_grad():
            logits = model(torch.tensor([row]), torch.tensor([segments]))  # (1, 2)
            found = {
                "row": row,
                "segments": segments,
                "pieces": [self.tokenizer.id_to_token(i) for i in row],
                "match": logits.softmax(-1)[0, 1].item(),
                "attention": _attention(model.encoder),
            }
        remember(self._pairs, key, found, REMEMBERED)
        return found

    # The controls

    def _token_options(self, row: list[int]) -> list[tuple[str, int]]:
        pieces = [self.tokenizer.id_to_token(i) for i in row]
        return [(f"{i}: {pieces[i]}", i) for i in range(1, len(row) - 1)]

    def follow(self, control) -> None:
        """A new sentence offers its pieces to hide, keeping the position hidden if the new
        sentence has it (else its middle piece). A sentence it cannot read leaves the menu as it
        was: the figure says what is wrong."""
        token = self.controls["token"]
        if control is not self.controls["sentence"]:
            return
        try:
            row = self.sentence_row(control.value)
        except ValueError:
            return
        options = self._token_options(row)
        kept = token.value
        if list(token.options) != options:
            token.options = options
        token.value = kept if kept in range(1, len(row) - 1) else _middle(row)

    def _check_view(self, layer: object, head: object) -> tuple[int, int | str]:
        """(layer, head) as the menus offer them (numpy's whole numbers too)."""
        config = self.models["masked"].config
        layers, heads = config.num_layers, config.num_heads
        if not _whole(layer) or not 1 <= layer <= layers:
            raise ValueError(f"layer must be one of 1..{layers}, got {validation.shown(layer):.40}")
        if isinstance(head, str) and head == "mean":
            return int(layer), "mean"
        if not _whole(head) or not 1 <= head <= heads:
            raise ValueError(
                f'head must be one of 1..{heads} or "mean", got {validation.shown(head):.40}'
            )
        return int(layer), int(head)

    # The figure

    def _build_figure(self, largest: int) -> Figure:
        """A fixed layout (every panel's place set here, so that a longer title or another
        sentence never moves one): a headline across the top (its axes come first: the base
        class writes errors there), the guesses left, the attention map right."""
        figure = Figure(figsize=(11.5, 6.4))
        self._header = figure.add_axes((0.03, HEADER, 0.94, 0.001))
        self._header.axis("off")
        self._build_bars(figure.add_axes(BARS))
        ax = figure.add_axes(MAP)
        self._map = TokenHeatmap(ax, largest, largest, "Reds")
        colour_bar = figure.add_axes((MAP[0] + MAP[2] + 0.015, MAP[1], 0.012, MAP[3]))
        figure.colorbar(self._map.mesh, cax=colour_bar, label="attention weight")
        ax.set_xlabel("keys (the tokens read)", labelpad=48)
        ax.set_ylabel("queries (the tokens reading)", labelpad=50)
        self._map_ax = ax
        return figure

    def _build_bars(self, ax) -> None:
        rows = [*range(TOP), *range(TOP + 1, 2 * TOP + 1)]  # a gap row between the groups
        self._bars = ax.barh(rows, np.zeros(len(rows)), height=0.75)
        for group, start in zip(GROUPS, (-1, TOP), strict=True):
            ax.text(
                0.01, start + 0.05, GROUP_NAMES[group], transform=ax.get_yaxis_transform(),
                va="center", fontsize=9, color=COLOURS[group], fontweight="bold", parse_math=False,
            )  # fmt: skip
        self._bar_labels = [
            ax.text(-0.02, row, "", ha="right", va="center", fontsize=10, parse_math=False,
                    transform=ax.get_yaxis_transform())
            for row in rows
        ]  # fmt: skip
        self._value_labels = [
            ax.text(0, row, "", va="center", fontsize=9, parse_math=False) for row in rows
        ]
        ax.set_ylim(2 * TOP + 0.6, -1.6)  # each group's best guess at its top
        ax.set_yticks([])
        ax.set_xlim(0, 1)
        ax.set_xlabel(f"probability (each model's {TOP} most likely pieces)")
        self._bars_ax = ax

    @staticmethod
    def _panel_regions(figure: Figure) -> dict:
        """Each panel's rectangle of the figure, (x0, y0, x1, y1) in pixels, y up: the headline
        across the top; below it, the guesses left of SPLIT, the map's token labels and the map
        right of it. Each panel's texts are clipped to its rectangle, so that drawing one panel
        anew never leaves a piece of another's."""
        width, height = figure.bbox.width, figure.bbox.height
        below, split = round(TOP_CUT * height), round(SPLIT * width)
        return {
            "header": (0, below, round(width), round(height)),
            "bars": (0, 0, split, below),
            "labels": (split, 0, round(width), below),  # the map's region too
        }

    def render_png(self) -> bytes:
        """Only the panels whose look changed are drawn anew (a layer or a head redraws the map
        alone), and a panel's look drawn lately is not drawn again but copied back: its
        pixels are kept, PICTURES_KEPT looks per panel. The map is drawn on every update, over
        the copy of its region that holds the token labels."""
        canvas = self.figure.canvas
        if self._background is None:  # the whole figure but its changing parts, as the base
            self._clip_to_regions()
            canvas.draw()
            self.figure.set_layout_engine("none")
            self._background = canvas.copy_from_bbox(self.figure.bbox)
            self._drawn = {}
            self._pictures = {panel: OrderedDict() for panel in REDRAWN_IF_CHANGED}
        for panel in REDRAWN_IF_CHANGED:
            look = tuple(artist_look(artist) for artist in self._panels[panel])
            if panel == "labels" or self._drawn.get(panel) != look:  # the map's region: always
                self._show_panel(panel, look)
        for artist in self._panels["map"]:
            self.figure.draw_artist(artist)
        return self.canvas_png()

    def _show_panel(self, panel: str, look: tuple) -> None:
        """The panel's pixels for this look: copied back if kept, else drawn and kept."""
        pictures, canvas = self._pictures[panel], self.figure.canvas
        if look in pictures:
            pictures.move_to_end(look)
            canvas.restore_region(pictures[look])
        else:
            self._draw_panel(panel)
            region = Bbox.from_extents(*self._regions[panel])
            remember(pictures, look, canvas.copy_from_bbox(region), PICTURES_KEPT)
        self._drawn[panel] = look

    def _draw_panel(self, panel: str) -> None:
        """The panel's region as the background holds it, then the panel's artists."""
        x0, y0, x1, y1 = self._regions[panel]
        height = round(self.figure.bbox.height)
        self.figure.canvas.restore_region(
            self._background, (x0, height - y1, x1, height - y0), (0, 0)
        )
        for artist in self._panels[panel]:
            self.figure.draw_artist(artist)

    def _clip_to_regions(self) -> None:
        for panel, region in self._regions.items():
            box = Bbox.from_extents(*region)
            for artist in self._panels[panel]:
                if isinstance(artist, mpl_text.Text):  # bars keep their axes' clip
                    artist.set_clip_box(box)
                    artist.set_clip_on(True)
        title = self._map_ax.title  # the map's title: above the map, right of the split
        title.set_clip_box(Bbox.from_extents(*self._regions["labels"]))
        title.set_clip_on(True)

    def draw(self, sentence, token, layer, head, translation) -> None:
        layer, head = self._check_view(layer, head)
        if not isinstance(translation, str):
            raise TypeError(f"translation must be text (a str), got {type(translation).__name__}")
        found = self._read(sentence, token)
        paired = self._read_pair(sentence, translation) if clean(translation) else None
        shown = paired if paired is not None else found
        attention = shown["attention"][layer - 1]  # (heads, n, n)
        weights = attention.mean(0) if head == "mean" else attention[head - 1]
        pieces = list(found["pieces"])
        pieces[token] = MASK
        self.state = {
            "view": "pair" if paired else "sentence",
            "pieces": found["pieces"],
            "hidden": int(token),
            "truth": found["pieces"][token],
            "both ways": self._guessed(found["both ways"]),
            "left only": self._guessed(found["left only"]),
            "truth probability": {g: found[g]["truth"] for g in GROUPS},
            "truth rank": {g: found[g]["rank"] for g in GROUPS},
            "tokens": _shown(paired["pieces"] if paired else pieces),
            "weights": weights.numpy(),
            "layer": layer,
            "head": head,
            "match": paired["match"] if paired else None,
        }
        blank = [*found["pieces"][1:token], "▁" * found["pieces"][token].startswith("▁") + MASK,
                 *found["pieces"][token + 1 : -1]]  # fmt: skip
        self._draw_headline(blank, translation if paired else None)
        self._draw_bars()
        self._draw_map(layer, head)

    def _guessed(self, guesses: dict) -> list[tuple[str, float]]:
        pieces = [self.tokenizer.id_to_token(i) for i in guesses["ids"]]
        return list(zip(pieces, guesses["probabilities"], strict=True))

    def _draw_headline(self, pieces: list[str], translation: str | None) -> None:
        blank = _shortened("".join(p.replace("▁", " ") for p in pieces).strip())
        lines = [f"Fill in the blank: “{blank}”"]
        if translation is not None:
            lines.append(
                f"match probability {self.state['match']:.2f} (the fine-tuned pair model) "
                f"for “{_shortened(clean(translation), SHOWN_TRANSLATION)}”"
            )
        self._header.set_title("\n".join(lines), color="black", fontsize=12, parse_math=False)

    def _draw_bars(self) -> None:
        state, truth = self.state, self.state["truth"]
        rows = [(group, piece, p) for group in GROUPS for piece, p in state[group]]
        for bar, label, value, (group, piece, p) in zip(
            self._bars, self._bar_labels, self._value_labels, rows, strict=True
        ):
            right = piece == truth
            bar.set_width(p)
            bar.set_facecolor(COLOURS["truth"] if right else COLOURS[group])
            label.set_text(_shown([piece])[0])
            label.set_fontweight("bold" if right else "normal")
            label.set_color(COLOURS["truth"] if right else "black")
            inside = p > 0.85  # the number inside the bar's end, in white
            value.set_text(f"{p:.2f}" if p >= 0.005 else "<0.01")
            value.set_x(p - 0.01 if inside else p + 0.01)
            value.set_horizontalalignment("right" if inside else "left")
            value.set_color("white" if inside else "black")
        ranks, probabilities = state["truth rank"], state["truth probability"]
        each = " · ".join(
            f"{group}: {_probability(probabilities[group])}, rank {ranks[group]:,}"
            for group in GROUPS
        )
        self._bars_ax.set_title(
            f"the hidden piece: “{_shown([truth])[0]}” (green where guessed)\n{each}",
            color="black",
            fontsize=10,
            parse_math=False,
        )

    def _draw_map(self, layer: int, head: int | str) -> None:
        tokens = self.state["tokens"]
        n = len(tokens)
        self._map.show(self.state["weights"], tokens, tokens, grey=(CLS, SEP))
        size = 9 if n <= 16 else 8 if n <= 30 else 7 if n <= 45 else 6
        every = 1 if n <= 45 else 2  # a long pair's labels, every other one
        for labels in (self._map.x_labels, self._map.y_labels):
            for index, label in enumerate(labels[:n]):
                label.set_fontsize(size)
                if index % every:
                    label.set_text("")
                hidden = label.get_text() == MASK
                label.set_color("tab:red" if hidden else label.get_color())
                label.set_fontweight("bold" if hidden else "normal")
        for label in self._map.x_labels:
            label.set_rotation(90 if n > 6 else 0)
        which = "mean of the heads" if head == "mean" else f"head {head}"
        reader = (
            "the fine-tuned pair model reading [CLS] sentence [SEP] translation [SEP]"
            if self.state["view"] == "pair"
            else "the encoder reading the sentence, [MASK] in place"
        )
        self._map_ax.set_title(
            f"{reader}\nlayer {layer}, {which}", color="black", fontsize=10, parse_math=False
        )

    def show_error(self, ax, problem: Exception | str) -> None:
        """The problem as the headline, over emptied panels: no earlier guesses or map stay
        beside it (the base class calls this too, for a menu set to nothing)."""
        self.state = {"error": str(problem)}
        for bar in self._bars:
            bar.set_width(0)
        for text in (*self._bar_labels, *self._value_labels):
            text.set_text("")
        self._map.hide()
        for each in (self._bars_ax, self._map_ax):
            each.set_title("")
        super().show_error(self._header, problem)


def _checked_models(models: object) -> dict:
    if not isinstance(models, dict) or not {"masked", "causal"} <= set(models):
        found = f"the keys {list(models)}" if isinstance(models, dict) else type(models).__name__
        raise TypeError(
            'models must be a dict with the keys "masked" and "causal" (TextEncoders, as '
            f"helpers.encoder_only.load_pretrained() gives), got {found}"
        )
    for name, causal in (("masked", False), ("causal", True)):
        model = models[name]
        if not isinstance(model, TextEncoder):
            raise TypeError(f"models[{name!r}] must be a TextEncoder, got {type(model).__name__}")
        if model.config.causal != causal:
            expected = "the causal twin (config.causal True)" if causal else "not causal"
            raise ValueError(f"models[{name!r}] must be {expected}, got causal={not causal}")
        validation.weights_readable(model, f"models[{name!r}]")
    return {"masked": models["masked"], "causal": models["causal"]}


def _checked_pair_model(pair_model: object, encoder: TextEncoder) -> PairClassifier:
    if not isinstance(pair_model, PairClassifier):
        raise TypeError(f"pair_model must be a PairClassifier, got {type(pair_model).__name__}")
    validation.weights_readable(pair_model, "pair_model")
    mine, theirs = encoder.config, pair_model.encoder.config
    if theirs.causal:
        raise ValueError("pair_model's encoder must read both ways, got a causal one")
    if (mine.num_layers, mine.num_heads) != (theirs.num_layers, theirs.num_heads):
        raise ValueError(
            f"pair_model's encoder must have the layers and heads of models['masked'] (one menu "
            f"serves both): {theirs.num_layers} layers of {theirs.num_heads} heads against "
            f"{mine.num_layers} of {mine.num_heads}"
        )
    return pair_model


def _checked_token(token: object, row: list[int], error: type = None) -> int:
    """token as an int, if it is a position of the row's pieces: 1 to len(row) - 2. A token
    that is not a whole number raises a TypeError, one out of range a ValueError (error: the
    kind for both, where draw() answers in the figure)."""
    last = len(row) - 2
    if not _whole(token):
        raise (error or TypeError)(
            f"token must be a whole number, the position of a piece (1..{last}), got "
            f"{validation.shown(token):.40}"
        )
    if not 1 <= token <= last:
        raise (error or ValueError)(
            f"token must be one of 1..{last} (the sentence's pieces; 0 is [CLS]), got {token}"
        )
    return int(token)


def _whole(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _middle(row: list[int]) -> int:
    """The middle piece of [CLS] pieces [SEP] (the later one of two)."""
    return 1 + (len(row) - 2) // 2


def _attention(model: TextEncoder) -> torch.Tensor:
    """(layers, heads, n, n): each block's weights from the model's last forward pass (of one
    row)."""
    return torch.stack([block.self_attention.attention_weights[0] for block in model.blocks])


def _shown(pieces: list[str]) -> list[str]:
    """Pieces for the figure as chapter 08 shows them; [CLS], [SEP] and [MASK] as they are."""
    return [p if p in ENCODER_TOKENS else shown_tokens([p])[0] for p in pieces]


def _named_character(character: str) -> str:
    code = f"U+{ord(character):04X}"
    return f"'{character}' ({code})" if character.isprintable() and ord(character) < 0x250 else code


def _probability(p: float) -> str:
    return f"{p:.2f}" if p >= 0.005 else "<0.01"


def _shortened(text: str, most: int = SHOWN_CHARACTERS) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
