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
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers import validation
from helpers.attention import (
    DotProductAttention,
    KeyValueCache,
    MultiHeadAttention,
    masked_softmax,
)
from helpers.bahdanau import (
    MAX_SOURCE_TOKENS,
    RNNTranslator,
    load_translator,
    shown_tokens,
    translate_with_alignment,
)
from helpers.bahdanau import MODELS as TRANSLATORS
from helpers.dates import MAX_SOURCE_LENGTH, attention_for, load_date_model
from helpers.efficient import grouped_from_multi_head, key_tile_steps, kv_head_of_query_heads
from helpers.kernel_regression import RegressionData, gaussian_kernel, kernel_pooling, make_data
from helpers.long_context import (
    block_sparse_mask,
    dilated_mask,
    fraction_computed,
    fraction_of_tiles,
    global_mask,
)
from helpers.masks import MASK_KINDS, PAD_MARKERS, build_mask, causal_mask
from helpers.neighbour_task import NeighbourModel, make_neighbour_batch, weight_by_offset
from helpers.plotting import TokenHeatmap, draw_heatmap
from helpers.positional import (
    apply_rope,
    frequencies,
    offset_rotations,
    sinusoidal_encoding,
)
from helpers.scoring import dot_scores, random_queries_keys, saturation_statistics
from helpers.transformer import Seq2SeqTransformer
from helpers.transformer_translation import TransformerTranslator, translate_with_attention
from helpers.transformer_translation import load_translator as load_transformer_translator
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
        _check_sentence(sentence)
        self.tokenizer = load_tokenizer()
        if models is None:
            models = {name: load_translator(name)[0] for name in TRANSLATORS}
        self.models = _checked_rnn_models(models, self.tokenizer.get_vocab_size())
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


def _check_sentence(sentence: object) -> None:
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be text (a str), got {type(sentence).__name__}")


def _check_vocabulary(name: str, model_size: int, tokenizer_size: int) -> None:
    if model_size != tokenizer_size:
        raise ValueError(
            f"{name} has a vocabulary of {model_size} tokens; the tokenizer's has {tokenizer_size}"
        )


def _checked_rnn_models(models: object, vocab_size: int) -> dict:
    """Chapter 08's two RNN translators by name, each with its attention setting."""
    if not isinstance(models, dict) or set(models) != set(TRANSLATORS):
        found = f"the keys {list(models)}" if isinstance(models, dict) else type(models).__name__
        raise TypeError(
            f"models must be a dict with the keys {list(TRANSLATORS)} (one RNNTranslator each), "
            f"got {found}"
        )
    for name, attention in TRANSLATORS.items():
        model = models[name]
        if not isinstance(model, RNNTranslator):
            raise TypeError(
                f"models[{name!r}] must be an RNNTranslator, got {type(model).__name__}"
            )
        if model.config.attention != attention:
            raise ValueError(
                f"models[{name!r}] must be an RNNTranslator with attention={attention}, got one "
                f"with attention={model.config.attention}"
            )
        _check_vocabulary(f"models[{name!r}]", model.config.vocab_size, vocab_size)
    return dict(models)


class TransformerTranslationExplorer(Explorer):
    """Chapter 09: type an English sentence, pick the beam width, a decoder layer and a head;
    see the Transformer's French and where that head's cross-attention looked while writing
    each French token."""

    MAX_OUTPUT = 2 * MAX_WORDS + 6  # output tokens shown
    BEAMS = (1, 2, 4, 8)

    def __init__(self, sentence: str = "Tom has a blue car.", model=None):
        """model: a TransformerTranslator (default: the one in data/)."""
        _check_sentence(sentence)
        self.tokenizer = load_tokenizer()
        if model is None:
            model = load_transformer_translator("transformer")[0]
        if not isinstance(model, TransformerTranslator):
            raise TypeError(f"model must be a TransformerTranslator, got {type(model).__name__}")
        _check_vocabulary("model", model.config.src_vocab_size, self.tokenizer.get_vocab_size())
        self.model = model
        self._found = {}  # (sentence, beam) -> translate_with_attention's result
        layers, heads = self.model.config.num_layers, self.model.config.num_heads
        controls = {
            "sentence": widgets.Text(
                value=sentence,
                description="English sentence",
                placeholder=f"up to {MAX_WORDS} words",
                layout=widgets.Layout(width="45%"),
            ),
            "beam": widgets.Dropdown(options=self.BEAMS, value=4, description="beam width"),
            "layer": widgets.Dropdown(
                options=range(1, layers + 1), value=layers, description="layer"
            ),
            "head": widgets.Dropdown(
                options=[*range(1, heads + 1), "mean"], value=1, description="head"
            ),
        }
        figure = Figure(figsize=(9, 6.2), layout="constrained")
        ax = figure.subplots()
        self._map = TokenHeatmap(ax, self.MAX_OUTPUT, MAX_SOURCE_TOKENS, "Blues")
        figure.colorbar(self._map.mesh, ax=ax, label="cross-attention weight", shrink=0.8)
        ax.set_xlabel("English tokens (keys: the encoder's output)", labelpad=30)
        ax.set_ylabel("French tokens written (queries: the decoder)", labelpad=55)
        self._ax = ax
        super().__init__(controls, figure, [*self._map.artists, ax.title])

    def translation(self, sentence: str, beam: int) -> dict:
        key = (sentence, beam)
        if key not in self._found:
            found = translate_with_attention(self.model, self.tokenizer, sentence, beam)
            self._found = {key: found}  # only the latest: a learner moves on
        return self._found[key]

    def draw(self, sentence: str, beam: int, layer: int, head) -> None:
        try:
            found = self.translation(sentence, beam)
        except ValueError as problem:
            self.state = {"error": str(problem)}
            self._map.hide()
            self.show_error(self._ax, problem)
            return
        heads = found["cross_attention"][layer - 1]  # (heads, output tokens, source tokens)
        weights = heads.mean(0) if head == "mean" else heads[head - 1]
        rows = min(len(found["output_tokens"]), self.MAX_OUTPUT)
        self.state = {"translation": found["translation"], "weights": weights[:rows]}
        self._map.show(
            weights[:rows].numpy(),
            shown_tokens(found["source_tokens"]),
            shown_tokens(found["output_tokens"][:rows]),
        )
        which = "mean of the heads" if head == "mean" else f"head {head}"
        self._ax.set_title(
            f"{found['translation']}\nbeam {beam}, cross-attention of layer {layer}, {which}",
            color="black",
            fontsize=11,
            parse_math=False,
        )


class RopeExplorer(Explorer):
    """Chapter 11: RoPE's frequencies, and the score q_m . k_n against m - n. Moving both
    positions by the same shift leaves every RoPE score where it was; the scores of chapter
    05's additive encoding move."""

    WINDOW = 64  # keys n = shift .. shift + 63, the query at m = shift + 32
    MAX_SHIFT, BASES = 1000, (10.0, 1e5)  # the sliders' ranges

    def __init__(self, shift: int = 200, base: float = 10000.0, d: int = 16, seed: int = 0):
        if validation.whole_number(shift, "shift", minimum=0) > self.MAX_SHIFT:
            raise ValueError(f"shift must be at most {self.MAX_SHIFT}, got {shift}")
        if not self.BASES[0] <= validation.positive_number(base, "base") <= self.BASES[1]:
            raise ValueError(f"base must be between 10 and 100000, got {base!r}")
        d = validation.whole_number(d, "d")
        if d % 2:
            raise ValueError(f"d ({d}) must be even: RoPE turns pairs of dimensions")
        generator = torch.Generator().manual_seed(validation.whole_number(seed, "seed", 0))
        self.query = torch.randn(1, d, generator=generator, dtype=torch.float64) + 0.5
        self.key = torch.randn(1, d, generator=generator, dtype=torch.float64) + 0.5
        self.d = d
        controls = {
            "shift": widgets.IntSlider(
                value=shift,
                min=0,
                max=self.MAX_SHIFT,
                step=10,
                description="shift both positions by",
            ),
            "base": widgets.FloatLogSlider(
                value=base, base=10, min=1, max=5, step=1, description="base"
            ),
        }
        figure = Figure(figsize=(10, 4.2), layout="constrained")
        left, right = figure.subplots(1, 2, width_ratios=[2, 3])
        pairs = np.arange(d // 2)
        self._bars = left.bar(pairs, np.ones(d // 2), color="tab:blue")
        left.axhline(self.WINDOW, color="gray", ls="--", lw=1)
        left.text(-0.4, self.WINDOW * 1.3, f"{self.WINDOW} positions", ha="left", fontsize=8)
        left.set_yscale("log")
        left.set_ylim(1, 2e6)
        left.set_xticks(pairs)
        left.set_xlabel("pair j (dimensions 2j, 2j + 1)")
        left.set_ylabel("wavelength 2π / ω_j (positions)")
        offsets = np.arange(self.WINDOW // 2, self.WINDOW // 2 - self.WINDOW, -1)  # m - n
        zeros = np.zeros(self.WINDOW)
        (self._rope_reference,) = right.plot(
            offsets, zeros, color="tab:blue", lw=1, alpha=0.5, label="RoPE, shift 0"
        )
        (self._additive_reference,) = right.plot(
            offsets, zeros, color="tab:orange", lw=1, alpha=0.5, label="additive (ch. 05), shift 0"
        )
        (self._rope_dots,) = right.plot(
            offsets, zeros, "o", color="tab:blue", ms=3, label="RoPE, shifted"
        )
        (self._additive_dots,) = right.plot(
            offsets, zeros, "s", color="tab:orange", ms=3, label="additive, shifted"
        )
        right.set_xlabel("m − n (query position − key position)")
        right.set_ylabel("score q_m · k_n")
        right.legend(loc="upper left", fontsize=7, ncols=2)
        self._left, self._right = left, right
        dynamic = [*self._bars, self._rope_reference, self._additive_reference]
        dynamic += [self._rope_dots, self._additive_dots, left.title, right.title]
        super().__init__(controls, figure, dynamic)

    def scores(self, shift: int, base: float) -> dict:
        """{"rope", "additive"}: (WINDOW,) scores of the query at m = shift + WINDOW / 2 with
        the key at n = shift .. shift + WINDOW - 1, in float64."""
        positions = torch.arange(shift, shift + self.WINDOW)  # (WINDOW,): the key positions
        query_position = positions[self.WINDOW // 2 : self.WINDOW // 2 + 1]  # (1,)
        keys = apply_rope(self.key.expand(self.WINDOW, -1), positions, base)  # (WINDOW, d)
        query = apply_rope(self.query, query_position, base)  # (1, d)
        rates = frequencies(self.d, base)  # (d / 2,)

        def encoded(vector: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
            # vector + the sinusoidal encoding (chapter 05) of each position in where
            angles = where.double()[:, None] * rates
            encoding = torch.stack([angles.sin(), angles.cos()], -1).flatten(-2)
            return vector + encoding

        additive = encoded(self.query, query_position) @ encoded(self.key, positions).T
        return {"rope": (query @ keys.T)[0], "additive": additive[0]}

    def draw(self, shift: int, base: float) -> None:
        shifted, start = self.scores(shift, base), self.scores(0, base)
        rope_change = (shifted["rope"] - start["rope"]).abs().max().item()
        additive_change = (shifted["additive"] - start["additive"]).abs().max().item()
        wavelengths = (2 * np.pi / frequencies(self.d, base)).numpy()
        self.state = {
            "rope": shifted["rope"],
            "additive": shifted["additive"],
            "rope_change": rope_change,
            "additive_change": additive_change,
            "wavelengths": wavelengths,
        }
        for bar, wavelength in zip(self._bars, wavelengths, strict=True):
            bar.set_height(wavelength)
        for line, values in (
            (self._rope_reference, start["rope"]),
            (self._additive_reference, start["additive"]),
            (self._rope_dots, shifted["rope"]),
            (self._additive_dots, shifted["additive"]),
        ):
            line.set_ydata(values.numpy())
        everything = torch.cat([*shifted.values(), *start.values()])
        low, high = everything.min().item(), everything.max().item()
        limits = (np.floor(low / 5) * 5 - 5, np.ceil(high / 5) * 5 + 5)
        if self._right.get_ylim() != limits:
            self._right.set_ylim(*limits)
            self.redraw_background()
        self._left.set_title(
            f"base {base:g}: wavelengths {wavelengths[0]:.3g} … {wavelengths[-1]:,.0f}",
            fontsize=10,
        )
        self._right.set_title(
            f"m = {shift + self.WINDOW // 2}, n = {shift} … {shift + self.WINDOW - 1}: "
            f"RoPE moved by {rope_change:.0e}, additive by {additive_change:.2f}",
            fontsize=10,
        )


SPARSE_PATTERNS = ("sliding window", "window + global", "block-sparse")


class SparsePatternExplorer(Explorer):
    """Chapter 11: sparse attention patterns over 64 positions. Left: the entries a query may
    score (a dilated window keeps every dilation-th key); right: the 8 x 8 tiles holding any of
    them, which is what a kernel that skips whole tiles computes."""

    SIZE, TILE = 64, 8
    MAX_RADIUS, MAX_DILATION = 16, 4  # the sliders' ranges

    def __init__(
        self,
        pattern: str = "window + global",
        radius: int = 4,
        dilation: int = 1,
        causal: bool = False,
    ):
        if pattern not in SPARSE_PATTERNS:
            raise ValueError(f"pattern must be one of {SPARSE_PATTERNS}, got {pattern!r}")
        if validation.whole_number(radius, "radius", minimum=0) > self.MAX_RADIUS:
            raise ValueError(f"radius must be at most {self.MAX_RADIUS}, got {radius}")
        if validation.whole_number(dilation, "dilation") > self.MAX_DILATION:
            raise ValueError(f"dilation must be at most {self.MAX_DILATION}, got {dilation}")
        validation.flag(causal, "causal")
        controls = {
            "pattern": widgets.ToggleButtons(
                options=SPARSE_PATTERNS, value=pattern, description="pattern"
            ),
            "radius": widgets.IntSlider(
                value=radius, min=0, max=self.MAX_RADIUS, description="window radius"
            ),
            "dilation": widgets.IntSlider(
                value=dilation, min=1, max=self.MAX_DILATION, description="dilation"
            ),
            "causal": widgets.Checkbox(value=causal, description="causal"),
        }
        figure = Figure(figsize=(10, 4.6), layout="constrained")
        left, right = figure.subplots(1, 2)
        colours = ListedColormap(["#eeeeee", "#2ca02c"])
        self._entries = left.pcolormesh(
            np.zeros((self.SIZE, self.SIZE)), cmap=colours, vmin=0, vmax=1
        )
        tiles = self.SIZE // self.TILE
        self._tiles = right.pcolormesh(np.zeros((tiles, tiles)), cmap=colours, vmin=0, vmax=1)
        for ax, count in ((left, self.SIZE), (right, tiles)):
            ax.set_xlim(0, count)
            ax.set_ylim(count, 0)
            ax.set_aspect("equal")
            ax.set_xlabel("key position" if ax is left else "key tile")
            ax.set_ylabel("query position" if ax is left else "query tile")
        left.set_xticks(np.arange(0, self.SIZE + 1, self.TILE))
        left.set_yticks(np.arange(0, self.SIZE + 1, self.TILE))
        right.set_xticks(np.arange(tiles) + 0.5, [str(t) for t in range(tiles)])
        right.set_yticks(np.arange(tiles) + 0.5, [str(t) for t in range(tiles)])
        self._left, self._right = left, right
        super().__init__(controls, figure, [self._entries, self._tiles, left.title, right.title])

    def mask(self, pattern: str, radius: int, dilation: int, causal: bool) -> torch.Tensor:
        """(SIZE, SIZE), True = may attend: the explorer's pattern for these settings."""
        if pattern not in SPARSE_PATTERNS:
            raise ValueError(f"pattern must be one of {SPARSE_PATTERNS}, got {pattern!r}")
        if pattern == "block-sparse":
            mask = block_sparse_mask(self.SIZE, self.TILE, num_random=1, num_global=1)
        else:
            mask = dilated_mask(self.SIZE, radius, dilation)
            if pattern == "window + global":
                mask = mask | global_mask(self.SIZE, [0])
        return mask & causal_mask(self.SIZE) if causal else mask

    def draw(self, pattern: str, radius: int, dilation: int, causal: bool) -> None:
        block = pattern == "block-sparse"
        self.controls["radius"].disabled = self.controls["dilation"].disabled = block
        mask = self.mask(pattern, radius, dilation, causal)  # (SIZE, SIZE)
        tiles = mask.reshape(self.SIZE // self.TILE, self.TILE, -1, self.TILE).any(3).any(1)
        entries, tiled = fraction_computed(mask), fraction_of_tiles(mask, self.TILE)
        self.state = {"mask": mask, "tiles": tiles, "entries": entries, "tiled": tiled}
        self._entries.set_array(mask.float().numpy())
        self._tiles.set_array(tiles.float().numpy())
        self._left.set_title(
            f"{pattern}: {int(mask.sum()):,} of {mask.numel():,} scores ({entries:.1%})",
            fontsize=10,
        )
        self._right.set_title(
            f"{int(tiles.sum())} of {tiles.numel()} tiles of {self.TILE}x{self.TILE} "
            f"({tiled:.1%}); a dense kernel: 100%",
            fontsize=10,
        )


class TileStepperExplorer(Explorer):
    """Chapter 10: FlashAttention's inner loop for one block of queries. Step through the key
    tiles and see the current tile's scores, the running maximum, the running normaliser and
    the partial output, next to the exact output they converge to."""

    MASKS = ("none", "causal", "left padding")
    PADS = 6  # the pad keys of "left padding": more than one tile, so a whole tile is masked

    def __init__(
        self, tile: int = 1, block: int = 1, mask: str = "left padding", tile_size: int = 4
    ):
        tile_size = validation.whole_number(tile_size, "tile_size")
        n, d = 16, 4
        if n % tile_size:
            raise ValueError(f"tile_size must divide the {n} positions, got {tile_size}")
        if mask not in self.MASKS:
            raise ValueError(f"mask must be one of {', '.join(self.MASKS)}, got {mask!r}")
        for name, value in (("tile", tile), ("block", block)):
            if validation.whole_number(value, name, minimum=0) >= n // tile_size:
                raise ValueError(
                    f"{name} must be from 0 to {n // tile_size - 1} ({n} positions in tiles of "
                    f"{tile_size}), got {value}"
                )
        generator = torch.Generator().manual_seed(10)
        self.query_vectors = 2 * torch.randn(n, d, generator=generator, dtype=torch.float64)
        self.key_vectors = torch.randn(n, d, generator=generator, dtype=torch.float64)
        self.value_vectors = torch.randn(n, d, generator=generator, dtype=torch.float64)
        self.tile_size, self.num_tiles = tile_size, n // tile_size
        positions = torch.arange(n)
        self.masks = {
            "none": torch.ones(n, n, dtype=torch.bool),
            "causal": positions[None, :] <= positions[:, None],
            "left padding": (positions >= self.PADS)[None, :].expand(n, n),
        }
        self._steps, self._exact = {}, {}  # (mask, block) -> the block's steps, its output
        for name, allowed in self.masks.items():
            for query_block in range(self.num_tiles):
                rows = slice(query_block * tile_size, (query_block + 1) * tile_size)
                self._steps[name, query_block] = list(
                    key_tile_steps(
                        self.query_vectors[rows],
                        self.key_vectors,
                        self.value_vectors,
                        allowed[rows],
                        tile_size,
                    )
                )
                self._exact[name, query_block] = DotProductAttention()(
                    self.query_vectors[None, rows],
                    self.key_vectors[None],
                    self.value_vectors[None],
                    mask=allowed[None, rows],
                )[0]
        controls = {
            "tile": widgets.IntSlider(
                value=tile, min=0, max=self.num_tiles - 1, description="key tiles read: up to"
            ),
            "block": widgets.IntSlider(
                value=block, min=0, max=self.num_tiles - 1, description="query block"
            ),
            "mask": widgets.ToggleButtons(options=self.MASKS, value=mask, description="mask"),
        }
        figure = Figure(figsize=(11, 6.2), layout="constrained")
        grid = figure.add_gridspec(2, 4, height_ratios=[1, 1.25])
        self._scores_ax = figure.add_subplot(grid[0, :])
        self._max_ax, self._sum_ax, self._partial_ax, self._exact_ax = (
            figure.add_subplot(grid[1, column]) for column in range(4)
        )
        self._build_scores(n)
        self._build_bars()
        self._build_outputs(d)
        dynamic = [
            self._score_mesh,
            *self._score_texts,
            self._tile_box,
            *self._max_bars,
            *self._sum_bars,
            self._final_max,
            self._final_sum,
            *self._max_texts,
            self._partial_mesh,
            self._exact_mesh,
            *self._partial_texts,
            *self._exact_texts,
        ]
        titles = [self._scores_ax.title, self._partial_ax.title]
        super().__init__(controls, figure, dynamic + titles)

    def _build_scores(self, n: int) -> None:
        ax, size = self._scores_ax, self.tile_size
        cmap = colormaps["viridis"].with_extremes(bad="#e6e6e6")  # grey: not read yet, or masked
        every_tile = torch.cat([s.scores.flatten() for v in self._steps.values() for s in v])
        limit = every_tile[every_tile.isfinite()].abs().max().item()
        self._score_mesh = ax.pcolormesh(
            np.ma.array(np.zeros((size, n)), mask=True),
            cmap=cmap,
            vmin=-limit,
            vmax=limit,
            edgecolors="white",
            lw=0.5,
        )
        ax.figure.colorbar(self._score_mesh, ax=ax, label="score q·k / √d", pad=0.01)
        self._score_texts = [  # the current tile's scores, moved to it on each redraw
            ax.text(0, 0, "", ha="center", va="center", fontsize=8) for _ in range(size * size)
        ]
        self._tile_box = ax.add_patch(
            Rectangle((0, 0), size, size, fill=False, edgecolor="tab:red", lw=3)
        )
        ax.set_xlim(0, n)
        ax.set_ylim(size, 0)
        ax.set_xticks(np.arange(n) + 0.5, [f"k{j}" for j in range(n)], fontsize=8)
        ax.set_yticks(np.arange(size) + 0.5, [f"row {i}" for i in range(size)], fontsize=8)
        for start in range(size, n, size):
            ax.axvline(start, color="black", lw=1.5)
        ax.set_xlabel("keys (grey: not read yet, or masked)")
        ax.set_ylabel("queries of the block")

    def _build_bars(self) -> None:
        rows = np.arange(self.tile_size)
        every_step = [step for steps in self._steps.values() for step in steps]
        finite = torch.cat([s.running_max[s.running_max.isfinite()] for s in every_step])
        low, high = min(0.0, finite.min().item() - 0.5), finite.max().item() + 0.5
        largest_sum = max(s.normaliser.max().item() for s in every_step)
        self._max_bars = self._max_ax.bar(rows, np.zeros(len(rows)), color="tab:blue")
        self._sum_bars = self._sum_ax.bar(rows, np.zeros(len(rows)), color="tab:orange")
        (self._final_max,) = self._max_ax.plot(rows, rows * 0.0, "k_", ms=22, mew=2.5)
        (self._final_sum,) = self._sum_ax.plot(rows, rows * 0.0, "k_", ms=22, mew=2.5)
        self._max_texts = [
            self._max_ax.text(row, 0, "", ha="center", va="bottom", fontsize=9) for row in rows
        ]
        self._max_ax.set_ylim(low, high)
        self._sum_ax.set_ylim(0, largest_sum * 1.1)
        self._max_ax.axhline(0, color="black", lw=0.8)
        self._max_ax.set_title("running max m after this tile", fontsize=10)
        self._sum_ax.set_title("ℓ = Σ exp(score − m) so far", fontsize=10)
        for ax, what in ((self._max_ax, "running max m"), (self._sum_ax, "running sum ℓ")):
            ax.set_xticks(rows, [f"row {row}" for row in rows])
            ax.set_ylabel(what)
            ax.set_xlabel("query row of the block (—: final)")

    def _build_outputs(self, d: int) -> None:
        size = self.tile_size
        largest = max(
            step.output.abs().max().item() for steps in self._steps.values() for step in steps
        )
        meshes, texts = [], []
        for ax in (self._partial_ax, self._exact_ax):
            mesh = ax.pcolormesh(np.zeros((size, d)), cmap="coolwarm", vmin=-largest, vmax=largest)
            ax.set_ylim(size, 0)
            ax.set_xticks(np.arange(d) + 0.5, [f"{j}" for j in range(d)])
            ax.set_yticks(np.arange(size) + 0.5, [f"row {i}" for i in range(size)])
            ax.set_xlabel("output feature")
            meshes.append(mesh)
            texts.append(
                [
                    ax.text(j + 0.5, i + 0.5, "", ha="center", va="center", fontsize=8)
                    for i in range(size)
                    for j in range(d)
                ]
            )
        self._partial_mesh, self._exact_mesh = meshes
        self._partial_texts, self._exact_texts = texts
        self._exact_ax.set_title("exact output (all tiles)", fontsize=10)
        self._exact_ax.figure.colorbar(self._exact_mesh, ax=self._exact_ax, pad=0.01)

    def draw(self, tile: int, block: int, mask: str) -> None:
        steps = self._steps[mask, block]
        step, final, exact = steps[tile], steps[-1], self._exact[mask, block]
        read = (tile + 1) * self.tile_size  # keys read so far
        self.state = {
            "scores": step.scores,
            "running_max": step.running_max,
            "normaliser": step.normaliser,
            "partial_output": step.output,
            "exact_output": exact,
            "keys_read": read,
        }
        n = len(self.key_vectors)
        scores = np.zeros((self.tile_size, n))
        scores[:, :read] = torch.cat([s.scores for s in steps[: tile + 1]], dim=-1).numpy()
        hidden = ~np.isfinite(scores)  # masked: -inf
        hidden[:, read:] = True  # not read yet
        self._score_mesh.set_array(np.ma.array(np.where(hidden, 0.0, scores), mask=hidden))
        for index, text in enumerate(self._score_texts):
            i, j = divmod(index, self.tile_size)
            value = step.scores[i, j].item()
            text.set_position((step.keys.start + j + 0.5, i + 0.5))
            text.set_text(f"{value:.1f}" if np.isfinite(value) else "−∞")
            text.set_color("white" if np.isfinite(value) and value < 0 else "black")
        self._tile_box.set_x(step.keys.start)
        for row, (bar, text) in enumerate(zip(self._max_bars, self._max_texts, strict=True)):
            value = step.running_max[row].item()
            bar.set_height(value if np.isfinite(value) else 0.0)
            text.set_text("" if np.isfinite(value) else "−∞")
        for bar, value in zip(self._sum_bars, step.normaliser.tolist(), strict=True):
            bar.set_height(value)
        final_max = final.running_max.numpy()
        self._final_max.set_ydata(np.where(np.isfinite(final_max), final_max, np.nan))
        self._final_sum.set_ydata(final.normaliser.numpy())
        for mesh, texts, values in (
            (self._partial_mesh, self._partial_texts, step.output),
            (self._exact_mesh, self._exact_texts, exact),
        ):
            mesh.set_array(values.numpy().ravel())
            for text, value in zip(texts, values.flatten().tolist(), strict=True):
                text.set_text(f"{value:.2f}")
        first = block * self.tile_size
        self._scores_ax.set_title(
            f"block {block} (q{first}–q{first + self.tile_size - 1}), {mask}: "
            f"key tile {tile} (red) read, {read} of {n} keys so far",
            fontsize=10,
        )
        done = tile == self.num_tiles - 1
        self._partial_ax.set_title(
            "output = acc / ℓ: " + ("equals the exact output" if done else "partial"), fontsize=10
        )


class KeyValueHeadExplorer(Explorer):
    """Chapter 10: a slider for the number of key/value heads of an 8-head layer. See which
    query heads share which key/value head, the size of the key/value cache, and the eight
    attention maps (the grouped layers are made from one multi-head layer by mean-pooling the
    key/value projections of each group, as Ainslie et al. 2023 convert checkpoints)."""

    NUM_HEADS, D_MODEL, LENGTH = 8, 32, 8

    def __init__(self, kv_heads: int = 2):
        options = [h for h in range(1, self.NUM_HEADS + 1) if self.NUM_HEADS % h == 0]
        if validation.whole_number(kv_heads, "kv_heads") not in options:
            raise ValueError(
                f"kv_heads must divide the {self.NUM_HEADS} query heads: one of "
                f"{', '.join(map(str, options))}, got {kv_heads}"
            )
        with torch.random.fork_rng():
            torch.manual_seed(10)
            layer = MultiHeadAttention(self.D_MODEL, self.NUM_HEADS).double().eval()
        generator = torch.Generator().manual_seed(11)
        # a larger input than unit variance gives peaked maps, each head's own
        sequence = 3 * torch.randn(1, self.LENGTH, self.D_MODEL, generator=generator).double()
        causal = torch.ones(self.LENGTH, self.LENGTH, dtype=torch.bool).tril()  # a decoder's
        self.layers, self.weights, self.cache_bytes = {}, {}, {}
        with torch.no_grad():
            for kv in options:
                grouped = layer if kv == self.NUM_HEADS else grouped_from_multi_head(layer, kv)
                grouped(sequence, sequence, sequence, mask=causal)
                self.weights[kv] = grouped.attention_weights[0]  # (heads, n, n)
                cache = KeyValueCache()  # decode the sequence one token at a time
                for token in sequence.split(1, dim=1):
                    grouped(token, token, token, cache=cache)
                self.layers[kv] = grouped
                self.cache_bytes[kv] = cache.nbytes
        controls = {
            "kv_heads": widgets.SelectionSlider(
                options=options, value=int(kv_heads), description="key/value heads"
            )
        }
        figure = Figure(figsize=(11, 5.2), layout="constrained")
        grid = figure.add_gridspec(2, 6, width_ratios=[1.3, 1.3, 1, 1, 1, 1])
        self._share_ax = figure.add_subplot(grid[0, :2])
        self._cache_ax = figure.add_subplot(grid[1, :2])
        self._map_axes = [figure.add_subplot(grid[i // 4, 2 + i % 4]) for i in range(8)]
        self._build_sharing()
        self._build_cache(options)
        self._meshes = []
        for head, ax in enumerate(self._map_axes):
            self._meshes.append(
                ax.pcolormesh(np.zeros((self.LENGTH, self.LENGTH)), cmap="Reds", vmin=0, vmax=1)
            )
            ax.set_ylim(self.LENGTH, 0)
            ax.set_xticks([])
            ax.set_yticks([])
            if head % 4 == 0:
                ax.set_ylabel("queries")
            if head >= 4:
                ax.set_xlabel("keys")
        figure.colorbar(self._meshes[0], ax=self._map_axes, label="attention weight", pad=0.01)
        dynamic = [self._links, self._query_dots, self._kv_dots, *self._meshes, *self._cache_bars]
        titles = [ax.title for ax in [self._share_ax, self._cache_ax, *self._map_axes]]
        super().__init__(controls, figure, dynamic + titles)

    def _build_sharing(self) -> None:
        ax, heads = self._share_ax, np.arange(self.NUM_HEADS)
        self._links = ax.add_collection(LineCollection([], lw=2))
        self._query_dots = ax.scatter(heads, np.ones(self.NUM_HEADS), s=260, zorder=3)
        self._kv_dots = ax.scatter(heads, np.zeros(self.NUM_HEADS), s=260, marker="s", zorder=3)
        for head in heads:
            ax.text(head, 1.22, f"q{head}", ha="center", fontsize=9)
        ax.set_xlim(-0.6, self.NUM_HEADS - 0.4)
        ax.set_ylim(-0.45, 1.45)
        ax.set_xticks([])
        ax.set_yticks([0, 1], ["key/value\nheads", "query\nheads"])

    def _build_cache(self, options: list) -> None:
        ax = self._cache_ax
        self._cache_bars = list(
            ax.barh(
                [str(kv) for kv in options],
                [self.cache_bytes[kv] for kv in options],
                color="lightgray",
            )
        )
        ax.set_xlabel(f"key/value cache after {self.LENGTH} tokens (bytes, float64)")
        ax.set_ylabel("key/value heads")

    def draw(self, kv_heads: int) -> None:
        owner = kv_head_of_query_heads(self.NUM_HEADS, kv_heads)
        group = self.NUM_HEADS // kv_heads
        weights = self.weights[kv_heads]
        full = self.cache_bytes[self.NUM_HEADS]
        self.state = {
            "kv_head_of": owner,
            "cache_bytes": self.cache_bytes[kv_heads],
            "weights": weights,
        }
        colours = [f"C{owner[head]}" for head in range(self.NUM_HEADS)]
        centres = [(kv * group + (group - 1) / 2) for kv in range(kv_heads)]
        self._links.set_segments([[(head, 1), (centres[kv], 0)] for head, kv in enumerate(owner)])
        self._links.set_colors(colours)
        self._query_dots.set_facecolors(colours)
        hidden = [(-10, 0)] * (self.NUM_HEADS - kv_heads)  # off the axes
        self._kv_dots.set_offsets([(x, 0) for x in centres] + hidden)
        self._kv_dots.set_facecolors([f"C{kv}" for kv in range(self.NUM_HEADS)])
        for kv, bar in zip(sorted(self.cache_bytes), self._cache_bars, strict=True):
            bar.set_color("tab:green" if kv == kv_heads else "lightgray")
        for head, (mesh, ax) in enumerate(zip(self._meshes, self._map_axes, strict=True)):
            mesh.set_array(weights[head].numpy().ravel())
            ax.set_title(f"q{head} → kv{owner[head]}", fontsize=9, color=colours[head])
        kind = {1: "multi-query", self.NUM_HEADS: "multi-head"}.get(kv_heads, "grouped-query")
        self._share_ax.set_title(
            f"{kind}: {kv_heads} key/value head{'s' if kv_heads > 1 else ''}, "
            f"{group} query head{'s' if group > 1 else ''} each",
            fontsize=10,
        )
        self._cache_ax.set_title(
            f"cache {self.cache_bytes[kv_heads]} bytes = 1/{full // self.cache_bytes[kv_heads]} "
            f"of multi-head",
            fontsize=10,
        )
