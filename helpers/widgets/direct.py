"""What the widgets you drag or draw on share: the live widget (anywidget), its conversation with
the kernel, and the explorer around it.

The browser draws; the kernel computes. When the learner drags a point (or draws a stroke), the
front end sends the whole new state as the ``request`` trait; the explorer checks it (points
clamped to the plane, numbers rounded to the plane's grid), computes everything with the
helpers the chapter builds and tests, and answers with the ``view`` trait: what to draw, with
every number already in it. One request is on its way at a time (see js/protocol.js), so a fast
drag never queues up.

The front-end code is the files in js/, joined and handed to anywidget as text: nothing is
fetched from a CDN and there is no build step.
"""

import inspect
import io
import math
import numbers
import sys
import textwrap
from pathlib import Path

import anywidget
import ipywidgets as widgets
import numpy as np
import traitlets
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import is_color_like
from matplotlib.figure import Figure
from matplotlib.ticker import AutoLocator

from helpers import validation
from helpers.contexts import plainly
from helpers.validation import shown
from helpers.widgets.base import one_torch_thread, settings_repr

__all__ = ["DirectExplorer", "PlaneExplorer", "PlaneWidget"]

FRONT_END = Path(__file__).with_name("js")
# matplotlib's tab10 colours as the browser names them (SVG knows no "tab:blue")
COLOURS = {
    "blue": "#1f77b4",
    "orange": "#ff7f0e",
    "green": "#2ca02c",
    "red": "#d62728",
    "purple": "#9467bd",
    "grey": "#7f7f7f",
    "black": "#000000",
    "foreground": "foreground",  # the theme's text colour: black, or light in a dark theme
}


def front_end(*names: str) -> str:
    """The named files of js/, joined into one ES module (protocol.js first)."""
    return "\n".join((FRONT_END / name).read_text() for name in names)


class DirectWidget(anywidget.AnyWidget):
    """A widget the learner manipulates: ``request`` is what they did, ``view`` what to draw.
    Both carry ``seq``, the number of the request the view answers."""

    _css = FRONT_END / "direct.css"
    request = traitlets.Dict().tag(sync=True)
    view = traitlets.Dict().tag(sync=True)


class PlaneWidget(DirectWidget):
    """Points in a plane, dragged with the mouse or moved with the arrow keys (js/plane.js)."""

    _esm = front_end("protocol.js", "plane.js")


class DirectExplorer:
    """A live widget, the ipywidgets controls beside it (sliders, menus) and the numbers it
    shows. Subclasses implement ``accept`` (take the learner's request into ``self``) and
    ``compute`` (the view for the current state and the controls' values; it also fills
    ``self.state`` with the numbers, as tensors).

    ``explorer.widget`` is the live view; showing the explorer draws its current view as a
    static picture, for a reader without a live kernel."""

    def __init_subclass__(cls, **kwargs):
        """Each subclass's constructor and public methods run under plain_torch(), as an
        Explorer's do: the numbers come out the same in any cell, whatever inference mode,
        autocast or default device the caller set."""
        super().__init_subclass__(**kwargs)
        for name, member in list(cls.__dict__.items()):
            if inspect.isfunction(member) and (name == "__init__" or not name.startswith("_")):
                setattr(cls, name, plainly(member))

    def __init__(self, live: DirectWidget, controls: dict):
        self.live = live
        self.controls = controls
        self.state = {}
        self._seq = 0
        for control in controls.values():
            control.style.description_width = "initial"
            control.observe(self._on_control, names="value")
        live.observe(self._on_request, names="request")
        self.widget = widgets.VBox([widgets.HBox(list(controls.values())), live])
        self.live.view = {**self._view(), "seq": self._seq}  # arguments the helpers refuse: raised

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def accept(self, request: dict) -> None:
        """Take what the learner did into the explorer's state; raise ValueError when it cannot
        be taken (the view then says why, and the state stays as it was)."""
        raise NotImplementedError

    def compute(self, **values) -> dict:
        """The view for the current state: the drawing's parts and the readout."""
        raise NotImplementedError

    def _view(self) -> dict:
        values = self.values()
        unset = [name for name, value in values.items() if value is None]  # a menu set from code
        if unset:
            raise ValueError(f"choose a value for {', '.join(unset)}")
        with one_torch_thread():
            return self.compute(**values)

    def update(self, problem: str | None = None) -> bool:
        """Show the view for the current state and the controls' values, with the problem if
        any; False when the helpers refuse them (the last view stays, saying why)."""
        try:
            view = self._view()
        except ValueError as error:  # a setting the helpers refuse: say so in the view
            self.live.view = {**self.live.view, "problem": str(error), "seq": self._seq}
            return False
        if problem is not None:
            view["problem"] = problem
        self.live.view = {**view, "seq": self._seq}
        return True

    def _on_request(self, change) -> None:
        request = change["new"]
        seq = request.get("seq") if isinstance(request, dict) else None
        if isinstance(seq, int) and not isinstance(seq, bool) and seq > self._seq:
            self._seq = seq
        kept = dict(vars(self))  # accept rebinds the state's attributes; a refusal restores them
        try:
            self.accept(request if isinstance(request, dict) else {})
        except (ValueError, TypeError) as error:
            self.update(f"that move could not be taken: {error}")
            return
        if not self.update():  # a move the helpers cannot compute: the state stays as it was
            vars(self).update(kept)

    def _on_control(self, _change) -> None:
        self.update()

    def _repr_png_(self) -> bytes:
        """A notebook shows the explorer's current view as a static picture."""
        figure = self.static_figure()
        FigureCanvasAgg(figure)
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", dpi=100)
        return buffer.getvalue()

    def static_figure(self) -> Figure:
        return plane_figure(self.live.view)

    def __repr__(self) -> str:
        return settings_repr(self)


class PlaneExplorer(DirectExplorer):
    """A DirectExplorer of points in a plane (PlaneWidget). ``self.points`` maps each point's
    name to its (x, y); the class's ``PLANE`` gives the plane's bounds, ticks, axis labels and
    the arrow keys' step."""

    PLANE: dict

    def __init__(self, points: dict, controls: dict):
        self.points = points
        super().__init__(PlaneWidget(), controls)

    def move(self, name: str, x: float, y: float | None = None) -> None:
        """Move one point as a drag in the browser does: clamped to the plane, on its grid
        (y None: where the point is now)."""
        y = self.points[name][1] if y is None and name in self.points else y
        self.live.request = {"seq": self._seq + 1, "points": {name: [x, y]}}

    def accept(self, request: dict) -> None:
        self.points = moved_points(request, self.points, self.PLANE)


# The learner's points


def snap(value: float, step: float) -> float:
    """value rounded to the plane's grid (a tenth of the keyboard's step), so the numbers the
    widget shows are the numbers the kernel computed with (never -0.0, shown as "-0.00")."""
    value = finite_number(value, "value")
    step = validation.positive_number(step, "step")
    tenth = step / 10 or step  # a step so small that a tenth of it is no float: its own digits
    decimals = max(0, -math.floor(math.log10(tenth)))
    return round(value, decimals) + 0.0


def finite_number(value: object, name: str) -> float:
    """value as a float, if it is a finite real number (numpy's included; not a bool, and not an
    int too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    return number


def position_of(position: object, what: str) -> tuple[float, float]:
    """position as (x, y) floats, if it is two finite numbers [x, y]."""
    if not isinstance(position, list | tuple) or len(position) != 2:
        raise ValueError(f"{what} must be two finite numbers [x, y], got {shown(position)}")
    try:
        x, y = (finite_number(v, what) for v in position)
    except ValueError:
        raise ValueError(
            f"{what} must be two finite numbers [x, y], got {shown(position)}"
        ) from None
    return x, y


def moved_points(request: dict, current: dict, plane: dict) -> dict:
    """The points of the request, for the names in `current`: each clamped to the plane and
    snapped to its grid; a point the request leaves where it was stays exactly as it was.
    Raises ValueError for a request that is not points, or a plane without x, y and step."""
    _check_moving_plane(plane)
    points = request.get("points") if isinstance(request, dict) else None
    if not isinstance(points, dict):
        raise ValueError(f"expected {{'points': {{name: [x, y]}}}}, got {shown(request)}")
    moved = dict(current)
    for name, position in points.items():
        if name not in current:
            raise ValueError(f"no point named {str(name)!r:.40}; the points are {list(current)}")
        position = position_of(position, f"point {name}")
        if position == tuple(current[name]):
            continue
        x, y = (
            snap(min(max(v, low), high), plane["step"])
            for v, (low, high) in zip(position, (plane["x"], plane["y"]), strict=True)
        )
        moved[name] = (x, y)
    return moved


def slider_number(value: object, name: str, exponents: tuple[float, float]) -> float:
    """value as a float, if it is a number a FloatLogSlider (base 10) from 10**low to 10**high
    holds; the slider would move any other to its nearest end without a word."""
    low, high = (10.0**exponent for exponent in exponents)
    value = validation.positive_number(value, name)
    if not low <= value <= high:
        raise ValueError(f"{name} must lie in {low:.3g}..{high:.3g} (its slider), got {value!r}")
    return value


# The static picture of a view


MAX_TICKS = 100  # ticks per axis (and bars' labels): more take minutes to draw, and cannot be read
MAX_RADIUS = 500  # pixels: wider than the browser's plane (js/plane.js)
MAX_WIDTH = 100  # points: wider than any line an explorer draws; 1e15 took a minute to draw
MAX_ITEMS = 500  # points, lines, arrows and markers each: far more than any explorer draws
TITLE_LINES = 4  # a longer title or problem is cut with "…": more would squeeze the figure
PLANE_VIEW = (
    "view must be a plane explorer's view: a dict holding 'plane' (a dict of 'x' and 'y', each "
    "[low, high] finite numbers with low < high that matplotlib can show as they are, "
    f"'xticks' and 'yticks', lists of at most {MAX_TICKS} finite numbers within those bounds, "
    "and 'xlabel' and 'ylabel', text), and optionally 'title' and 'problem' (text); at most "
    f"{MAX_ITEMS} each of 'points' (dicts of 'x', 'y', 'label' and 'colour'); 'lines' (dicts of "
    "'xy', [[x, y], ...], and 'colour'); 'arrows' (dicts of 'from' and 'to', [x, y], 'colour' "
    "and 'width'); 'markers' (dicts of 'x', 'y', 'radius' and 'colour'); 'bars' (a dict of "
    f"'labels' (at most {MAX_TICKS} texts), 'series' (one or more dicts of 'name', 'values', a "
    "number per label, and 'colour'), 'ymax' and 'title'); every colour one matplotlib knows, "
    f"every radius in 0 < radius <= {MAX_RADIUS}, every width in 0..{MAX_WIDTH}"
)


def is_text(value: object) -> bool:
    """Whether value is a str matplotlib can draw: one that encodes as UTF-8 (a lone surrogate
    such as '\\ud800' does not, and matplotlib's font code refuses it)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def are_numbers(
    values: object, count: int | None, low: float, high: float, whole: bool = False
) -> bool:
    """Whether values is a list of `count` (None: any number of) real numbers in low..high
    (whole ones if whole)."""
    kind = numbers.Integral if whole else numbers.Real
    return (
        isinstance(values, list)
        and (count is None or len(values) == count)
        and all(
            isinstance(value, kind)
            and not isinstance(value, bool)
            # numpy compares an np.float32 with the ends in float32, where the largest float
            # overflows (a RuntimeWarning)
            and low <= (float(value) if isinstance(value, np.floating) else value) <= high
            for value in values
        )
    )


def _finite(value: object) -> bool:
    return are_numbers([value], 1, -sys.float_info.max, sys.float_info.max)


def _pair(value: object) -> bool:
    return are_numbers(value, 2, -sys.float_info.max, sys.float_info.max)


def _finite_list(values: object) -> bool:
    return are_numbers(values, None, -sys.float_info.max, sys.float_info.max)


def _ticks(values: object) -> bool:
    return _finite_list(values) and len(values) <= MAX_TICKS


def _radius(value: object) -> bool:
    return are_numbers([value], 1, 0, MAX_RADIUS) and value > 0


def _width(value: object) -> bool:
    return are_numbers([value], 1, 0, MAX_WIDTH)


def _colour(value: object) -> bool:
    """Whether value is a colour name matplotlib draws (the theme's foreground included)."""
    return is_text(value) and is_color_like(_printed(value))


# what plane_figure reads of each item of a view's lists: (required keys, optional keys), each
# key with the test its value must pass
_PLANE_ITEMS = {
    "points": (
        {"x": _finite, "y": _finite, "label": is_text, "colour": _colour},
        {"radius": _radius},
    ),
    "lines": (
        {"xy": lambda xy: isinstance(xy, list) and all(map(_pair, xy)), "colour": _colour},
        {"label": lambda label: label is None or is_text(label), "width": _width},
    ),
    "arrows": ({"from": _pair, "to": _pair, "colour": _colour, "width": _width}, {}),
    "markers": (
        {"x": _finite, "y": _finite, "radius": _radius, "colour": _colour},
        {"opacity": lambda opacity: are_numbers([opacity], 1, 0, 1), "edge": _colour},
    ),
}


def _check_plane_view(view: object) -> None:
    """A view plane_figure can draw (PLANE_VIEW); otherwise an error naming what it lacks."""
    if not isinstance(view, dict) or not isinstance(view.get("plane"), dict):
        raise ValueError(f"{PLANE_VIEW}; got {shown(view):.80}")
    plane = view["plane"]
    if not (
        all(_pair(plane.get(axis)) and plane[axis][0] < plane[axis][1] for axis in "xy")
        and all(_ticks(plane.get(ticks)) for ticks in ("xticks", "yticks"))
        and all(is_text(plane.get(label)) for label in ("xlabel", "ylabel"))
    ):
        raise ValueError(f"{PLANE_VIEW}; its 'plane' is {shown(plane):.200}")
    _check_plane_bounds(plane)
    for key, (required, optional) in _PLANE_ITEMS.items():
        items = view.get(key, [])
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValueError(f"{PLANE_VIEW}; its {key!r} are {shown(items):.200}")
        if len(items) > MAX_ITEMS:
            raise ValueError(
                f"{PLANE_VIEW}; its {key!r} are {len(items)} items, more than {MAX_ITEMS}"
            )
        for index, item in enumerate(items):
            for name, test in {**required, **optional}.items():
                if name not in item and name in required:
                    raise ValueError(f"{PLANE_VIEW}; its {key!r} item {index} lacks {name!r}")
                if name in item and not test(item[name]):
                    raise ValueError(
                        f"{PLANE_VIEW}; its {key!r} item {index} has {name!r} "
                        f"{shown(item[name]):.80}"
                    )
    bars = view.get("bars")
    if bars and not _drawable_bars(bars):
        raise ValueError(f"{PLANE_VIEW}; its 'bars' are {shown(bars):.200}")
    for key in ("title", "problem"):
        if view.get(key) is not None and not is_text(view[key]):
            raise ValueError(f"{PLANE_VIEW}; its {key!r} is {shown(view[key]):.80}")


def _check_plane_bounds(plane: dict) -> None:
    """Each axis's bounds as matplotlib shows them (not widened to a range it can draw, nor
    overflowing), and its ticks within them (a tick outside widened the plane)."""
    for axis in "xy":
        low, high = plane[axis]
        if not math.isfinite(high - low):
            raise ValueError(
                f"{PLANE_VIEW}; its 'plane' {axis!r} is {shown(plane[axis])}: high - low must be "
                f"a finite number, at most {sys.float_info.max:.3g}"
            )
        shown_bounds = AutoLocator().nonsingular(low, high)  # as a new axes's set_xlim does
        if shown_bounds != (low, high):
            raise ValueError(
                f"{PLANE_VIEW}; its 'plane' {axis!r} is {shown(plane[axis])}, a range matplotlib "
                "widens before it draws it (narrower than 1e-15 of its larger bound, or all of "
                f"it too close to 0): it would draw {shown(list(shown_bounds))}"
            )
        outside = [tick for tick in plane[f"{axis}ticks"] if not low <= tick <= high]
        if outside:
            raise ValueError(
                f"{PLANE_VIEW}; its 'plane' {axis + 'ticks'!r} has {shown(outside):.80} outside "
                f"its {axis!r} bounds {shown(plane[axis])}"
            )


def _drawable_bars(bars: object) -> bool:
    """Whether bars is a bar chart _draw_bars can draw: labels, one or more series of a value
    per label, a top above 0 and a title."""
    if not isinstance(bars, dict) or not isinstance(bars.get("labels"), list):
        return False
    labels, series = bars["labels"], bars.get("series")
    return (
        all(map(is_text, labels))
        and len(labels) <= MAX_TICKS
        and isinstance(series, list)
        and len(series) > 0
        and all(
            isinstance(one, dict)
            and is_text(one.get("name"))
            and _colour(one.get("colour"))
            and _finite_list(one.get("values"))
            and len(one["values"]) == len(labels)
            for one in series
        )
        and _finite(bars.get("ymax"))
        and bars["ymax"] > 0
        and is_text(bars.get("title"))
    )


def plane_figure(view: dict) -> Figure:
    """The view as a matplotlib figure: the plane on the left, the bar chart on the right (when
    the view has one), the title above."""
    _check_plane_view(view)
    has_bars = bool(view.get("bars"))
    figure = Figure(figsize=(10 if has_bars else 8, 4.8), layout="constrained")
    axes = figure.subplots(1, 2, width_ratios=[4, 3]) if has_bars else [figure.subplots()]
    _draw_plane(axes[0], view)
    if has_bars:
        _draw_bars(axes[1], view["bars"])
    title = view.get("title") or ""
    if view.get("problem"):
        title = f"⚠ {view['problem']}"
    colour = "tab:red" if view.get("problem") else "black"
    shown_title = textwrap.fill(title, 110, max_lines=TITLE_LINES, placeholder=" …")
    figure.suptitle(shown_title, fontsize=10, color=colour, parse_math=False)
    return figure


def _draw_plane(ax, view: dict) -> None:
    plane = view["plane"]
    for line in view.get("lines", []):
        xy = np.asarray(line["xy"], dtype=float).reshape(-1, 2)
        ax.plot(
            *xy.T,
            label=line.get("label"),
            color=_printed(line["colour"]),
            lw=line.get("width", 2),
            ls="--" if line.get("dashed") else "-",
        )
    for arrow in view.get("arrows", []):
        (x0, y0), (x1, y1) = arrow["from"], arrow["to"]
        ax.annotate(
            "",
            (x1, y1),
            (x0, y0),
            arrowprops={
                "arrowstyle": "->",
                "color": _printed(arrow["colour"]),
                "lw": arrow["width"],
                "alpha": 0.75,
            },
        )
    for marker in view.get("markers", []):
        ax.scatter(
            marker["x"],
            marker["y"],
            s=math.pi * marker["radius"] ** 2,
            color=_printed(marker["colour"]),
            alpha=marker.get("opacity", 0.35),
            edgecolors=_printed(marker.get("edge", "none")),
            linewidths=2,
            zorder=5 if marker.get("above") else 2,
        )
    for point in view.get("points", []):
        radius = point.get("radius", 9)  # pixels in the browser; about points here
        ax.scatter(
            point["x"],
            point["y"],
            s=1.6 * radius**2,
            color=_printed(point["colour"]),
            edgecolors="white",
            zorder=3 + (radius >= 9),
        )
        if point["label"]:
            ax.annotate(
                point["label"],
                (point["x"], point["y"]),
                (6, 6),
                textcoords="offset points",
                weight="bold",
                parse_math=False,
            )
    if any(line.get("label") for line in view.get("lines", [])):
        _literal_legend(ax.legend(loc="upper right", fontsize="small"))
    ax.set_xlim(*plane["x"])
    ax.set_ylim(*plane["y"])
    ax.set_xticks(plane["xticks"])
    ax.set_yticks(plane["yticks"])
    ax.grid(color="0.9")
    ax.set_xlabel(plane["xlabel"], parse_math=False)
    ax.set_ylabel(plane["ylabel"], parse_math=False)


def _literal_legend(legend) -> None:
    """The legend's names drawn as typed: a '$' is a dollar sign, not the start of a formula."""
    for text in legend.get_texts():
        text.set_parse_math(False)


def _printed(colour: str) -> str:
    """A view's colour on paper: the theme's foreground is black there."""
    return "black" if colour == COLOURS["foreground"] else colour


def _draw_bars(ax, bars: dict) -> None:
    positions = np.arange(len(bars["labels"]))
    width = 0.8 / len(bars["series"])
    for index, series in enumerate(bars["series"]):
        ax.bar(
            positions + (index - (len(bars["series"]) - 1) / 2) * width,
            series["values"],
            width,
            color=_printed(series["colour"]),
            label=series["name"],
        )
    ax.set_xticks(positions, bars["labels"], parse_math=False)
    ax.set_ylim(0, bars["ymax"])
    ax.set_ylabel("attention weight")
    ax.set_title(bars["title"], fontsize=10, parse_math=False)
    _literal_legend(ax.legend(fontsize="small", loc="upper right"))


def _check_moving_plane(plane: object) -> None:
    """A plane points move on: 'x' and 'y' bounds, each a pair of finite numbers low < high, and
    a 'step' > 0."""
    missing = [key for key in ("x", "y", "step") if not isinstance(plane, dict) or key not in plane]
    if missing:
        raise ValueError(
            f"the plane must hold 'x', 'y' and 'step', got one without {missing}: {shown(plane)}"
        )
    for axis in "xy":
        if not (_pair(plane[axis]) and plane[axis][0] < plane[axis][1]):
            raise ValueError(
                f"the plane's {axis!r} must be its bounds (low, high), finite numbers with low < "
                f"high, got {shown(plane[axis])}"
            )
    validation.positive_number(plane["step"], "the plane's 'step'")
