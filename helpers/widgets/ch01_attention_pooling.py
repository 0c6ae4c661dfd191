"""Chapter 01's explorer: Gaussian-kernel pooling, with sliders for the width and the query."""

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure

from helpers.kernel_regression import RegressionData, gaussian_kernel, kernel_pooling, make_data
from helpers.widgets.base import Explorer

__all__ = ["KernelRegressionExplorer"]


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
