"""Interactive explorers: controls plus a figure that redraws when a control moves.

Each explorer keeps one matplotlib figure and updates its artists in place, then
renders it to PNG into an ``ipywidgets.Image`` (no JavaScript beyond ipywidgets', so
it works offline). ``explorer.state`` holds the numbers the figure is drawn from,
so tests can set ``explorer.controls[name].value`` and check what changed without
a browser. Display ``explorer.widget`` in a notebook; ``explorer.figure`` is the
static view of the current settings.
"""

import io

import ipywidgets as widgets
import numpy as np
import PIL.Image
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from helpers.attention import masked_softmax
from helpers.kernel_regression import gaussian_kernel, kernel_pooling, make_data
from helpers.neighbour_task import NeighbourModel, make_neighbour_batch, weight_by_offset
from helpers.plotting import draw_heatmap
from helpers.scoring import dot_scores, random_queries_keys, saturation_statistics


class Explorer:
    """Controls, a figure and the glue: subclasses build the figure and implement draw().

    Redraws are fast because only the artists that change are drawn again: the rest of
    the figure (axes, ticks, labels, colour bars) is rendered once and kept as a
    background. A subclass lists its changing artists as ``dynamic_artists`` and calls
    ``redraw_background()`` when something static changes (an axis limit, say).
    """

    def __init__(self, controls: dict, figure: Figure, dynamic_artists: list):
        self.controls = controls
        self.figure = figure
        FigureCanvasAgg(figure)
        self._dynamic_artists = dynamic_artists
        for artist in dynamic_artists:
            artist.set_animated(True)  # left out of the background, drawn on every update
        self._background = None
        self.state = {}
        self.image = widgets.Image(format="png")
        for control in controls.values():
            control.style.description_width = "initial"
            control.observe(self._on_change, names="value")
        self.widget = widgets.VBox([widgets.HBox(list(controls.values())), self.image])
        self.update()

    def values(self) -> dict:
        return {name: control.value for name, control in self.controls.items()}

    def draw(self, **values):
        """Update the dynamic artists and ``self.state`` for the controls' values."""
        raise NotImplementedError

    def redraw_background(self):
        self._background = None

    def fit_y_limit(self, ax, largest: float, limits: tuple):
        """Set ax's upper y-limit to the smallest of a few fixed limits that holds `largest`.

        Axes are part of the static background, slow to redraw: a few fixed limits mean
        the background is redrawn only when a limit is crossed, not on every update.
        """
        top = next((limit for limit in limits if largest <= limit), limits[-1])
        if ax.get_ylim()[1] != top:
            ax.set_ylim(0, top)
            self.redraw_background()

    def update(self):
        self.draw(**self.values())
        self.image.value = self.render_png()

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
        buffer = io.BytesIO()
        PIL.Image.fromarray(np.asarray(canvas.buffer_rgba())).save(
            buffer, format="png", compress_level=1
        )
        return buffer.getvalue()

    def _on_change(self, _change):
        self.update()

    def _repr_png_(self) -> bytes:
        """A notebook shows the explorer's current view as a static picture."""
        return bytes(self.image.value)

    def __repr__(self) -> str:
        settings = ", ".join(
            f"{name}={value:.3g}" if isinstance(value, float) else f"{name}={value!r}"
            for name, value in self.values().items()
        )
        return f"{type(self).__name__}({settings})"


def _weight_heatmap(ax, x_labels, y_labels):
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


class KernelRegressionExplorer(Explorer):
    """Chapter 01: Gaussian-kernel pooling; sliders for the kernel width and the query."""

    def __init__(self, data=None, width: float = 0.3, query: float = 2.5):
        self.data = data if data is not None else make_data()
        x_train, y_train = self.data.x_train, self.data.y_train
        controls = {
            "width": widgets.FloatLogSlider(
                value=width,
                base=10,
                min=-1.5,
                max=0.7,
                step=0.02,
                description="kernel width σ",
                readout_format=".3f",
            ),
            "query": widgets.FloatSlider(
                value=query,
                min=0.0,
                max=5.0,
                step=0.05,
                description="query x",
            ),
        }
        figure = Figure(figsize=(8, 5.6), layout="constrained")
        top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[2, 1])
        top.plot(self.data.x_test, self.data.y_test, color="black", lw=1.2, label="truth")
        (self._fit_line,) = top.plot(self.data.x_test, self.data.y_test, lw=2, label="kernel fit")
        self._points = top.scatter(
            x_train, y_train, color="tab:red", alpha=0.8, label="training data (size = weight)"
        )
        self._query_lines = [
            ax.axvline(query, color="tab:blue", ls="--", lw=1) for ax in (top, bottom)
        ]
        self._prediction = top.scatter(
            [query],
            [0.0],
            s=120,
            marker="*",
            color="tab:blue",
            zorder=3,
            label="prediction at the query",
        )
        top.set_ylabel("y (values)")
        top.legend(loc="upper right", fontsize="small")
        self._bars = bottom.bar(x_train, np.zeros(len(x_train)), width=0.06, color="tab:red")
        bottom.set_xlabel("x (the query, and the keys = training inputs)")
        bottom.set_ylabel("attention weight")
        self._top, self._bottom = top, bottom
        dynamic = [self._fit_line, self._points, *self._query_lines, self._prediction]
        super().__init__(controls, figure, [*dynamic, *self._bars, top.title])

    def draw(self, width, query):
        x_train, y_train = self.data.x_train, self.data.y_train
        fit, _ = kernel_pooling(self.data.x_test, x_train, y_train, gaussian_kernel, width)
        prediction, weights = kernel_pooling(
            torch.tensor([float(query)]), x_train, y_train, gaussian_kernel, width
        )
        weights = weights[0]  # (n_train,)
        self.state = {"fit": fit, "weights": weights, "prediction": prediction.item()}

        self._fit_line.set_ydata(fit)
        self._points.set_sizes(8 + 400 * weights.numpy())
        for line in self._query_lines:
            line.set_xdata([query, query])
        self._prediction.set_offsets([[query, prediction.item()]])
        for bar, weight in zip(self._bars, weights.tolist(), strict=True):
            bar.set_height(weight)
        self.fit_y_limit(self._bottom, 1.1 * weights.max().item(), (0.05, 0.1, 0.2, 0.5, 1.05))
        self._top.set_title(
            f"σ = {width:.3f}: prediction at x = {query:.2f} is {prediction.item():.2f}"
            f" (weights sum to {weights.sum().item():.2f})"
        )


class MaskedSoftmaxExplorer(Explorer):
    """Chapter 02: a valid-length slider masks keys; a query slider picks the row to inspect."""

    def __init__(self, scores=None, key_tokens=None, valid_len: int = 4, query: int = 0):
        if scores is None:
            generator = torch.Generator().manual_seed(2)
            scores = torch.randn(4, 6, generator=generator) * 1.5  # (queries, keys)
        self.scores = scores
        num_queries, num_keys = scores.shape
        self.key_tokens = key_tokens or [f"k{j}" for j in range(num_keys)]
        self.query_tokens = [f"q{i}" for i in range(num_queries)]
        controls = {
            "valid_len": widgets.IntSlider(
                value=valid_len,
                min=0,
                max=num_keys,
                description="valid length",
            ),
            "query": widgets.IntSlider(
                value=query,
                min=0,
                max=num_queries - 1,
                description="query row",
            ),
        }
        figure = Figure(figsize=(9.5, 3.4), layout="constrained")
        figure.get_layout_engine().set(wspace=0.1)
        left, right = figure.subplots(1, 2, width_ratios=[3, 2])
        self._mesh = _weight_heatmap(left, self.key_tokens, self.query_tokens)
        self._cell_texts = [
            [
                left.text(j + 0.5, i + 0.5, "", ha="center", va="center", fontsize=8)
                for j in range(num_keys)
            ]
            for i in range(num_queries)
        ]
        self._boundary = left.axvline(valid_len, color="tab:blue", lw=2.5)
        self._row_box = left.axhspan(query, query + 1, fill=False, edgecolor="tab:blue", lw=2)
        self._bars = right.bar(range(num_keys), np.zeros(num_keys), color="tab:red")
        right.set_xticks(range(num_keys), self.key_tokens)
        right.set_ylim(0, 1.05)
        right.set_xlabel("keys")
        right.set_ylabel("attention weight")
        self._left, self._right = left, right
        texts = [text for row in self._cell_texts for text in row]
        dynamic = [self._mesh, *texts, self._boundary, self._row_box, *self._bars]
        super().__init__(controls, figure, [*dynamic, left.title, right.title])

    def draw(self, valid_len, query):
        weights = masked_softmax(self.scores[None], valid_lens=torch.tensor([valid_len]))[0]
        self.state = {"weights": weights, "row": weights[query]}

        self._mesh.set_array(weights.numpy().ravel())
        for i, row in enumerate(weights.tolist()):
            for j, weight in enumerate(row):
                text = self._cell_texts[i][j]
                text.set_text(f"{weight:.2f}")
                text.set_color("white" if weight > 0.6 else "black")
        self._boundary.set_xdata([valid_len, valid_len])
        self._row_box.set_y(query)
        for j, (bar, weight) in enumerate(zip(self._bars, weights[query].tolist(), strict=True)):
            bar.set_height(weight)
            bar.set_color("tab:red" if j < valid_len else "lightgray")
        self._left.set_title(f"valid length {valid_len}: keys from position {valid_len} on get 0")
        self._right.set_title(
            f"row {self.query_tokens[query]} sums to {weights[query].sum().item():.2f}"
        )


class ScalingExplorer(Explorer):
    """Chapter 03: the key size d_k, the scaling by sqrt(d_k) and a temperature, against the
    attention weights (heatmap) and the spread of the scores (histogram)."""

    SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]

    def __init__(self, d_k: int = 64, scaled: bool = True, temperature: float = 1.0):
        num_queries, num_keys = 6, 8
        self.key_tokens = [f"k{j}" for j in range(num_keys)]
        self.query_tokens = [f"q{i}" for i in range(num_queries)]
        controls = {
            "d_k": widgets.SelectionSlider(
                options=self.SIZES, value=d_k, description="key size d_k"
            ),
            "scaled": widgets.Checkbox(value=scaled, description="divide by √d_k"),
            "temperature": widgets.FloatLogSlider(
                value=temperature,
                base=10,
                min=-1,
                max=1,
                step=0.05,
                description="temperature T",
                readout_format=".2f",
            ),
        }
        figure = Figure(figsize=(10, 3.6), layout="constrained")
        figure.get_layout_engine().set(wspace=0.08)
        left, right = figure.subplots(1, 2, width_ratios=[3, 2])
        self._mesh = _weight_heatmap(left, self.key_tokens, self.query_tokens)
        self._bins = np.linspace(-60, 60, 121)
        self._histogram = right.stairs(np.zeros(120), self._bins, fill=True, color="tab:blue")
        right.set_xlim(-60, 60)
        right.set_xlabel("score q·k / (scale · T), 2,000 pairs (±60 shown)")
        right.set_ylabel("density")
        self._left, self._right = left, right
        dynamic = [self._mesh, self._histogram, left.title, right.title]
        super().__init__(controls, figure, dynamic)

    def draw(self, d_k, scaled, temperature):
        queries, keys = random_queries_keys(d_k, 6, 8, seed=d_k)
        scores = dot_scores(queries, keys, scaled, temperature)  # (6, 8)
        weights = torch.softmax(scores, dim=-1)
        many_queries, many_keys = random_queries_keys(d_k, 200, 10, seed=10_000 + d_k)
        many_scores = dot_scores(many_queries, many_keys, scaled, temperature)  # (200, 10)
        statistics = saturation_statistics(many_scores)
        self.state = {"weights": weights, "scores": many_scores, **statistics}

        self._mesh.set_array(weights.numpy().ravel())
        counts, _ = np.histogram(many_scores.numpy().ravel(), bins=self._bins)
        density = counts / (many_scores.numel() * np.diff(self._bins))  # scores beyond ±60 count
        self._histogram.set_data(density)
        self.fit_y_limit(self._right, density.max(), (0.1, 0.45, 1.0, 2.5, 5.0))
        scale = f"√{d_k}" if scaled else "1"
        self._left.set_title(
            f"d_k = {d_k}, scores ÷ ({scale}·{temperature:.2f}): "
            f"max weight {statistics['max_weight']:.2f}, entropy {statistics['entropy']:.2f}",
            fontsize=10,
        )
        self._right.set_title(
            f"score std {many_scores.std().item():.1f}, "
            f"gradient {statistics['score_gradient']:.3f}",
            fontsize=10,
        )


class HeadExplorer(Explorer):
    """Chapter 04: pick a head and an example; see that head's attention over the example."""

    def __init__(self, model=None, tokens=None, head: int = 0, example: int = 0):
        """model: a NeighbourModel (untrained if not given); tokens: (examples, length)."""
        if model is None:
            torch.manual_seed(0)
            model = NeighbourModel()
        if tokens is None:
            tokens, _, _ = make_neighbour_batch(
                20, model.length, generator=torch.Generator().manual_seed(0)
            )
        self.model, self.tokens = model, tokens
        with torch.no_grad():
            model(tokens)
        self.all_weights = model.attention.attention_weights  # (B, heads, length, length)
        num_heads, length = self.all_weights.shape[1], self.all_weights.shape[-1]
        controls = {
            "head": widgets.ToggleButtons(
                options=[(f"head {h}", h) for h in range(num_heads)], value=head, description="head"
            ),
            "example": widgets.IntSlider(
                value=example, min=0, max=len(tokens) - 1, description="example"
            ),
        }
        figure = Figure(figsize=(6.5, 5), layout="constrained")
        ax = figure.subplots()
        self._mesh = _weight_heatmap(ax, list(range(length)), list(range(length)))
        self._x_labels = [
            ax.text(j + 0.5, length + 0.35, "", ha="center", va="top") for j in range(length)
        ]
        self._y_labels = [
            ax.text(-0.35, i + 0.5, "", ha="right", va="center") for i in range(length)
        ]
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("keys (position:token)", labelpad=24)
        ax.set_ylabel("queries (position:token)", labelpad=34)
        self._ax = ax
        dynamic = [self._mesh, *self._x_labels, *self._y_labels, ax.title]
        super().__init__(controls, figure, dynamic)

    def draw(self, head, example):
        weights = self.all_weights[example, head]  # (length, length)
        tokens = self.tokens[example].tolist()
        offsets = weight_by_offset(self.all_weights[:, head : head + 1])[0]  # (3,) at -1, 0, +1
        self.state = {"weights": weights, "tokens": tokens, "offsets": offsets}

        self._mesh.set_array(weights.numpy().ravel())
        for position, (x_label, y_label) in enumerate(
            zip(self._x_labels, self._y_labels, strict=True)
        ):
            x_label.set_text(f"{position}:{tokens[position]}")
            y_label.set_text(f"{position}:{tokens[position]}")
        self._ax.set_title(
            f"head {head}, example {example}. Mean over all {len(self.tokens)} examples: "
            f"left {offsets[0]:.2f}, itself {offsets[1]:.2f}, right {offsets[2]:.2f}",
            fontsize=9,
        )
