"""Every drawing function of the series: heatmaps (static, and refillable for explorers) and
the regression plot of chapter 01."""

from unittest import mock

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
import torch
from matplotlib.axes import Axes
from matplotlib.collections import QuadMesh
from matplotlib.colors import Colormap
from matplotlib.figure import Figure

from helpers.kernel_regression import RegressionData

MatrixLike = torch.Tensor | np.ndarray | list  # (q, k), (maps, q, k) or (rows, cols, q, k)
Labels = str | int | list  # "auto", every n-th position, or the tokens (one list per map)


def _largest_finite(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.max()) if finite.size else 1.0


def draw_heatmap(
    ax: Axes,
    matrix: MatrixLike,
    x_labels: Labels = "auto",
    y_labels: Labels = "auto",
    annot: bool = False,
    fmt: str = ".2f",
    **kwargs,
) -> QuadMesh:
    """One heatmap on ``ax`` (seaborn); returns its QuadMesh so callers can update the data."""
    matrix = _as_array(matrix)
    if matrix.ndim != 2:
        raise ValueError(f"matrix must be (rows, columns), got shape {matrix.shape}")
    # seaborn draws the whole figure after each heatmap, only to see whether tick labels
    # overlap; the rotation is decided below instead, and a grid of maps draws in a fraction
    with mock.patch.object(sns.matrix, "_draw_figure", lambda figure: None):
        _seaborn_heatmap(ax, matrix, x_labels, y_labels, annot, fmt, **kwargs)
    shown = [label.get_text() for label in ax.get_xticklabels() if label.get_text()]
    crowded = len(shown) > 16
    rotate = crowded and max(len(text) for text in shown) > 1  # single characters stay upright
    ax.tick_params(axis="x", labelrotation=90 if rotate else 0, labelsize=8 if crowded else None)
    ax.tick_params(axis="y", labelrotation=0)
    return ax.collections[-1]


def _seaborn_heatmap(ax, matrix, x_labels, y_labels, annot, fmt, **kwargs):
    sns.heatmap(
        matrix,
        ax=ax,
        xticklabels=x_labels,
        yticklabels=y_labels,
        annot=annot,
        fmt=fmt,
        square=False,
        linewidths=0.5 if annot else 0,
        linecolor="white",
        **kwargs,
    )


def show_heatmaps(
    matrices: MatrixLike,
    x_labels: Labels = "auto",
    y_labels: Labels = "auto",
    xlabel: str = "keys",
    ylabel: str = "queries",
    titles: str | list | None = None,
    suptitle: str | None = None,
    annot: bool = False,
    fmt: str = ".2f",
    cmap: str = "Reds",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    cbar_label: str | None = "attention weight",
    shared_scale: bool = True,
    figsize: tuple[float, float] | None = None,
) -> Figure:
    """Draw one matrix or a grid of them with a shared colour scale and one colour bar.

    matrices: (q, k), (maps, q, k) or (rows, cols, q, k),
    a tensor or an array. x_labels / y_labels: the key and query tokens (a list),
    "auto" for positions, or an integer n to label every n-th position; or one list of
    tokens per map, when each map shows another example.
    titles: one per map (a list, or a list of rows).
    ``vmax`` defaults to the largest value over all maps; with ``shared_scale=False``
    each map gets its own colour bar, up to its own largest value; with ``cbar_label=None``
    there is no colour bar (for a mask, whose two colours need none). Returns the figure.
    """
    if isinstance(cmap, str) and cmap not in matplotlib.colormaps:
        raise ValueError(f"cmap {cmap!r} is not a matplotlib colormap (e.g. 'Reds', 'viridis')")
    grid = _as_grid(matrices)
    rows, cols, num_queries, num_keys = grid.shape
    x_grid = _labels_grid(x_labels, rows, cols, num_keys, "x_labels")
    y_grid = _labels_grid(y_labels, rows, cols, num_queries, "y_labels")
    titles = _titles_grid(titles, rows, cols)
    if vmax is None and shared_scale:
        vmax = _largest_finite(grid)
    if figsize is None:
        cell = 0.45 if annot else 0.3
        width = min(3.5 + cols * max(2.5, num_keys * cell), 16)
        height = min(1.0 + rows * max(2.2, num_queries * cell + 0.8), 14)
        figsize = (width, height)
    fig, axes = plt.subplots(rows, cols, figsize=figsize, squeeze=False, constrained_layout=True)
    for r in range(rows):
        for c in range(cols):
            ax = axes[r, c]
            draw_heatmap(
                ax,
                grid[r, c],
                x_grid[r][c],
                y_grid[r][c],
                annot=annot,
                fmt=fmt,
                cmap=cmap,
                vmin=vmin,
                vmax=vmax if shared_scale else _largest_finite(grid[r, c]),
                cbar=not shared_scale and cbar_label is not None,
                cbar_kws=None if shared_scale else {"label": cbar_label},
            )
            ax.set_title(titles[r][c])
            ax.set_xlabel(xlabel if r == rows - 1 else "")
            ax.set_ylabel(ylabel if c == 0 else "")
    if shared_scale and cbar_label is not None:
        colorbar = fig.colorbar(axes[0, 0].collections[0], ax=axes, shrink=0.8)
        colorbar.set_label(cbar_label)
    if suptitle:
        fig.suptitle(suptitle)
    return fig


class TokenHeatmap:
    """A heatmap with token labels on both axes, refilled in place for any size up to
    (max_rows, max_cols): one mesh of the largest size, whose axis limits show the part in
    use, and labels drawn as text, so an explorer redraws it without redrawing its axes."""

    def __init__(
        self,
        ax: Axes,
        max_rows: int,
        max_cols: int,
        cmap: str | Colormap,
        vmin: float = 0.0,
        vmax: float = 1.0,
    ):
        self.ax, self.max_rows, self.max_cols = ax, max_rows, max_cols
        self.mesh = ax.pcolormesh(np.zeros((max_rows, max_cols)), cmap=cmap, vmin=vmin, vmax=vmax)
        ax.set_xticks([])
        ax.set_yticks([])
        self.x_labels = [
            ax.text(
                j + 0.5,
                -0.02,
                "",
                ha="center",
                va="top",
                transform=ax.get_xaxis_transform(),
                parse_math=False,  # a token such as $x$ is text, not a formula
            )
            for j in range(max_cols)
        ]
        self.y_labels = [
            ax.text(
                -0.02,
                i + 0.5,
                "",
                ha="right",
                va="center",
                transform=ax.get_yaxis_transform(),
                parse_math=False,
            )
            for i in range(max_rows)
        ]

    @property
    def artists(self) -> list:
        return [self.mesh, *self.x_labels, *self.y_labels]

    def show(
        self, matrix: np.ndarray, x_tokens: list[str], y_tokens: list[str], grey: tuple = ()
    ) -> None:
        """Fill the top-left corner with matrix (rows = y_tokens, columns = x_tokens)."""
        grid = np.ma.array(np.zeros((self.max_rows, self.max_cols)), mask=True)  # zeros: no garbage
        grid[: matrix.shape[0], : matrix.shape[1]] = matrix
        self.mesh.set_array(grid)
        self.mesh.set_visible(len(x_tokens) > 0 and len(y_tokens) > 0)
        self.ax.set_xlim(0, max(len(x_tokens), 1))
        self.ax.set_ylim(max(len(y_tokens), 1), 0)  # row 0 at the top, as in a matrix
        crowded = len(x_tokens) > 20
        for labels, tokens in ((self.x_labels, x_tokens), (self.y_labels, y_tokens)):
            for index, text in enumerate(labels):
                text.set_text(tokens[index] if index < len(tokens) else "")
                text.set_color("gray" if text.get_text() in grey else "black")
                text.set_fontsize(8 if crowded and labels is self.x_labels else 9)
        for text in self.x_labels:
            text.set_rotation(90 if len(x_tokens) > 8 and not crowded else 0)

    def hide(self) -> None:
        self.show(np.zeros((0, 0)), [], [])


def plot_regression(
    ax: Axes, data: RegressionData, fits: dict | None = None, title: str = ""
) -> None:
    """Training points, the true curve and any number of fitted curves on one axes."""
    if not isinstance(data, RegressionData):
        raise ValueError(f"data must come from make_data(), got {type(data).__name__}")
    if fits is not None and not isinstance(fits, dict):
        raise ValueError(f"fits must be a dict of label -> predictions, got {type(fits).__name__}")
    for label, predictions in (fits or {}).items():
        if len(predictions) != len(data.x_test):
            raise ValueError(
                f"fit {label!r} has {len(predictions)} predictions for {len(data.x_test)} queries"
            )
    ax.plot(data.x_test, data.y_test, color="black", lw=1.5, label="truth")
    for label, predictions in (fits or {}).items():
        ax.plot(data.x_test, torch.as_tensor(predictions).detach(), lw=2, label=label)
    ax.scatter(data.x_train, data.y_train, s=14, color="tab:gray", alpha=0.7, label="training data")
    ax.set_xlabel("x (queries and keys)")
    ax.set_ylabel("y (values)")
    ax.set_title(title)
    ax.legend(loc="upper right", fontsize="small")


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _as_grid(matrices) -> np.ndarray:
    """(q, k), (n, q, k) or (rows, cols, q, k) -> (rows, cols, q, k) numpy array."""
    grid = _as_array(matrices)
    if grid.ndim == 2:
        return grid[None, None]
    if grid.ndim == 3:
        return grid[None]
    if grid.ndim == 4:
        return grid
    raise ValueError(
        f"matrices must be (q, k), (maps, q, k) or (rows, cols, q, k); got shape {grid.shape}"
    )


def _as_array(matrices) -> np.ndarray:
    """A real float array from a tensor (any dtype, on any device, with or without grad), an
    array or nested lists."""
    if isinstance(matrices, torch.Tensor):
        if matrices.is_complex():
            raise ValueError("matrices must be real numbers, got complex ones")
        return matrices.detach().cpu().float().numpy()
    try:
        array = np.asarray(matrices)
    except ValueError:
        raise ValueError("matrices must be rectangular: every row of one length") from None
    if np.iscomplexobj(array) or not (
        np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_
    ):
        raise ValueError(f"matrices must hold real numbers, got {array.dtype}")
    return array.astype(float)


def _titles_grid(titles, rows: int, cols: int):
    if titles is None:
        return [[""] * cols for _ in range(rows)]
    if not isinstance(titles, str | list | tuple):
        raise ValueError(f"titles must be a string or a list of strings, got {titles!r}")
    if isinstance(titles, str):
        titles = [titles]
    if rows == 1 and all(isinstance(t, str) for t in titles):
        titles = [list(titles)]
    if len(titles) != rows or any(len(row) != cols for row in titles):
        raise ValueError(f"titles must match the grid of maps ({rows} x {cols}), got {titles}")
    return titles


def _labels_grid(labels, rows: int, cols: int, size: int, name: str):
    """One set of labels per map: the same for every map (a list of `size` tokens, "auto", or
    an integer step), or one list per map (`rows * cols` lists, or `rows` rows of `cols`)."""
    per_map = (
        isinstance(labels, list | tuple)
        and len(labels) > 0
        and all(isinstance(item, list | tuple) for item in labels)
    )
    if not per_map:
        if isinstance(labels, str) and labels != "auto":
            raise ValueError(f'{name} must be "auto", a step, or a list of labels; got {labels!r}')
        if isinstance(labels, int) and not isinstance(labels, bool) and labels < 1:
            raise ValueError(f"{name} as a step must be at least 1, got {labels}")
        if not isinstance(labels, str | bool | int | list | tuple):
            raise ValueError(f"{name} must be a list of labels, got {labels!r}")
        if isinstance(labels, list | tuple) and len(labels) != size:
            raise ValueError(f"{name} has {len(labels)} labels for {size} columns/rows")
        return [[labels] * cols for _ in range(rows)]
    if len(labels) == rows * cols and all(len(item) == size for item in labels):
        return [list(labels[r * cols : (r + 1) * cols]) for r in range(rows)]
    if len(labels) == rows and all(
        len(row) == cols and all(len(item) == size for item in row) for row in labels
    ):
        return [list(row) for row in labels]
    raise ValueError(
        f"{name} must be one list of {size} labels, or one such list per map ({rows} x {cols} maps)"
    )
