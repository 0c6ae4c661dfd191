"""Interactive explorers: controls plus a figure that redraws when a control moves.

Each explorer keeps one matplotlib figure and updates its artists in place, then
renders it to PNG into an ``ipywidgets.Image`` (no JavaScript beyond ipywidgets', so
it works offline). ``explorer.state`` holds the numbers the figure is drawn from,
so tests can set ``explorer.controls[name].value`` and check what changed without
a browser. Display ``explorer.widget`` in a notebook; ``explorer.figure`` is the
static view of the current settings.
"""

import contextlib
import io
import zlib
from collections.abc import Iterator

import ipywidgets as widgets
import numpy as np
import PIL.Image
import torch
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from helpers import validation
from helpers.attention import masked_softmax
from helpers.bahdanau import (
    MAX_SOURCE_TOKENS,
    load_translator,
    shown_tokens,
    translate_with_alignment,
)
from helpers.bahdanau import MODELS as TRANSLATORS
from helpers.dates import MAX_SOURCE_LENGTH, attention_for, load_date_model
from helpers.kernel_regression import RegressionData, gaussian_kernel, kernel_pooling, make_data
from helpers.masks import MASK_KINDS, PAD_MARKERS, build_mask
from helpers.neighbour_task import NeighbourModel, make_neighbour_batch, weight_by_offset
from helpers.plotting import TokenHeatmap, draw_heatmap
from helpers.positional import frequencies, offset_rotations, sinusoidal_encoding
from helpers.scoring import dot_scores, random_queries_keys, saturation_statistics
from helpers.transformer import Seq2SeqTransformer
from helpers.translation import MAX_WORDS, load_tokenizer


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one thread inside the block: an explorer's small computations gain nothing
    from more, and with a training notebook running beside it, torch's thread pools would
    fight over the cores (one redraw took seconds instead of tens of milliseconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
        top = next((limit for limit in limits if largest <= limit), limits[-1])
        if ax.get_ylim()[1] != top:
            ax.set_ylim(0, top)
            self.redraw_background()

    def update(self) -> None:
        with one_torch_thread():
            try:
                unset = [name for name, value in self.values().items() if value is None]
                if unset:
                    raise ValueError(f"choose a value for {', '.join(unset)}")
                self.draw(**self.values())
            except ValueError as problem:  # a setting the figure cannot show: say so in it
                self.state = {"error": str(problem)}
                self.show_error(self.figure.axes[0], problem)
                self.redraw_background()
        self.image.value = self.render_png()

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

    def __init__(self, data: RegressionData | None = None, width: float = 0.3, query: float = 2.5):
        self.data = data if data is not None else make_data()
        if not isinstance(self.data, RegressionData):
            raise ValueError(f"data must come from make_data(), got {type(self.data).__name__}")
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

    def draw(self, width: float, query: float) -> None:
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

    def __init__(
        self,
        scores: torch.Tensor | None = None,
        key_tokens: list[str] | None = None,
        valid_len: int = 4,
        query: int = 0,
    ):
        if scores is None:
            generator = torch.Generator().manual_seed(2)
            scores = torch.randn(4, 6, generator=generator) * 1.5  # (q, k)
        validation.tensor(scores, "scores", "(q, k)")
        if scores.dim() != 2 or not scores.is_floating_point():
            raise ValueError(
                f"scores must be floating point (q, k), got {scores.dtype} {tuple(scores.shape)}"
            )
        self.scores = scores
        num_queries, num_keys = scores.shape
        if key_tokens is not None and len(key_tokens) != num_keys:
            raise ValueError(f"{len(key_tokens)} key_tokens for {num_keys} keys")
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

    def draw(self, valid_len: int, query: int) -> None:
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

    def draw(self, d_k: int, scaled: bool, temperature: float) -> None:
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

    def __init__(
        self,
        model: NeighbourModel | None = None,
        tokens: torch.Tensor | None = None,
        head: int = 0,
        example: int = 0,
    ):
        """model: a NeighbourModel (untrained if not given); tokens: (examples, n)."""
        if model is None:
            torch.manual_seed(0)
            model = NeighbourModel()
        if not isinstance(model, NeighbourModel):
            raise ValueError(f"model must be a NeighbourModel, got {type(model).__name__}")
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
        self._map = TokenHeatmap(ax, length, length, "Reds")
        figure.colorbar(self._map.mesh, ax=ax, label="attention weight")
        ax.set_xlabel("keys (position:token)", labelpad=24)
        ax.set_ylabel("queries (position:token)", labelpad=34)
        self._ax = ax
        super().__init__(controls, figure, [*self._map.artists, ax.title])

    def draw(self, head: int, example: int) -> None:
        weights = self.all_weights[example, head]  # (length, length)
        tokens = self.tokens[example].tolist()
        offsets = weight_by_offset(self.all_weights[:, head : head + 1])[0]  # (3,) at -1, 0, +1
        self.state = {"weights": weights, "tokens": tokens, "offsets": offsets}

        labels = [f"{position}:{token}" for position, token in enumerate(tokens)]
        self._map.show(weights.numpy(), labels, labels)
        self._ax.set_title(
            f"head {head}, example {example}. Mean over all {len(self.tokens)} examples: "
            f"left {offsets[0]:.2f}, itself {offsets[1]:.2f}, right {offsets[2]:.2f}",
            fontsize=9,
        )


class PositionalExplorer(Explorer):
    """Chapter 05: one sin/cos pair of the sinusoidal encoding; an offset slider shows that
    moving delta positions turns the pair's point by the same angle at every position."""

    STARTS = (0, 6, 12, 18)

    def __init__(self, offset: int = 3, pair: int = 2, d_model: int = 32, max_len: int = 60):
        longest_offset = 30
        if validation.whole_number(max_len, "max_len") <= self.STARTS[-1] + longest_offset:
            raise ValueError(
                f"max_len must be more than {self.STARTS[-1] + longest_offset}: the arrows start "
                f"at positions up to {self.STARTS[-1]} and move up to {longest_offset}"
            )
        self.encoding = sinusoidal_encoding(max_len, d_model)  # (max_len, d_model)
        self.rates = frequencies(d_model)  # (d_model / 2,)
        controls = {
            "offset": widgets.IntSlider(
                value=offset, min=0, max=longest_offset, description="offset δ"
            ),
            "pair": widgets.IntSlider(
                value=pair, min=0, max=d_model // 2 - 1, description="frequency pair j"
            ),
        }
        figure = Figure(figsize=(10, 4.2), layout="constrained")
        left, right = figure.subplots(1, 2, width_ratios=[3, 2])
        positions = np.arange(max_len)
        (self._sin_line,) = left.plot(positions, np.zeros(max_len), ".-", label="P[i, 2j] (sin)")
        (self._cos_line,) = left.plot(positions, np.zeros(max_len), ".-", label="P[i, 2j+1] (cos)")
        colours = [f"C{k + 2}" for k in range(len(self.STARTS))]
        self._start_marks = left.scatter(np.zeros(4), np.zeros(4), c=colours, s=60, zorder=3)
        self._end_marks = left.scatter(
            np.zeros(4), np.zeros(4), c=colours, s=60, marker="s", zorder=3
        )
        left.set_ylim(-1.15, 1.35)
        left.set_xlabel("position i")
        left.set_ylabel("encoding value")
        left.legend(loc="upper right", ncols=2, fontsize="small")
        angle = np.linspace(0, 2 * np.pi, 200)
        right.plot(np.cos(angle), np.sin(angle), color="lightgray", lw=1)
        self._points = right.scatter(
            np.zeros(max_len), np.zeros(max_len), c=positions, cmap="viridis", s=14
        )
        figure.colorbar(self._points, ax=right, label="position i")
        self._arrows = [
            right.annotate(
                "",
                xy=(0, 0),
                xytext=(0, 0),
                arrowprops={"arrowstyle": "->", "color": colour, "lw": 2},
            )
            for colour in colours
        ]
        right.set_aspect("equal")
        right.set_xlim(-1.2, 1.2)
        right.set_ylim(-1.2, 1.2)
        right.set_xlabel("P[i, 2j+1] (cos)")
        right.set_ylabel("P[i, 2j] (sin)")
        self._left, self._right = left, right
        dynamic = [self._sin_line, self._cos_line, self._start_marks, self._end_marks]
        dynamic += [self._points, *self._arrows, left.title, right.title]
        super().__init__(controls, figure, dynamic)

    def draw(self, offset: int, pair: int) -> None:
        pair_values = self.encoding[:, 2 * pair : 2 * pair + 2]  # (max_len, 2): sin, cos
        rotation = offset_rotations(offset, self.encoding.shape[1])[pair]  # (2, 2)
        moved = pair_values[: -offset or None] @ rotation.T  # R @ P[i] for every i
        error = (moved - pair_values[offset:]).abs().max().item()
        rate = self.rates[pair].item()
        self.state = {"rotation": rotation, "max_error": error, "angle": rate * offset}

        sines, cosines = pair_values[:, 0].numpy(), pair_values[:, 1].numpy()
        self._sin_line.set_ydata(sines)
        self._cos_line.set_ydata(cosines)
        starts = np.array(self.STARTS)
        ends = starts + offset
        self._start_marks.set_offsets(np.c_[starts, sines[starts]])
        self._end_marks.set_offsets(np.c_[ends, sines[ends]])
        self._points.set_offsets(np.c_[cosines, sines])
        for arrow, start, end in zip(self._arrows, starts, ends, strict=True):
            arrow.xyann = (cosines[start], sines[start])
            arrow.xy = (cosines[end], sines[end])
        self._left.set_title(
            f"pair j = {pair}: rate ω = {rate:.3g} rad per position, wavelength "
            f"{2 * np.pi / rate:,.0f} positions; ● i and ■ i + {offset}",
            fontsize=10,
        )
        self._right.set_title(
            f"i → i + {offset}: every point turns by ωδ = {np.degrees(rate * offset) % 360:.1f}°",
            fontsize=10,
        )


def _token_embedding(token: str, size: int = 8) -> torch.Tensor:
    """A fixed random vector per token string, the same on every run and machine."""
    generator = torch.Generator().manual_seed(zlib.crc32(token.encode()))
    return torch.randn(size, generator=generator)


def _shortened(text: str, most: int = 80) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"


class MaskBuilderExplorer(Explorer):
    """Chapter 06: type target and source tokens (pads as <pad> or _), pick a kind of mask,
    and see the mask next to the attention weights it leaves."""

    MAX_TOKENS = 12
    MAX_TOKEN_CHARACTERS = 15

    def __init__(
        self,
        tokens: str = "<pad> <pad> the cat sat",
        source: str = "le chat <pad>",
        kind: str = "padding + causal",
    ):
        controls = {
            "tokens": widgets.Text(
                value=tokens,
                description="target tokens (queries)",
                placeholder=f"up to {self.MAX_TOKENS} tokens; a pad is <pad> or _",
            ),
            "source": widgets.Text(
                value=source,
                description="source tokens",
                placeholder=f"up to {self.MAX_TOKENS} tokens; a pad is <pad> or _",
            ),
            "kind": widgets.ToggleButtons(options=MASK_KINDS, value=kind, description="mask"),
        }
        figure = Figure(figsize=(10, 4.8), layout="constrained")
        self._summary = figure.suptitle("target:", fontsize=9, parse_math=False)
        self._mask_ax, self._weight_ax = axes = figure.subplots(1, 2)
        size = self.MAX_TOKENS
        self._mask_map = TokenHeatmap(axes[0], size, size, ListedColormap(["#eeeeee", "#2ca02c"]))
        self._weight_map = TokenHeatmap(axes[1], size, size, "Reds")
        for ax in axes:
            ax.set_xlabel("keys", labelpad=28)
            ax.set_ylabel("queries (target)", labelpad=44)
        mask_bar = figure.colorbar(self._mask_map.mesh, ax=axes[0], ticks=[0.25, 0.75])
        mask_bar.set_ticklabels(["False\n(may not)", "True\n(may attend)"])
        figure.colorbar(self._weight_map.mesh, ax=axes[1], label="attention weight")
        dynamic = [*self._mask_map.artists, *self._weight_map.artists, self._summary]
        super().__init__(controls, figure, dynamic + [ax.title for ax in axes])

    def _parse(self, text: str, name: str) -> list[str]:
        longest = self.MAX_TOKENS * (self.MAX_TOKEN_CHARACTERS + 1)
        if len(text) > longest:
            raise ValueError(f"at most {longest} characters of {name} tokens, got {len(text)}")
        words = text.split()
        if not words:
            raise ValueError(f"type at least one {name} token, separated by spaces")
        if len(words) > self.MAX_TOKENS:
            raise ValueError(f"at most {self.MAX_TOKENS} {name} tokens, got {len(words)}")
        long_words = [word for word in words if len(word) > self.MAX_TOKEN_CHARACTERS]
        if long_words:
            raise ValueError(
                f"a token has at most {self.MAX_TOKEN_CHARACTERS} characters: "
                f"{long_words[0][:12]}… has {len(long_words[0])}"
            )
        return words

    def draw(self, tokens: str, source: str, kind: str) -> None:
        self._summary.set_text(f"target: {_shortened(tokens)}      source: {_shortened(source)}")
        try:
            target = self._parse(tokens, "target")
            keys = self._parse(source, "source") if kind == "cross-attention" else target
        except ValueError as problem:
            self.state = {"error": str(problem)}
            self._mask_map.hide()
            self._weight_map.hide()
            self.show_error(self._mask_ax, problem)
            self._weight_ax.set_title("")
            return
        mask = build_mask(target, keys, kind)  # (q, k)
        queries = torch.stack([_token_embedding(t) for t in target])  # (queries, 8)
        key_vectors = torch.stack([_token_embedding(t) for t in keys])  # (keys, 8)
        weights = masked_softmax(queries @ key_vectors.T / 8**0.5, mask=mask)
        empty_rows = [f"{target[i]} ({i})" for i in torch.nonzero(~mask.any(1)).flatten()]
        self.state = {"mask": mask, "weights": weights, "fully_masked_rows": empty_rows}

        self._mask_map.show(mask.float().numpy(), keys, target, grey=PAD_MARKERS)
        self._weight_map.show(weights.numpy(), keys, target, grey=PAD_MARKERS)
        key_side = "source" if kind == "cross-attention" else "target"
        self._mask_ax.set_title(
            f"{kind} mask {tuple(mask.shape)}: target queries × {key_side} keys",
            color="black",
            fontsize=10,
        )
        self._weight_ax.set_title(
            f"fully masked: {', '.join(empty_rows)} → all-zero rows"
            if empty_rows
            else "attention weights: every row sums to 1",
            fontsize=10,
            parse_math=False,
        )


class DateExplorer(Explorer):
    """Chapter 07: type a date; pick the kind of attention, the layer and the head; see the
    trained model's prediction and that head's attention over the characters."""

    KINDS = ("encoder self-attention", "decoder self-attention", "cross-attention")

    def __init__(
        self,
        model: Seq2SeqTransformer | None = None,
        date: str = "Tuesday, March 3rd 2015",
        kind: str = "cross-attention",
    ):
        """model: a trained Seq2SeqTransformer (default: the one saved in data/)."""
        self.model = model if model is not None else load_date_model()[0]
        if not isinstance(self.model, Seq2SeqTransformer):
            raise ValueError(f"model must be a Seq2SeqTransformer, got {type(self.model).__name__}")
        config = self.model.config
        controls = {
            "date": widgets.Text(value=date, description="date"),
            "kind": widgets.ToggleButtons(options=self.KINDS, value=kind, description="attention"),
            "layer": widgets.ToggleButtons(
                options=[(f"layer {i}", i) for i in range(config.num_layers)],
                value=config.num_layers - 1,
                description="layer",
            ),
            "head": widgets.ToggleButtons(
                options=[(f"head {h}", h) for h in range(config.num_heads)],
                value=0,
                description="head",
            ),
        }
        for control in controls.values():
            if isinstance(control, widgets.ToggleButtons):
                control.style.button_width = "auto"
        figure = Figure(figsize=(11, 4.6), layout="constrained")
        ax = figure.subplots()
        self._map = TokenHeatmap(ax, MAX_SOURCE_LENGTH, MAX_SOURCE_LENGTH, "Reds")
        figure.colorbar(self._map.mesh, ax=ax, label="attention weight", shrink=0.9)
        ax.set_xlabel(" ", labelpad=30)  # room for the axis names, which change with the kind
        ax.set_ylabel(" ", labelpad=40)
        self._axis_names = (
            ax.text(0.5, -0.13, "", ha="center", va="top", transform=ax.transAxes),
            ax.text(-0.06, 0.5, "", ha="right", va="center", rotation=90, transform=ax.transAxes),
        )
        self._ax, self._computed = ax, {}
        super().__init__(controls, figure, [*self._map.artists, *self._axis_names, ax.title])

    def _attention(self, text: str) -> dict:
        if text not in self._computed:
            self._computed = {text: attention_for(self.model, text)}  # keep only the latest
        return self._computed[text]

    def draw(self, date: str, kind: str, layer: int, head: int) -> None:
        try:
            found = self._attention(date)
        except ValueError as problem:
            self.state = {"error": str(problem)}
            self._map.hide()
            for text in self._axis_names:
                text.set_text("")
            self.show_error(self._ax, problem)
            return
        weights = found["maps"][kind][layer][head]  # (q, k)
        written = [f"→{c}" for c in found["written"]]  # the character each decoder step wrote
        columns, rows, names = {
            "encoder self-attention": (
                found["source"],
                found["source"],
                ("source characters (keys)", "source characters (queries)"),
            ),
            "decoder self-attention": (
                found["decoder_input"],
                written,
                ("decoder input (keys)", "output (queries)"),
            ),
            "cross-attention": (
                found["source"],
                written,
                ("source characters (keys)", "output (queries)"),
            ),
        }[kind]
        self.state = {"prediction": found["prediction"], "weights": weights}
        self._map.show(weights.numpy(), columns, rows)
        for text, name in zip(self._axis_names, names, strict=True):
            text.set_text(name)
        self._ax.set_title(
            f"“{date}” → {found['prediction']}      {kind}, layer {layer}, head {head}",
            color="black",
            fontsize=11,
            parse_math=False,
        )


class TranslationExplorer(Explorer):
    """Chapter 08: type an English sentence; see both models' French, and where the attention
    model looked in the English while it wrote each French token."""

    MAX_OUTPUT = 2 * MAX_WORDS + 6  # output tokens shown

    def __init__(self, sentence: str = "Tom has a blue car.", models: dict | None = None):
        """models: {"rnn-bottleneck": model, "rnn-bahdanau": model} (default: those in data/)."""
        self.models = models or {name: load_translator(name)[0] for name in TRANSLATORS}
        self.tokenizer = load_tokenizer()
        controls = {
            "sentence": widgets.Text(
                value=sentence,
                description="English sentence",
                placeholder=f"up to {MAX_WORDS} words",
                layout=widgets.Layout(width="60%"),
            )
        }
        figure = Figure(figsize=(9, 6.2), layout="constrained")
        ax = figure.subplots()
        self._map = TokenHeatmap(ax, self.MAX_OUTPUT, MAX_SOURCE_TOKENS, "Reds")
        figure.colorbar(self._map.mesh, ax=ax, label="attention weight", shrink=0.8)
        ax.set_xlabel("English tokens (keys: the encoder's states)", labelpad=30)
        ax.set_ylabel("French tokens written (queries: the decoder's states)", labelpad=55)
        self._ax = ax
        super().__init__(controls, figure, [*self._map.artists, ax.title])

    def draw(self, sentence: str) -> None:
        try:
            found = {
                name: translate_with_alignment(model, self.tokenizer, sentence)
                for name, model in self.models.items()
            }
        except ValueError as problem:
            self.state = {"error": str(problem)}
            self._map.hide()
            self.show_error(self._ax, problem)
            return
        attention = found["rnn-bahdanau"]
        rows = min(len(attention["output_tokens"]), self.MAX_OUTPUT)
        weights = attention["weights"][:rows]  # (output tokens, source tokens)
        self.state = {
            "translations": {name: found[name]["translation"] for name in found},
            "weights": weights,
        }
        self._map.show(
            weights.numpy(),
            shown_tokens(attention["source_tokens"]),
            shown_tokens(attention["output_tokens"][:rows]),
        )
        self._ax.set_title(
            f"with attention:      {attention['translation']}\n"
            f"without attention: {found['rnn-bottleneck']['translation']}",
            color="black",
            fontsize=11,
            parse_math=False,
        )
