"""Chapter 01's explorers: Gaussian-kernel pooling, with sliders for the width and the query; and
the same with the query and the training points dragged."""

import math

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure

from helpers import validation
from helpers.kernel_regression import RegressionData, gaussian_kernel, kernel_pooling, make_data
from helpers.validation import shown
from helpers.widgets.base import Explorer, FloatSlider, log_slider
from helpers.widgets.direct import (
    COLOURS,
    MAX_ITEMS,
    PlaneExplorer,
    finite_number,
    slider_number,
)

__all__ = ["DragPoolingExplorer", "KernelRegressionExplorer"]

WIDTHS = (-1.5, 0.7)  # the width slider's range: 10**-1.5 to 10**0.7


def width_slider(width: float) -> widgets.FloatLogSlider:
    return log_slider(width, WIDTHS, 0.02, "kernel width σ", ".3f")


class KernelRegressionExplorer(Explorer):
    """Chapter 01: Gaussian-kernel pooling; sliders for the kernel width and the query."""

    def __init__(self, data: RegressionData | None = None, width: float = 0.3, query: float = 2.5):
        self.data = data if data is not None else make_data()
        if not isinstance(self.data, RegressionData):
            raise ValueError(f"data must come from make_data(), got {type(self.data).__name__}")
        x_train, y_train = self.data.x_train, self.data.y_train
        controls = {
            "width": width_slider(width),
            "query": FloatSlider(
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


POOLING_PLANE = {
    "x": [0.0, 5.0],
    "y": [-1.0, 6.0],
    "xticks": [0, 1, 2, 3, 4, 5],
    "yticks": [-1, 0, 1, 2, 3, 4, 5, 6],
    "xlabel": "x (the query, and the keys = training inputs)",
    "ylabel": "y (values)",
    "step": 0.1,  # an arrow key's move; positions are kept to a tenth of it
}
TOP_WEIGHTS = 5  # the readout lists the heaviest training points
FIT_GRID = torch.linspace(0, 5, 201, dtype=torch.float64)  # the fit drawn: fine enough for σ = 0.03


class DragPoolingExplorer(PlaneExplorer):
    """Chapter 01: drag the query along x (or move it with the arrow keys once clicked) and watch
    the Nadaraya-Watson weights (the circles round the training points) and the prediction (the
    query sits on it); drag a training point anywhere and watch the whole fit follow. A slider
    sets the Gaussian kernel's width."""

    PLANE = POOLING_PLANE

    def __init__(self, data: RegressionData | None = None, width: float = 0.3, query: float = 2.5):
        self.data = _checked_data(data if data is not None else make_data())
        width = slider_number(width, "width", WIDTHS)
        low, high = POOLING_PLANE["x"]
        try:
            number = finite_number(query, "query")
        except ValueError:
            number = math.nan
        if not low <= number <= high:
            raise ValueError(f"query must be a number in {low}..{high}, got {shown(query)}")
        query = number
        outside = [
            (x, y)
            for x, y in zip(self.data.x_train.tolist(), self.data.y_train.tolist(), strict=True)
            if not (low <= x <= high and POOLING_PLANE["y"][0] <= y <= POOLING_PLANE["y"][1])
        ]
        if outside:
            raise ValueError(
                f"the training points must lie in the plane {POOLING_PLANE['x']} x "
                f"{POOLING_PLANE['y']}; {outside[0]} does not"
            )
        points = {"q": (float(query), 0.0)}  # the query's y is its prediction, set by compute
        for index, (x, y) in enumerate(
            zip(self.data.x_train.tolist(), self.data.y_train.tolist(), strict=True)
        ):
            points[f"t{index}"] = (x, y)
        super().__init__(points, {"width": width_slider(width)})

    def training_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The training points where the learner left them: keys (n,) and values (n,), float64."""
        train = [self.points[name] for name in self.points if name != "q"]
        keys, values = torch.tensor(train, dtype=torch.float64).T  # (n,), (n,)
        return keys, values

    def compute(self, width: float) -> dict:
        keys, values = self.training_data()
        query = torch.tensor([self.points["q"][0]], dtype=torch.float64)  # (1,)
        _check_reach(torch.cat([query, FIT_GRID]), keys, width)
        fit, _ = kernel_pooling(FIT_GRID, keys, values, gaussian_kernel, width)  # (201,)
        prediction, weights = kernel_pooling(query, keys, values, gaussian_kernel, width)
        prediction, weights = prediction[0].item(), weights[0]  # a number, (n_train,)
        self.points["q"] = (query.item(), min(max(prediction, -1.0), 6.0))
        self.state = {
            "fit_x": FIT_GRID,
            "fit": fit,
            "weights": weights,
            "prediction": prediction,
            "points": dict(self.points),
        }
        heaviest = weights.argsort(descending=True)[:TOP_WEIGHTS].tolist()
        names = [name for name in self.points if name != "q"]
        return {
            "plane": POOLING_PLANE,
            "points": [
                {
                    "name": "q",
                    "x": query.item(),
                    "y": self.points["q"][1],
                    "label": "q",
                    "colour": COLOURS["blue"],
                    "drag": "x",
                },
                *[
                    {
                        "name": name,
                        "x": x,
                        "y": y,
                        "label": "",
                        "colour": COLOURS["red"],
                        "drag": "xy",
                        "radius": 5,
                    }
                    for name, (x, y) in zip(
                        names, zip(keys.tolist(), values.tolist(), strict=True), strict=True
                    )
                ],
            ],
            "lines": [
                {
                    "xy": torch.stack(
                        [self.data.x_test.double(), self.data.y_test.double()], 1
                    ).tolist(),
                    "colour": COLOURS["foreground"],
                    "width": 1,
                    "label": "truth",
                },
                {
                    "xy": torch.stack([FIT_GRID, fit], 1).tolist(),
                    "colour": COLOURS["blue"],
                    "width": 2,
                    "label": "kernel fit",
                },
                {
                    "xy": [[query.item(), -1.0], [query.item(), 6.0]],
                    "colour": COLOURS["blue"],
                    "width": 1,
                    "dashed": True,
                },
            ],
            "markers": [
                {
                    "x": x,
                    "y": y,
                    "radius": 4 + 40 * math.sqrt(w),
                    "colour": COLOURS["red"],
                    "label": f"{name}: weight {w:.3f}",
                }
                for name, x, y, w in zip(
                    names, keys.tolist(), values.tolist(), weights.tolist(), strict=True
                )
                if w > 1e-4
            ],
            "table": {
                "columns": ["point", "x", "y", "weight"],
                "rows": [["q", f"{query.item():.2f}", f"{prediction:.3f}", "(prediction)"]]
                + [
                    [
                        names[i],
                        f"{keys[i].item():.2f}",
                        f"{values[i].item():.2f}",
                        f"{weights[i].item():.3f}",
                    ]
                    for i in heaviest
                ],
            },
            "title": (
                f"σ = {width:.3f}: prediction at x = {query.item():.2f} is {prediction:.3f}, a "
                f"weighted average of the labels (the {TOP_WEIGHTS} heaviest weights sum to "
                f"{weights[heaviest].sum().item():.2f})"
            ),
        }


def _checked_data(data: object) -> RegressionData:
    """data itself if it is as make_data() makes it: x_train and y_train (n,), x_test and
    y_test (m,), each of finite real numbers, n and m at least 1, n at most MAX_ITEMS - 1 (the
    points the plane draws, the query among them), x_test inside the plane."""
    if not isinstance(data, RegressionData):
        raise ValueError(f"data must come from make_data(), got {type(data).__name__}")
    for names in (("x_train", "y_train"), ("x_test", "y_test")):
        for name in names:
            value = validation.dense_tensor(getattr(data, name), f"data.{name}", "(n,)")
            if value.dim() != 1 or value.numel() == 0:
                raise ValueError(
                    f"data.{name} must be one row (n,), n >= 1, got {tuple(value.shape)}"
                )
            if value.is_complex() or value.dtype == torch.bool or not value.isfinite().all():
                raise ValueError(f"data.{name} must hold finite real numbers, got {value.dtype}")
        first, second = (getattr(data, name) for name in names)
        if first.shape != second.shape:
            raise ValueError(
                f"data.{names[0]} {tuple(first.shape)} and data.{names[1]} {tuple(second.shape)} "
                "must be one number each per point"
            )
    if len(data.x_train) > MAX_ITEMS - 1:  # a point on the plane each, and the query
        raise ValueError(
            f"data.x_train must hold at most {MAX_ITEMS - 1} points, one to drag each, got "
            f"{len(data.x_train)}"
        )
    low, high = POOLING_PLANE["x"]
    if data.x_test.min() < low or data.x_test.max() > high:
        raise ValueError(f"data.x_test must lie in the plane, {low}..{high}")
    return data


def _check_reach(queries: torch.Tensor, keys: torch.Tensor, width: float) -> None:
    """Each query (the learner's, and the fit's) has a training point near enough for a Gaussian
    weight above 0; kernel_pooling refuses one that has none (its weights would be 0 / 0)."""
    reach = gaussian_kernel(queries[:, None] - keys[None, :], width).sum(1)  # (queries,)
    if (reach == 0).any():
        x = queries[reach == 0][0].item()
        raise ValueError(
            f"no key lies within width σ = {width:.3f} of x = {x:.2f} (every training point is "
            "too far for a weight above 0): widen the kernel, or move a point nearer"
        )
