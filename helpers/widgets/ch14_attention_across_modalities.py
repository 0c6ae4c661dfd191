"""Chapter 14's explorers: words that look at pictures. A canvas of digits (one of the first test
canvases, or one composed by typing nine cells), and either a word to find ("seven": the digit
finder's one cross-attention query over the canvas's 36 patches) or a step through what the
canvas reader writes (its cross-attention as each token is written), the attention painted over
the image next to the model's answer. And a pad to draw digits on (DrawingExplorer): the reader
reads the drawing, the ViT names each digit drawn, and the reader's attention is painted over it."""

import re
import textwrap
from collections import OrderedDict

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from helpers import validation, vision_models
from helpers.contexts import plainly
from helpers.vision import (
    DIGIT_WORDS,
    DRAWING_SCALE,
    MAX_INK,
    PIXELS,
    cell_patches,
    check_pixels,
    check_strokes,
    ink_counts,
    load_digits,
    rasterise_strokes,
    refuse_nested,
    unpatchify,
)
from helpers.vision_models import (
    BOS,
    EOS,
    GRID,
    LARGEST_GRID,
    PAD,
    PATCH,
    CanvasReader,
    DigitFinder,
    VisionTransformer,
    check_model,
    finder_test_set,
    float64_copy,
    read_canvas,
)
from helpers.widgets.base import (
    Dropdown,
    Explorer,
    IntSlider,
    Text,
    ToggleButtons,
    one_torch_thread,
    settings_repr,
)
from helpers.widgets.direct import (
    TITLE_LINES,
    DirectExplorer,
    DirectWidget,
    are_numbers,
    front_end,
    is_text,
)

__all__ = ["CanvasExplorer", "DrawingExplorer", "DrawingPadWidget"]

MODES = ("find", "read")
SOURCES = ("test", "composed")
TEST_CANVASES = 50  # the slider's canvases: the first of helpers.vision_models.finder_test_set
DEFAULT_LAYOUT = "7 . . . 3 . . . 1"
CELLS = GRID * GRID
SIDE = GRID * PIXELS  # pixels across a canvas
PATCHES = (SIDE // PATCH) ** 2  # 36 patches of 4 x 4 pixels
COLOUR_LIMITS = (0.1, 0.25, 0.5, 1.0)  # the weight scale: the smallest that holds the largest
KEPT_BACKGROUNDS = 8  # one per mode and colour limit: switching back costs no redraw
COLOURS = {"answer": "tab:blue", "truth": "tab:green", "current": "gold"}
LEGENDS = {
    "find": ("the model's answer", "where the word's digit is"),
    "read": ("the cell with the most attention", "the cell this digit came from"),
}
TOKEN_NAMES = {BOS: "<bos>", EOS: "<eos>", PAD: "<pad>"}


class CanvasExplorer(Explorer):
    """Chapter 14: choose a test canvas or compose one (nine cells in reading order, a digit or
    "." for an empty cell), and a mode. "find": a word is the digit finder's query; see its
    attention over the canvas's patches, the cell it answers and the cell that holds the digit.
    "read": step through the tokens the canvas reader writes; see its cross-attention as each is
    written and the share of it on the cell that digit came from."""

    def __init__(
        self,
        canvas: int = 0,
        word: str = "seven",
        mode: str = "find",
        layout: str | None = None,
        models: dict | None = None,
        token: int = 0,
    ):
        """canvas: one of the first 50 test canvases, 0..49 (shown unless layout is given, its
        layout then in the compose box); layout: nine cells in reading order separated by
        spaces, each a digit 0-9 or "." for an empty cell, e.g. "7 . . . 3 . . . 1", filled
        with the first test image of each digit; token: the read-out token shown in "read"
        mode, 0 the first digit written; models: the dict
        helpers.vision_models.load_vision_models() returns, or one holding a "finder"
        (DigitFinder) and a "reader" (CanvasReader) (default: loaded from data/)."""
        canvas = _check_canvas(canvas)
        token = _check_choices(mode, word, token)
        if layout is not None and not isinstance(layout, str):
            raise TypeError(
                f"layout must be text (a str) of nine cells such as {DEFAULT_LAYOUT!r}, got "
                f"{type(layout).__name__}"
            )
        finder, reader = _checked_models(
            vision_models.load_vision_models() if models is None else models
        )
        self.finder, self.reader = _copied(finder, "finder"), _copied(reader, "reader")
        self.canvases = finder_test_set(TEST_CANVASES)[0]
        self._first_images = first_test_images()
        self._readings = {}
        self._backgrounds = OrderedDict()  # the last few rendered backgrounds, by their key
        source = "test" if layout is None else "composed"
        if layout is None:  # the compose box shows the test canvas's layout
            layout = layout_text(self.canvases.digits[canvas])
        try:
            with one_torch_thread():
                written = self._written_count(source, canvas, layout)
        except ValueError:  # a layout the figure answers with a message
            if token > CELLS:  # the reader writes at most a digit per cell and <eos>
                raise ValueError(
                    f"token must be a read-out token 0..{CELLS}: the reader writes at most "
                    f"{CELLS + 1} tokens, got {validation.shown(token)}"
                ) from None
            written = token + 1
        if token >= written:
            raise ValueError(
                f"token {validation.shown(token)} is beyond the read-out: the reader writes "
                f"{written} tokens on this canvas, 0..{written - 1}"
            )
        controls = {
            "mode": ToggleButtons(options=MODES, value=mode, description="mode"),
            "word": Dropdown(options=DIGIT_WORDS, value=word, description="find the word"),
            "token": IntSlider(value=token, min=0, max=written - 1, description="read-out token"),
            "source": ToggleButtons(options=SOURCES, value=source, description="canvas"),
            "canvas": IntSlider(
                value=canvas, min=0, max=TEST_CANVASES - 1, description="test canvas"
            ),
            "layout": Text(
                value=layout,
                description="compose",
                placeholder=f"nine cells: a digit 0-9 or '.', e.g. {DEFAULT_LAYOUT}",
                continuous_update=False,
                layout=widgets.Layout(width="35%"),
            ),
        }
        figure = self._build_figure()
        dynamic = [
            self._digits_image,
            self._overlay,
            self._answer_box,
            self._truth_box,
            *self._cell_lines,
            *self._cell_texts,
            *self._token_texts,
            self._image_ax.title,
            self._tokens_ax.title,
        ]
        rows = [["mode", "word", "token"], ["source", "canvas", "layout"]]
        super().__init__(controls, figure, dynamic, rows)
        self._enable_for(mode)

    # What the controls may choose

    def follow(self, control) -> None:
        """Moving the canvas slider shows a test canvas (and its layout in the compose box),
        typing a layout shows it; the token slider spans the tokens written on the canvas shown;
        a mode enables its own control."""
        controls = self.controls
        if control is controls["canvas"]:
            controls["source"].value = "test"
        elif control is controls["layout"]:
            controls["source"].value = "composed"
        elif control is controls["mode"]:
            self._enable_for(controls["mode"].value)
        values = self.values()
        try:
            if values["source"] == "test":  # the compose box shows the layout drawn
                shown = self.canvases.digits[_check_canvas(values["canvas"])]
                controls["layout"].value = layout_text(shown)
            written = self._written_count(values["source"], values["canvas"], values["layout"])
        except ValueError:  # a canvas or layout the figure answers with a message: all stay
            return
        token = controls["token"]
        token.value = min(token.value, written - 1)
        token.max = written - 1

    def _enable_for(self, mode: str) -> None:
        self.controls["word"].disabled = mode != "find"
        self.controls["token"].disabled = mode != "read"

    # The figure

    def _build_figure(self) -> Figure:
        figure = Figure(figsize=(7.6, 6.6))
        self._image_ax = figure.add_axes((0.14, 0.25, 0.52, 0.6))  # first: errors go here
        self._tokens_ax = figure.add_axes((0.04, 0.03, 0.92, 0.07))
        colour_ax = figure.add_axes((0.7, 0.25, 0.025, 0.6))
        ax = self._image_ax
        self._digits_image = ax.imshow(
            np.zeros((SIDE, SIDE)), cmap="gray_r", vmin=0, vmax=1, interpolation="nearest"
        )
        self._overlay = ax.imshow(
            np.zeros((SIDE, SIDE)), cmap="Reds", vmin=0, vmax=COLOUR_LIMITS[0],
            interpolation="nearest",
        )  # fmt: skip
        self._colour_bar = figure.colorbar(
            self._overlay, cax=colour_ax, label="attention weight of each patch"
        )
        self._cell_lines = []  # the cells' borders and numbers, drawn over the images
        for edge in range(PIXELS, SIDE, PIXELS):
            self._cell_lines.append(ax.axhline(edge - 0.5, color="0.6", lw=0.8))
            self._cell_lines.append(ax.axvline(edge - 0.5, color="0.6", lw=0.8))
        centres = [PIXELS * i + PIXELS / 2 - 0.5 for i in range(GRID)]
        ax.set_xticks(centres, [str(i) for i in range(GRID)])
        ax.set_yticks(centres, [str(i) for i in range(GRID)])
        ax.set_xlabel("column")
        ax.set_ylabel("row")
        self._answer_box = ax.add_patch(_cell_box(COLOURS["answer"], "-"))
        self._truth_box = ax.add_patch(_cell_box(COLOURS["truth"], "--"))
        self._cell_texts = []
        for cell in range(CELLS):
            row, col = divmod(cell, GRID)
            number = ax.text(
                col * PIXELS - 0.2, row * PIXELS - 0.2, f"cell {cell}",
                fontsize=7, color="0.45", va="top", ha="left",
            )  # fmt: skip
            self._cell_lines.append(number)
            self._cell_texts.append(
                ax.text(  # the attention on the cell, redrawn
                    (col + 1) * PIXELS - 0.8,
                    (row + 1) * PIXELS - 0.8,
                    "",
                    fontsize=8,
                    color="black",
                    va="bottom",
                    ha="right",
                )  # fmt: skip
            )
        self._tokens_ax.set_axis_off()
        self._tokens_ax.set_xlim(0, CELLS + 1)
        self._token_texts = [
            self._tokens_ax.text(index + 0.5, 0.5, "", ha="center", va="center", fontsize=12)
            for index in range(CELLS + 1)
        ]
        self._set_legend("find")
        return figure

    def _set_legend(self, mode: str) -> None:
        """The outlines' legend names what they mean in the mode (part of the background)."""
        answer, truth = LEGENDS[mode]
        handles = [
            Line2D([], [], color=COLOURS["answer"], lw=2, label=answer),
            Line2D([], [], color=COLOURS["truth"], lw=2, ls="--", label=truth),
        ]
        self._image_ax.legend(
            handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=2, fontsize=8
        )
        self._legend_mode = mode

    def render_png(self) -> bytes:
        """The base class's PNG, with a background drawn before for the same mode and colour
        scale reused instead of drawn again (the legend and the colour bar differ)."""
        key = (self._legend_mode, self._overlay.norm.vmax)
        if self._background is None and key in self._backgrounds:
            self._background = self._backgrounds[key]
        png = super().render_png()
        self._backgrounds[key] = self._background
        self._backgrounds.move_to_end(key)
        if len(self._backgrounds) > KEPT_BACKGROUNDS:
            self._backgrounds.popitem(last=False)
        return png

    def __repr__(self) -> str:
        """The constructor call that rebuilds this view: the test canvas's number, or the typed
        layout (the "canvas" toggle is not an argument: layout given means composed)."""
        values = self.values()
        left_out = ("source", "layout" if values["source"] == "test" else "canvas")
        return settings_repr(self, {k: v for k, v in values.items() if k not in left_out})

    # The numbers, each from helpers

    def canvas_shown(self, source: str, canvas: int, layout: str) -> tuple:
        """(image (1, 1, 24, 24) float64, digits (9,) labels in reading order, -1 where empty)
        of the test canvas or of the typed layout (a ValueError says what to type instead)."""
        _one_of(source, SOURCES, "source")
        canvas = _check_canvas(canvas)
        if source == "test":
            return self.canvases.images[canvas : canvas + 1].double(), self.canvases.digits[canvas]
        digits = parse_layout(layout)
        return compose_canvas(digits, self._first_images), digits

    def _written_count(self, source: str, canvas: int, layout: str) -> int:
        image, digits = self.canvas_shown(source, canvas, layout)
        return len(self.reading(image)["written"])

    @torch.no_grad()
    def finding(self, image: torch.Tensor, word: str) -> dict:
        """The finder on the canvas for the word ("seven", one the word menu offers): its cell
        probabilities (9,) and its attention weights over the canvas's patches (36,)."""
        _check_image(image)
        digit = DIGIT_WORDS.index(_one_of(word, DIGIT_WORDS, "word"))
        probabilities = self.finder(image, torch.tensor([digit])).softmax(-1)[0]  # (9,)
        return {
            "probabilities": probabilities,
            "attention": self.finder.attention.attention_weights[0, 0, 0],  # (36,)
        }

    def reading(self, image: torch.Tensor) -> dict:
        """read_with_attention of the explorer's reader, kept by the canvas's pixels; a copy,
        which the caller may change without changing what the explorer keeps."""
        _check_image(image)
        key = image.detach().numpy().tobytes()  # the reading is computed without gradients
        if key not in self._readings:
            if len(self._readings) > 2 * TEST_CANVASES:
                self._readings.clear()
            self._readings[key] = read_with_attention(self.reader, image)
        kept = self._readings[key]
        return {"written": list(kept["written"]), "attention": kept["attention"].clone()}

    def unused(self, values: dict) -> set[str]:
        unused = super().unused(values)  # which checks values
        if values.get("mode") == "read":
            return unused | {"word"}  # the reader reads every other control
        return unused

    def draw(self, mode, word, token, source, canvas, layout) -> None:
        token = _check_choices(mode, word, token)
        try:
            image, digits = self.canvas_shown(source, canvas, layout)
            if mode == "find":
                _check_distinct(digits)
        except ValueError as problem:
            self._show_problem(problem)
            return
        self.state = {
            "mode": mode,
            "source": source,
            "canvas": canvas if source == "test" else None,
            "digits": digits.tolist(),
            "image": image[0, 0],
        }
        if mode == "find":
            self._find(image, digits, word)
        else:
            self._read(image, digits, token)
        self._draw_image(mode)

    def _find(self, image: torch.Tensor, digits: torch.Tensor, word: str) -> None:
        found = self.finding(image, word)
        attention = found["attention"]
        answer = int(found["probabilities"].argmax())
        cells = (digits == DIGIT_WORDS.index(word)).nonzero().flatten().tolist()
        truth = cells[0] if cells else None
        self.state.update(
            word=word,
            attention=attention,
            probabilities=found["probabilities"],
            answer=answer,
            true_cell=truth,
            mass_on_true_cell=None if truth is None else cell_mass(attention, truth),
            mass_on_answer=cell_mass(attention, answer),
        )
        self._tokens_ax.set_title("")
        for text in self._token_texts:
            text.set_visible(False)

    def _read(self, image: torch.Tensor, digits: torch.Tensor, token: int) -> None:
        reading = self.reading(image)
        written = reading["written"]
        if token >= len(written):
            raise ValueError(  # the slider spans the read-out: only a direct call gets here
                f"token {token} is beyond the read-out: the reader writes {len(written)} tokens "
                f"on this canvas, 0..{len(written) - 1}"
            )
        attention = reading["attention"][token]
        filled = (digits >= 0).nonzero().flatten().tolist()  # the cells in reading order
        is_digit = 0 <= written[token] <= 9
        source = filled[token] if is_digit and token < len(filled) else None
        self.state.update(
            written=written,
            token=token,
            attention=attention,
            filled_cells=filled,
            source_cell=source,
            share_on_source=None if source is None else cell_mass(attention, source),
            answer=most_attended_cell(attention),
        )
        self._draw_tokens(written, token)

    def _draw_tokens(self, written: list[int], token: int) -> None:
        for index, text in enumerate(self._token_texts):
            text.set_visible(index < len(written))
            if index >= len(written):
                continue
            text.set_text(TOKEN_NAMES.get(written[index], str(written[index])))
            text.set_color("black" if index <= token else "0.7")  # written so far, or later
            text.set_bbox(
                {"facecolor": COLOURS["current"], "edgecolor": "none"} if index == token else None
            )
        self._tokens_ax.set_title(
            "what the reader writes (greedy), in reading order; the highlighted token is shown",
            fontsize=9, color="black", parse_math=False,
        )  # fmt: skip

    def _draw_image(self, mode: str) -> None:
        state = self.state
        attention = state["attention"]
        painted = unpatchify(
            attention[None, :, None].expand(1, -1, PATCH * PATCH), PATCH, (SIDE, SIDE)
        )[0, 0]  # (24, 24): each patch's weight over its 4 x 4 pixels
        state["painted"] = painted
        self._digits_image.set_data(state["image"].numpy())
        self._digits_image.set_visible(True)
        top = next((limit for limit in COLOUR_LIMITS if float(painted.max()) <= limit), 1.0)
        if self._overlay.norm.vmax != top:
            self._overlay.set_clim(0, top)
            self.redraw_background()
        self._overlay.set_data(painted.numpy())
        self._overlay.set_alpha(0.2 + 0.45 * np.clip(painted.numpy() / top, 0, 1))
        self._overlay.set_visible(True)
        _place(self._answer_box, state["answer"])
        _place(self._truth_box, state["true_cell"] if mode == "find" else state["source_cell"])
        for cell, text in enumerate(self._cell_texts):
            text.set_text(f"{cell_mass(attention, cell):.0%}")
            text.set_visible(True)
        if self._legend_mode != mode:
            self._set_legend(mode)
            self.redraw_background()
        caption = _find_caption(state) if mode == "find" else _read_caption(state)
        self._image_ax.set_title(caption, color="black", fontsize=10, parse_math=False)

    def _show_problem(self, problem: Exception) -> None:
        self.state = {"error": str(problem)}
        for artist in (self._digits_image, self._overlay, self._answer_box, self._truth_box):
            artist.set_visible(False)
        for text in (*self._cell_texts, *self._token_texts):
            text.set_visible(False)
        self._tokens_ax.set_title("")
        self.show_error(self._image_ax, textwrap.fill(str(problem), 80))


@plainly
@torch.no_grad()
def read_with_attention(reader: CanvasReader, image: torch.Tensor) -> dict:
    """What the reader writes on the canvas (1, 1, 24, 24) (greedy: the digits, then <eos>, its
    first <eos> the last token) as "written", and its cross-attention as each is written
    (tokens, 36) as "attention": the last decoder block's, averaged over its heads (how
    helpers.vision_models measures it)."""
    _check_image(image)
    tokens = read_canvas(reader, image)[0].tolist()
    end = tokens.index(EOS) + 1 if EOS in tokens else len(tokens)
    written = tokens[:end]
    reader(image, torch.tensor([[BOS, *written[:-1]]]))
    attention = reader.decoder[-1].cross_attention.attention_weights[0].mean(0)  # (T, 36)
    return {"written": written, "attention": attention}


def _check_image(image: object) -> None:
    """image is a canvas as the explorers' float64 models read it: (1, 1, 24, 24) float64
    pixels in 0..1."""
    shape = f"(1, 1, {SIDE}, {SIDE})"
    validation.tensor(image, "image", shape)
    refuse_nested(image, "image", shape)
    if tuple(image.shape) != (1, 1, SIDE, SIDE) or image.dtype != torch.float64:
        raise ValueError(
            f"image must be a float64 canvas {shape}, pixels 0..1 (ink counts / MAX_INK), got "
            f"{image.dtype} of shape {tuple(image.shape)}"
        )
    check_pixels(image, "image", shape)


def _one_of(value: object, options: tuple, name: str) -> str:
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {validation.shown(value)}")
    return value


def _check_canvas(canvas: object) -> int:
    canvas = validation.whole_number(canvas, "canvas", minimum=0)
    if canvas >= TEST_CANVASES:
        raise ValueError(
            f"canvas must be one of the first {TEST_CANVASES} test canvases, "
            f"0..{TEST_CANVASES - 1}, got {validation.shown(canvas)}"
        )
    return canvas


def _check_choices(mode: object, word: object, token: object) -> int:
    """The token as an int, if the mode, the word and the token are ones the controls offer
    (the token's end is the read-out's, checked where the read-out is known)."""
    _one_of(mode, MODES, "mode")
    if mode == "find" or word is not None:  # read mode reads every digit, the menu unset too
        _one_of(word, DIGIT_WORDS, "word")
    return validation.whole_number(token, "token", minimum=0)


@plainly
def first_test_images() -> torch.Tensor:
    """(10, 1, 8, 8): the first test image of each digit, what a composed canvas is made of."""
    test = load_digits()[1]
    return torch.stack([test.images[(test.labels == digit).nonzero()[0, 0]] for digit in range(10)])


@plainly
def parse_layout(text: str) -> torch.Tensor:
    """Nine typed cells in reading order (a digit 0-9 or "." for an empty cell, separated by
    spaces) as (9,) labels, -1 where empty; or a ValueError that says what to type instead."""
    example = (
        f"type {CELLS} cells in reading order, each a digit 0-9 or '.' for an empty cell, "
        f"separated by spaces, e.g. {DEFAULT_LAYOUT}"
    )
    if not isinstance(text, str):
        raise ValueError(f"{example}; got {type(text).__name__}")
    cells = text.split()
    for cell in cells:
        if not re.fullmatch(r"[0-9.]", cell):
            shown = ascii(cell[:20])  # escapes: another script's digit, or an invisible character
            raise ValueError(f"{shown} is not a digit 0-9 or '.': {example}")
    if len(cells) != CELLS:
        raise ValueError(f"{len(cells)} cells, not {CELLS}: {example}")
    digits = torch.tensor([-1 if cell == "." else int(cell) for cell in cells])
    if (digits < 0).all():
        raise ValueError("an empty canvas: put at least one digit in it")
    return digits


@plainly
def layout_text(digits: torch.Tensor) -> str:
    """(9,) labels in reading order, -1 where empty, as parse_layout reads them, e.g.
    "7 . . . 3 . . . 1"."""
    _check_layout(digits)
    return " ".join("." if digit < 0 else str(digit) for digit in digits.tolist())


@plainly
def compose_canvas(digits: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """(1, 1, 24, 24) float64: images[d] (the digit d's image, (10, 1, 8, 8)) in each cell
    whose label is d, black where it is -1."""
    _check_layout(digits)
    refuse_nested(images, "images", "(10, 1, 8, 8)")
    if not isinstance(images, torch.Tensor) or tuple(images.shape) != (10, 1, PIXELS, PIXELS):
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"images must be a tensor (10, 1, 8, 8), one per digit, got {got}")
    check_pixels(images, "images", "(10, 1, 8, 8)")
    canvas = torch.zeros(1, 1, SIDE, SIDE, dtype=torch.float64)
    for cell, digit in enumerate(digits.tolist()):
        if digit >= 0:
            row, col = divmod(cell, GRID)
            rows, cols = (
                slice(row * PIXELS, (row + 1) * PIXELS),
                slice(col * PIXELS, (col + 1) * PIXELS),
            )
            canvas[0, :, rows, cols] = images[digit]
    return canvas


def _check_layout(digits: object) -> None:
    """digits is a canvas's layout as parse_layout makes it: a (9,) integer tensor of labels
    -1..9 in reading order."""
    shape = f"({CELLS},) labels -1..9 in reading order, -1 where empty"
    validation.dense_tensor(digits, "digits", shape)
    if (
        tuple(digits.shape) != (CELLS,)
        or digits.is_floating_point()
        or digits.is_complex()
        or digits.dtype == torch.bool
    ):
        raise ValueError(
            f"digits must be an integer tensor {shape}, got {digits.dtype} of shape "
            f"{tuple(digits.shape)}"
        )
    if int(digits.min()) < -1 or int(digits.max()) > 9:
        raise ValueError(f"digits must be {shape}, got {digits.tolist()}")


def _check_distinct(digits: torch.Tensor) -> None:
    labels = digits[digits >= 0].tolist()
    twice = next((digit for digit in labels if labels.count(digit) > 1), None)
    if twice is not None:
        raise ValueError(
            f"the digit {twice} is on the canvas twice: to find a word's digit, each digit may "
            "be there once (read mode reads repeats)"
        )


@plainly
def cell_mass(attention: torch.Tensor, cell: int) -> float:
    """The attention weight (36,) on the patches of one cell (helpers.vision.cell_patches)."""
    if isinstance(attention, torch.Tensor):
        validation.dense_tensor(attention, "attention", f"({PATCHES},)")
    if not isinstance(attention, torch.Tensor) or attention.shape != (PATCHES,):
        got = tuple(attention.shape) if isinstance(attention, torch.Tensor) else attention
        raise ValueError(
            f"attention must be a tensor ({PATCHES},), a weight per patch, got "
            f"{validation.shown(got)}"
        )
    validation.attention_weights(attention, "attention", f"({PATCHES},)")
    return float(attention[cell_patches(cell, GRID, PATCH)].sum())


@plainly
def most_attended_cell(attention: torch.Tensor) -> int:
    return max(range(CELLS), key=lambda cell: cell_mass(attention, cell))


def _cell_name(cell: int) -> str:
    row, col = divmod(cell, GRID)
    return f"cell {cell} (row {row}, column {col})"


def _find_caption(state: dict) -> str:
    word, answer = state["word"], state["answer"]
    said = f"the finder answers {_cell_name(answer)}, p = {state['probabilities'][answer]:.2f}"
    if state["true_cell"] is None:
        return (
            f"no {word} on this canvas, yet {said}\nwith {state['mass_on_answer']:.0%} of the "
            "query's attention on that cell"
        )
    verdict = "right" if answer == state["true_cell"] else "wrong"
    return (
        f'"{word}": {state["mass_on_true_cell"]:.0%} of the query\'s attention on '
        f"{_cell_name(state['true_cell'])}, where it is\n{said}: {verdict}"
    )


def _read_caption(state: dict) -> str:
    written, token = state["written"], state["token"]
    digits = [state["digits"][cell] for cell in state["filled_cells"]]
    step = f"read-out token {token} (of 0..{len(written) - 1})"
    most = f"most attention on {_cell_name(state['answer'])}"
    if written[token] == EOS:
        read = f"after {token} of the canvas's {len(digits)} digits"
        return f"{step}: <eos>, the end, {read}\n{most}"
    if not 0 <= written[token] <= 9:
        return f"{step}: writes {TOKEN_NAMES[written[token]]}, not a digit: no cell\n{most}"
    if token >= len(digits):
        return (
            f"{step}: writes {written[token]}, but the canvas holds only {len(digits)} "
            f"digits: no cell it came from\n{most}"
        )
    source, true_digit = state["source_cell"], digits[token]
    if written[token] == true_digit:
        what = f"writes {true_digit}, from {_cell_name(source)}"
    else:
        what = (
            f"writes {written[token]} where the canvas's digit is {true_digit}, "
            f"{_cell_name(source)}"
        )
    return f"{step}: {what}\n{state['share_on_source']:.0%} of its attention on that cell; {most}"


def _cell_box(colour: str, style: str) -> Rectangle:
    return Rectangle((0, 0), PIXELS, PIXELS, fill=False, edgecolor=colour, lw=2.5, ls=style)


def _place(box: Rectangle, cell: int | None) -> None:
    """Outline the cell, or hide the outline for None."""
    box.set_visible(cell is not None)
    if cell is not None:
        row, col = divmod(cell, GRID)
        box.set_xy((col * PIXELS - 0.5, row * PIXELS - 0.5))


MODEL_KINDS = {"vit": VisionTransformer, "finder": DigitFinder, "reader": CanvasReader}


def _checked_models(models: object, names: tuple = ("finder", "reader")) -> tuple:
    """The named models of `models` (load_vision_models()'s dict), in the order of names: each
    of its kind (MODEL_KINDS), with finite weights, the finder and the reader for 3 x 3
    canvases."""
    if not isinstance(models, dict):
        raise TypeError(
            "models must be the dict helpers.vision_models.load_vision_models() returns, got "
            f"{type(models).__name__}"
        )
    missing = [name for name in names if name not in models]
    if missing:
        wanted = " and ".join(f"a {name!r} ({MODEL_KINDS[name].__name__})" for name in names)
        raise ValueError(f"models lacks {missing}: it must hold {wanted}")
    for name in names:
        model = check_model(models[name], MODEL_KINDS[name], f"models[{name!r}]")
        if not isinstance(model, VisionTransformer) and model.grid != GRID:
            raise ValueError(
                f"models[{name!r}] reads {model.grid} x {model.grid} canvases; the explorer "
                f"shows {GRID} x {GRID}"
            )
    return tuple(models[name] for name in names)


def _copied(model: torch.nn.Module, name: str) -> torch.nn.Module:
    """float64_copy(model), the explorer's own, its refusal (a hook on the model, a module
    replaced, sizes changed, ...) naming which of the models it is."""
    try:
        return float64_copy(model)
    except ValueError as error:
        raise ValueError(f"models[{name!r}]: {error}") from None


# Draw digits: the pad (js/pad.js) and its explorer

PAD_SIZE = SIDE * DRAWING_SCALE  # drawing-grid cells across the pad: 96, 4 per canvas pixel
STROKE_DECIMALS = 2  # the learner's points are kept to a hundredth of a grid cell
SHOWN_DECIMALS = 3  # the attention and probabilities the view carries
BLANK_TITLE = "nothing drawn yet: draw a digit in any of the nine cells, one digit a cell"


class DrawingPadWidget(DirectWidget):
    """A pad the learner draws digits on with the mouse, or with the arrow keys and Space
    (js/pad.js); it shows the reader's attention over the drawing and what the models see."""

    _esm = front_end("protocol.js", "pad.js")


class DrawingExplorer(DirectExplorer):
    """Chapter 14: draw digits on a 3 x 3 pad, one a cell. The drawing becomes a 24 x 24 canvas
    as the UCI digits were made (ink counted in 4 x 4 blocks, helpers.vision.ink_counts); the
    canvas reader writes what it reads, with its cross-attention over the 36 patches as it
    writes each token (painted over the drawing for the token you pick); the ViT names the
    digit in each cell that has ink, with its probability."""

    def __init__(self, strokes=(), models: dict | None = None):
        """strokes: a drawing to start from, a list of strokes, each a list of [x, y] points on
        the 96 x 96 drawing grid (x across, y down; 32 per cell); models: the dict
        helpers.vision_models.load_vision_models() returns, or one holding a "vit"
        (VisionTransformer) and a "reader" (CanvasReader) (default: loaded from data/)."""
        vit, reader = _checked_models(
            vision_models.load_vision_models() if models is None else models, ("vit", "reader")
        )
        self.vit, self.reader = _copied(vit, "vit"), _copied(reader, "reader")
        self.strokes = _kept_strokes(strokes)
        super().__init__(DrawingPadWidget(), {})

    def draw(self, strokes) -> None:
        """Show this drawing, as the pad in the browser sends it (a bad one: the view says why,
        and the drawing stays as it was)."""
        self.live.request = {"seq": self._seq + 1, "strokes": strokes}

    def clear(self) -> None:
        self.draw([])

    def accept(self, request: dict) -> None:
        if not isinstance(request, dict) or "strokes" not in request:
            got = (
                f"the keys {sorted(str(key) for key in request if key != 'seq')!r:.80}"
                if isinstance(request, dict)
                else f"a {type(request).__name__}"
            )
            raise ValueError(f"expected {{'strokes': [[[x, y], ...], ...]}}, got {got}")
        self.strokes = _kept_strokes(request["strokes"])

    @torch.no_grad()
    def compute(self) -> dict:
        counts = ink_counts(rasterise_strokes(self.strokes, PAD_SIZE))  # (1, 1, 24, 24) 0..16
        image = counts / MAX_INK  # the models' pixels, 0..1, as helpers.vision.load_digits
        reading = read_with_attention(self.reader, image)
        inked, probabilities = self.naming(image)
        self.state = {
            "strokes": [list(stroke) for stroke in self.strokes],  # a copy: not the drawing
            "counts": counts[0, 0],
            "image": image,
            "written": reading["written"],
            "attention": reading["attention"],  # (tokens, 36)
            "inked_cells": inked,
            "probabilities": probabilities,  # (inked cells, 10)
        }
        tokens = [_token_view(token, row) for token, row in zip(*reading.values(), strict=True)]
        guesses = [
            {
                "cell": cell,
                "guess": int(row.argmax()),
                "probability": round(float(row.max()), SHOWN_DECIMALS),
            }
            for cell, row in zip(inked, probabilities, strict=True)
        ]
        return {
            "strokes": [[list(point) for point in stroke] for stroke in self.strokes],
            "counts": counts[0, 0].long().tolist(),
            "pad": {"size": PAD_SIZE, "cells": GRID, "patches": SIDE // PATCH},
            "tokens": tokens,
            "guesses": guesses,
            "table": _drawing_table(tokens, guesses),
            "title": _drawing_title(tokens, guesses),
        }

    @torch.no_grad()
    def naming(self, image: torch.Tensor) -> tuple[list[int], torch.Tensor]:
        """(the cells with ink, in reading order; the ViT's probabilities of the ten digits for
        each, (cells, 10))."""
        _check_image(image)
        cells = image[0, 0].reshape(GRID, PIXELS, GRID, PIXELS).transpose(1, 2)  # (3, 3, 8, 8)
        cells = cells.reshape(CELLS, 1, PIXELS, PIXELS)  # (9, 1, 8, 8) in reading order
        inked = (cells.flatten(1) > 0).any(1).nonzero().flatten().tolist()
        if not inked:
            return [], torch.zeros(0, 10, dtype=torch.float64)
        return inked, self.vit(cells[inked]).softmax(-1)

    def static_figure(self) -> Figure:
        return drawing_figure(self.live.view)

    def __repr__(self) -> str:
        points = sum(len(stroke) for stroke in self.strokes)
        return f"DrawingExplorer({len(self.strokes)} strokes, {points} points)"


def _kept_strokes(strokes: object) -> list[list[tuple[float, float]]]:
    """The strokes checked and clamped to the pad (helpers.vision.check_strokes), each point
    rounded to STROKE_DECIMALS: what the explorer computes with and the pad shows."""
    return [
        [(round(x, STROKE_DECIMALS), round(y, STROKE_DECIMALS)) for x, y in stroke]
        for stroke in check_strokes(strokes, PAD_SIZE)
    ]


def _token_view(token: int, attention: torch.Tensor) -> dict:
    """A token the reader wrote and its attention (36,) over the patches, for the pad."""
    shares = [cell_mass(attention, cell) for cell in range(CELLS)]
    most = most_attended_cell(attention)
    return {
        "label": TOKEN_NAMES.get(token, str(token)),
        "attention": [round(w, SHOWN_DECIMALS) for w in attention.tolist()],
        "cell_shares": [round(share, SHOWN_DECIMALS) for share in shares],
        "most_attended_cell": most,
    }


def _drawing_table(tokens: list, guesses: list) -> dict:
    rows = [
        [
            "reader",
            f"token {index + 1}",
            token["label"],
            str(token["most_attended_cell"]),
            f"{token['cell_shares'][token['most_attended_cell']]:.3f}",
        ]
        for index, token in enumerate(tokens)
    ]
    rows += [
        ["ViT", f"cell {guess['cell']}", str(guess["guess"]), str(guess["cell"]),
         f"{guess['probability']:.3f}"]
        for guess in guesses
    ]  # fmt: skip
    columns = ["model", "step", "says", "cell", "attention on the cell / probability"]
    return {"columns": columns, "rows": rows}


def _drawing_title(tokens: list, guesses: list) -> str:
    if not guesses:
        return BLANK_TITLE
    written = " ".join(token["label"] for token in tokens)
    named = ", ".join(
        f"{guess['guess']} in cell {guess['cell']} (p = {guess['probability']:.2f})"
        for guess in guesses
    )
    return f"the reader writes {written}; the ViT sees {named}"


@plainly
def drawing_figure(view: dict) -> Figure:
    """A pad's view as a matplotlib figure: the drawing on the left; on the right the 24 x 24
    canvas the models see with the reader's attention as it writes its first token, each
    inked cell labelled with the ViT's guess; the title names what both read."""
    size, cells = _check_view(view)
    figure = Figure(figsize=(9, 5.2), layout="constrained")
    drawn, seen = figure.subplots(1, 2)
    inked = rasterise_strokes(view["strokes"], size)  # (96, 96) as the pen inks the grid
    drawn.imshow(
        inked.numpy(), cmap="gray_r", vmin=0, vmax=1, extent=(0, size, size, 0),
        interpolation="nearest",
    )  # fmt: skip
    drawn.set_title(f"what you drew ({size} x {size} grid)", fontsize=10)
    drawn.set_xlabel("x (grid cells)")
    drawn.set_ylabel("y (grid cells)")
    counts = np.asarray(view["counts"], dtype=float)
    side = len(counts)
    seen.imshow(counts, cmap="gray_r", vmin=0, vmax=MAX_INK, interpolation="nearest")
    tokens = view["tokens"]
    if tokens:
        attention = torch.tensor(tokens[0]["attention"], dtype=torch.float64)
        painted = unpatchify(
            attention[None, :, None].expand(1, -1, PATCH * PATCH), PATCH, (side, side)
        )
        top = max(0.1, float(attention.max()))
        overlay = seen.imshow(
            painted[0, 0].numpy(), cmap="Reds", vmin=0, vmax=top, interpolation="nearest",
            alpha=0.65 * painted[0, 0].clamp(max=top).numpy() / top,
        )  # fmt: skip
        figure.colorbar(overlay, ax=seen, shrink=0.8).set_label(
            f"attention as it writes {tokens[0]['label']}", parse_math=False
        )
    for ax, extent in ((drawn, size), (seen, side)):
        for edge in range(1, cells):
            position = edge * extent / cells - (0 if ax is drawn else 0.5)  # pixel centres
            ax.axhline(position, color="0.7", lw=0.8)
            ax.axvline(position, color="0.7", lw=0.8)
    for guess in view["guesses"]:
        row, col = divmod(guess["cell"], cells)
        seen.text(
            col * PIXELS - 0.3, (row + 1) * PIXELS - 0.7,
            f"ViT: {guess['guess']} (p {guess['probability']:.2f})",
            fontsize=8, color="tab:blue", va="bottom", ha="left",
            bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1},
        )  # fmt: skip
    seen.set_title("what the models see: ink per 4 x 4 block, 0..16", fontsize=10)
    seen.set_xlabel("column (pixels)")
    seen.set_ylabel("row (pixels)")
    title = view.get("title") or ""
    if view.get("problem"):
        title = f"⚠ {view['problem']}"
    shown = textwrap.fill(title, 110, max_lines=TITLE_LINES, placeholder=" …")
    figure.suptitle(
        shown, fontsize=10, color="tab:red" if view.get("problem") else "black",
        parse_math=False,  # the text may quote a typed '$'
    )  # fmt: skip
    return figure


VIEW = (
    "a view must be the dict a DrawingExplorer's pad shows (explorer.live.view), holding "
    "'strokes' (a list of strokes of [x, y] points), 'pad' ({'size': the drawing grid's cells "
    f"across, {PIXELS * DRAWING_SCALE} per canvas cell, 'cells': the canvas's cells across}}), "
    "'counts' (cells * 8 rows of as many ink counts 0..16), 'tokens' (the reader's, each "
    "{'label': text, 'attention': a weight 0..1 per 4 x 4 patch}) and 'guesses' (the ViT's, "
    "each {'cell', 'guess' 0..9, 'probability' 0..1})"
)


def _check_view(view: object) -> tuple[int, int]:
    """(the drawing grid's size, the canvas's cells across) of a view drawing_figure can draw;
    otherwise an error naming what a view must hold and what this one lacks."""
    if not isinstance(view, dict):
        raise TypeError(f"{VIEW}; got a {type(view).__name__}")
    missing = [key for key in ("strokes", "pad", "counts", "tokens", "guesses") if key not in view]
    pad = view.get("pad")
    if missing or not isinstance(pad, dict) or not {"size", "cells"} <= set(pad):
        lacks = f"it lacks {missing}" if missing else f"its 'pad' is {validation.shown(pad)}"
        raise ValueError(f"{VIEW}; {lacks}")
    size = validation.whole_number(pad["size"], "the view's pad size")
    cells = validation.whole_number(pad["cells"], "the view's pad cells")
    if cells > LARGEST_GRID:
        raise ValueError(
            f"{VIEW}; its pad's cells must be at most {LARGEST_GRID}, got {validation.shown(cells)}"
        )
    if size != cells * PIXELS * DRAWING_SCALE:
        raise ValueError(
            f"{VIEW}; its pad's size must be {cells * PIXELS * DRAWING_SCALE} for {cells} cells, "
            f"got {validation.shown(size)}"
        )
    side = cells * PIXELS
    counts = view["counts"]
    rows_ok = isinstance(counts, list) and len(counts) == side
    if not rows_ok or not all(are_numbers(row, side, 0, MAX_INK) for row in counts):
        raise ValueError(f"{VIEW}; its 'counts' are not {side} rows of {side} counts 0..16")
    tokens, guesses = view["tokens"], view["guesses"]
    patches = (side // PATCH) ** 2
    if not isinstance(tokens, list) or not all(
        isinstance(token, dict)
        and is_text(token.get("label"))
        and are_numbers(token.get("attention"), patches, 0, 1)
        for token in tokens
    ):
        raise ValueError(f"{VIEW}; its 'tokens' are not that, with {patches} weights each")
    if not isinstance(guesses, list) or not all(
        isinstance(guess, dict)
        and are_numbers([guess.get("cell")], 1, 0, cells * cells - 1, whole=True)
        and are_numbers([guess.get("guess")], 1, 0, 9, whole=True)
        and are_numbers([guess.get("probability")], 1, 0, 1)
        for guess in guesses
    ):
        raise ValueError(f"{VIEW}; its 'guesses' are not that, cells 0..{cells * cells - 1}")
    if len(guesses) > cells * cells:
        raise ValueError(
            f"{VIEW}; its 'guesses' are {len(guesses)}, more than its {cells * cells} cells (one "
            "guess a cell at most)"
        )
    for key in ("title", "problem"):
        if view.get(key) is not None and not is_text(view[key]):
            raise ValueError(
                f"{VIEW}; its {key!r} must be text, got {validation.shown(view[key])}: a str "
                "that encodes as UTF-8 (no lone surrogates, which no font can draw)"
            )
    return size, cells
