"""What every explorer shares: the Explorer base class (controls, a figure redrawn in place,
its PNG), one_torch_thread, and the small pieces more than one chapter's explorer uses."""

import inspect
import itertools
import math
import numbers
import struct
import zlib
from collections import OrderedDict

import ipywidgets as widgets
import numpy as np
from matplotlib import text as mpl_text
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from traitlets import Any, Float, Int, TraitError, Unicode, validate

from helpers.contexts import one_torch_thread, plain_torch, plainly
from helpers.plotting import TokenHeatmap, draw_heatmap
from helpers.validation import shown

__all__ = [
    "Dropdown",
    "Explorer",
    "FloatLogSlider",
    "FloatSlider",
    "IntSlider",
    "IntText",
    "SelectionSlider",
    "Text",
    "ToggleButtons",
    "one_torch_thread",
]


class Explorer:
    """Controls, a figure and the glue: subclasses build the figure and implement draw().

    Redraws are fast because only the artists that change are drawn again: the rest of
    the figure (axes, ticks, labels, colour bars) is rendered once and kept as a
    background. A subclass lists its changing artists as ``dynamic_artists`` and calls
    ``redraw_background()`` when something static changes (an axis limit, say).
    """

    def __init_subclass__(cls, **kwargs):
        """Each subclass's constructor and public methods run under plain_torch(): the numbers
        an explorer shows come out the same in any cell, whatever inference mode, autocast or
        default device the caller set."""
        super().__init_subclass__(**kwargs)
        for name, member in list(cls.__dict__.items()):
            if inspect.isfunction(member) and (name == "__init__" or not name.startswith("_")):
                setattr(cls, name, plainly(member))

    def __init__(
        self, controls: dict, figure: Figure, dynamic_artists: list, rows: list | None = None
    ):
        """rows: the controls' names, row by row above the figure (default: one row of all)."""
        self.controls = controls
        self.figure = figure
        FigureCanvasAgg(figure)
        self._dynamic_artists = dynamic_artists
        for artist in dynamic_artists:
            artist.set_animated(True)  # left out of the background, drawn on every update
        self._background = None
        self.state = {}
        self._following = False
        self.image = widgets.Image(format="png")
        for control in controls.values():
            control.style.description_width = "initial"
            control.observe(self._on_change, names="value")
        rows = rows if rows is not None else [list(controls)]
        self.widget = widgets.VBox(
            [*(widgets.HBox([controls[name] for name in row]) for row in rows), self.image]
        )
        self.update()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def draw(self, **values) -> None:
        """Update the dynamic artists and ``self.state`` for the controls' values."""
        raise NotImplementedError

    def redraw_background(self) -> None:
        self._background = None

    def fit_y_limit(self, ax: Axes, largest: float, limits: tuple) -> None:
        """Set ax's upper y-limit to the smallest of a few fixed limits that holds `largest`.

        Axes are part of the static background, slow to redraw: a few fixed limits mean
        the background is redrawn only when a limit is crossed, not on every update.
        """
        self._check_y_limits(largest, limits)
        top = next((limit for limit in limits if largest <= limit), limits[-1])
        if ax.get_ylim()[1] != top:
            ax.set_ylim(0, top)
            self.redraw_background()

    @staticmethod
    def _check_y_limits(largest: object, limits: object) -> None:
        all_real = isinstance(limits, tuple) and all(
            isinstance(limit, numbers.Real) and not isinstance(limit, bool) for limit in limits
        )
        increasing = all_real and all(a < b for a, b in itertools.pairwise(limits))
        if not increasing or not limits:
            raise ValueError(
                f"limits must be a non-empty tuple of increasing numbers, got {limits!r:.80}"
            )
        if not (0 < limits[0] and math.isfinite(limits[-1])):
            raise ValueError(f"limits must be positive and finite, got {limits!r:.80}")
        if not isinstance(largest, numbers.Real) or not math.isfinite(largest):
            raise ValueError(f"largest must be a finite number, got {largest!r:.80}")

    def update(self) -> None:
        with one_torch_thread(), plain_torch():
            try:
                values = self.values()
                unset = [
                    name
                    for name, value in values.items()
                    if value is None and name not in self.unused(values)
                ]
                if unset:
                    raise ValueError(f"choose a value for {', '.join(unset)}")
                self.draw(**self.values())
            except ValueError as problem:  # a setting the figure cannot show: say so in it
                self.state = {"error": str(problem)}
                self.show_error(self.figure.axes[0], problem)
                self.redraw_background()
        self.image.value = self.render_png()

    def unused(self, values: dict) -> set[str]:
        """The controls these settings do not read (a menu another mode uses): left unset, they
        are no error. values is the dict of control values, as values() gives it; a subclass
        that reads them calls this first."""
        if not isinstance(values, dict):
            raise TypeError(
                "values must be the dict of control values (name: value, as values() gives it), "
                f"got {type(values).__name__}"
            )
        return set()

    @staticmethod
    def show_error(ax: Axes, problem: Exception | str) -> None:
        """The problem as the axes' title, in red, as plain text (never parsed as mathtext)."""
        ax.set_title(f"⚠ {problem}", color="tab:red", fontsize=10, parse_math=False)

    def render_png(self) -> bytes:
        canvas = self.figure.canvas
        if self._background is None:
            canvas.draw()
            self.figure.set_layout_engine("none")  # keep the layout found in the first draw
            self._background = canvas.copy_from_bbox(self.figure.bbox)
        else:
            canvas.restore_region(self._background)
        for artist in self._dynamic_artists:
            self.figure.draw_artist(artist)
        return self.canvas_png()

    def canvas_png(self) -> bytes:
        """The figure's canvas as it stands, as PNG bytes (for a subclass that redraws only
        part of it)."""
        return png_bytes(np.asarray(self.figure.canvas.buffer_rgba()))

    def follow(self, control) -> None:
        """Set the controls that depend on `control`, which just moved (a subclass's links
        between its controls: a model's layers, say). Nothing by default."""

    def _on_change(self, change):
        if self._following:  # a control set by follow: one redraw, after all of them are set
            return
        self._following = True
        try:
            with one_torch_thread(), plain_torch():
                self.follow(change["owner"])
        finally:
            self._following = False
        self.update()

    def _repr_png_(self) -> bytes:
        """A notebook shows the explorer's current view as a static picture."""
        return bytes(self.image.value)

    def __repr__(self) -> str:
        return settings_repr(self)


def png_bytes(pixels: np.ndarray) -> bytes:
    """(height, width, 4) uint8 RGBA pixels as a PNG whose rows are stored unfiltered. Pillow
    tries PNG's five row filters on every row, two thirds of its time on an explorer's figure
    (10 of 14 ms), and a figure's flat colours compress as small without them."""
    height, width, _ = pixels.shape
    rows = np.zeros((height, 1 + 4 * width), dtype=np.uint8)  # each row: filter 0 ("none")
    rows[:, 1:] = pixels.reshape(height, 4 * width)
    header = struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0)  # 8-bit RGBA, no interlace
    chunks = ((b"IHDR", header), (b"IDAT", zlib.compress(rows.tobytes(), 1)), (b"IEND", b""))
    return b"\x89PNG\r\n\x1a\n" + b"".join(
        struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
        for kind, data in chunks
    )


def settings_repr(explorer, values: dict | None = None) -> str:
    """An explorer's class and its settings (default: its controls' values):
    "KernelRegressionExplorer(width=0.3)"."""
    settings = ", ".join(
        f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={_printable(value)}"
        for name, value in (explorer.values() if values is None else values).items()
    )
    return f"{type(explorer).__name__}({settings})"


def _printable(value: object) -> str:
    """repr(value), or what messages show where Python refuses to print it (an int of more
    than 4,300 digits set from code)."""
    try:
        return repr(value)
    except ValueError:
        return shown(value)


def log_slider(
    value: float, exponents: tuple, step: float, description: str, readout_format: str
) -> "FloatLogSlider":
    """A slider over powers of ten, 10**exponents[0] to 10**exponents[1], in steps of `step` in
    the exponent."""
    low, high = exponents
    return FloatLogSlider(
        value=value,
        base=10,
        min=low,
        max=high,
        step=step,
        description=description,
        readout_format=readout_format,
    )


def weight_heatmap(ax, x_labels, y_labels):
    """An all-zero attention-weight heatmap (colour scale 0..1) for an explorer to fill in."""
    mesh = draw_heatmap(
        ax,
        np.zeros((len(y_labels), len(x_labels))),
        x_labels,
        y_labels,
        cmap="Reds",
        vmin=0,
        vmax=1,
        cbar_kws={"label": "attention weight"},
    )
    ax.set_xlabel("keys")
    ax.set_ylabel("queries")
    return mesh


def artist_look(artist) -> tuple:
    """What an artist draws, for an explorer that redraws a panel only when a look in it
    changed: a text's words, colour, place, size, weight, angle and alignment; a bar's place,
    size and colour; a line's points; and whether it is shown."""
    if isinstance(artist, mpl_text.Text):
        return (
            artist.get_text(),
            artist.get_color(),
            artist.get_position(),
            artist.get_fontsize(),
            artist.get_fontweight(),
            artist.get_rotation(),
            artist.get_horizontalalignment(),
            artist.get_visible(),
        )
    if isinstance(artist, Rectangle):
        shape = (artist.get_xy(), artist.get_width(), artist.get_height())
        return (*shape, tuple(artist.get_facecolor()), artist.get_visible())
    if isinstance(artist, Line2D):
        return (tuple(artist.get_xdata()), tuple(artist.get_ydata()), artist.get_visible())
    raise TypeError(f"no look for a {type(artist).__name__}")


def remember(cache: OrderedDict, key: tuple, value, kept: int) -> None:
    """Keep value under key in cache, and only the `kept` latest keys (an explorer's recent
    readings, which a learner going back to a setting gets at once)."""
    cache[key] = value
    if len(cache) > kept:
        cache.popitem(last=False)


def check_sentence(sentence: object) -> None:
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be text (a str), got {type(sentence).__name__}")


def check_vocabulary(name: str, model_size: int, tokenizer_size: int) -> None:
    if model_size != tokenizer_size:
        raise ValueError(
            f"{name} has a vocabulary of {model_size} tokens; the tokenizer's has {tokenizer_size}"
        )


def alignment_figure(
    rows: int, columns: int, colours: str, weight_label: str, keys: str, queries: str
) -> tuple[Figure, Axes, TokenHeatmap]:
    """The translation explorers' figure: a heatmap of written French tokens (rows) against
    English tokens (columns), with its colour bar and axis labels."""
    figure = Figure(figsize=(9, 6.2), layout="constrained")
    ax = figure.subplots()
    heatmap = TokenHeatmap(ax, rows, columns, colours)
    figure.colorbar(heatmap.mesh, ax=ax, label=weight_label, shrink=0.8)
    ax.set_xlabel(f"English tokens (keys: {keys})", labelpad=30)
    ax.set_ylabel(f"French tokens written (queries: {queries})", labelpad=55)
    return figure, ax, heatmap


class _Chosen(Any):
    """Any value but None."""

    allow_none = False


class _NamesItsOptions:
    """A choice among options that, set from code to anything else, says which options it has
    (ipywidgets' own control says only "Invalid selection: value not found", and takes True or
    1.0 for the option 1)."""

    @validate("value")
    def _validate_value(self, proposal):
        value = proposal.value
        if value is None and self.traits()["index"].allow_none:
            return None
        options = list(self._options_values)
        if isinstance(value, np.str_):  # numpy's str: the option itself, as a str
            value = proposal.value = str(value)
        kind = int if isinstance(value, np.integer) else type(value)  # numpy's: the option itself
        if any(type(option) is kind and option == value for option in options):
            return super()._validate_value(proposal)
        # True == 1 and 1.0 == 1, but neither is the option 1
        listed = ", ".join(shown(option) for option in options[:12])
        more = f" (and {len(options) - 12} more)" if len(options) > 12 else ""
        raise TraitError(
            f"{self.description} must be one of {listed}{more}; got {shown(value)}"
        ) from None


class Dropdown(_NamesItsOptions, widgets.Dropdown):
    """ipywidgets' Dropdown, whose error names its options."""


class ToggleButtons(_NamesItsOptions, widgets.ToggleButtons):
    """ipywidgets' ToggleButtons, whose error names its options."""


class SelectionSlider(_NamesItsOptions, widgets.SelectionSlider):
    """ipywidgets' SelectionSlider, whose error names its options (None too: a slider always
    stands on one of them)."""

    value = _Chosen(None, help="Selected value")


LARGEST_SHOWN_INT = 2**53 - 1  # JavaScript's numbers hold every whole number up to it


class _TakesOnlyWhatItShows:
    """A whole-number control that, set from code to a value it could not show as it is,
    refuses it by name: ipywidgets would quietly cast 1.5 or True to 1 and move 99 to the
    slider's end."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if "value" in kwargs and self.value != kwargs["value"]:  # moved to an end by min or max
            self.refuse(kwargs["value"])

    @validate("value")
    def _validate_value(self, proposal):
        value = proposal.value
        low, high = self._ends()
        if isinstance(value, bool) or not low <= value <= high:
            self.refuse(value)
        return value

    def _ends(self) -> tuple[int, int]:
        """The slider's ends, or for a box, the whole numbers a browser shows exactly."""
        if getattr(self, "min", None) is None:
            return -LARGEST_SHOWN_INT, LARGEST_SHOWN_INT
        return self.min, self.max

    def refuse(self, value):
        low, high = self._ends()
        ends = f" from {low} to {high}"
        if high == LARGEST_SHOWN_INT:  # a box: its range is news only to a whole number past it
            past = isinstance(value, int | np.integer) and not isinstance(value, bool)
            ends = " from -(2^53 - 1) to 2^53 - 1 (a browser shows larger ones rounded)" * past
        raise TraitError(f"{self.description} must be a whole number{ends}; got {shown(value)}")


class _WholeNumber(Int):
    """An int (or numpy's), anything else refused by the control's own message (traitlets'
    names the widget class, "The 'value' trait of an IntSlider instance", not the control, and
    casts a whole float such as 3.0 to 3)."""

    def validate(self, obj, value):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            obj.refuse(value)
        try:
            return super().validate(obj, int(value))
        except TraitError:
            obj.refuse(value)


class IntSlider(_TakesOnlyWhatItShows, widgets.IntSlider):
    """ipywidgets' IntSlider, refusing a value it would cast or clamp."""

    value = _WholeNumber(0, help="Int value").tag(sync=True)


class IntText(_TakesOnlyWhatItShows, widgets.IntText):
    """ipywidgets' IntText, refusing a value it would cast."""

    value = _WholeNumber(0, help="Int value").tag(sync=True)


class _RealNumber(Float):
    """A real number (an int, a float, numpy's) taken as a float; not a bool (traitlets'
    Float takes True as 1.0), nor an int too large for a float; refused by the control's name
    (traitlets' message names the widget class, and an int of thousands of digits raised
    OverflowError)."""

    def validate(self, obj, value):
        try:
            if isinstance(value, numbers.Real) and not isinstance(value, bool):
                return super().validate(obj, float(value))  # numpy's floats too (np.float32)
        except (TraitError, OverflowError):
            pass
        raise TraitError(
            f"{obj.description} must be a number a float can hold; got {shown(value)}"
        ) from None


class _TakesOnlyItsRange:
    """A number control that, set from code to a value past its ends (NaN and infinities too),
    refuses it by name: ipywidgets would move it to the nearer end without a word. A value off an
    end by a float's rounding (the browser computes 10 ** 0.7 its own way) is that end."""

    ROUNDING = 1e-9  # relative

    def __init__(self, **settings):
        super().__init__(**settings)
        if "value" in settings:  # ipywidgets' check of min and max moved it to the nearer end
            self.value = settings["value"]

    def ends(self) -> tuple[float, float]:
        return self.min, self.max

    @validate("value")
    def _validate_value(self, proposal):
        value = proposal.value
        low, high = self.ends()
        for end in (low, high):
            if math.isclose(value, end, rel_tol=self.ROUNDING):
                return end
        if not low <= value <= high:
            raise TraitError(
                f"{self.description} must be a number from {low:.3g} to {high:.3g}; "
                f"got {shown(value)}"
            )
        return value


class FloatSlider(_TakesOnlyItsRange, widgets.FloatSlider):
    """ipywidgets' FloatSlider, refusing True and a value past its ends."""

    value = _RealNumber(0.0, help="Float value").tag(sync=True)


class FloatLogSlider(_TakesOnlyItsRange, widgets.FloatLogSlider):
    """ipywidgets' FloatLogSlider, refusing True and a value past its ends."""

    value = _RealNumber(1.0, help="Float value").tag(sync=True)

    def ends(self) -> tuple[float, float]:
        return self.base**self.min, self.base**self.max


class _Words(Unicode):
    """Text; anything else refused by the control's name (traitlets' message names the widget
    class, "The 'value' trait of a Text instance", not the control)."""

    def validate(self, obj, value):
        if not isinstance(value, str):  # traitlets' Unicode decodes bytes
            raise TraitError(f"{obj.description} must be text (a str); got {shown(value)}")
        return super().validate(obj, value)


class Text(widgets.Text):
    """ipywidgets' Text, whose error names the control."""

    value = _Words(help="String value").tag(sync=True)
