"""Chapter 03's explorer: the key size, the scaling by sqrt(d_k) and a temperature."""

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure

from helpers.scoring import dot_scores, random_queries_keys, saturation_statistics
from helpers.widgets.base import Explorer, weight_heatmap

__all__ = ["ScalingExplorer"]


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
        self._mesh = weight_heatmap(left, self.key_tokens, self.query_tokens)
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
