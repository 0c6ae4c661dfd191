"""Chapter 02's explorer: a valid length masks keys; the weights of one query's row."""

import numpy as np
import torch
from matplotlib.figure import Figure

from helpers import validation
from helpers.attention import masked_softmax
from helpers.widgets.base import Explorer, IntSlider, weight_heatmap

__all__ = ["MaskedSoftmaxExplorer"]


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
            "valid_len": IntSlider(
                value=valid_len,
                min=0,
                max=num_keys,
                description="valid length",
            ),
            "query": IntSlider(
                value=query,
                min=0,
                max=num_queries - 1,
                description="query row",
            ),
        }
        figure = Figure(figsize=(9.5, 3.4), layout="constrained")
        figure.get_layout_engine().set(wspace=0.1)
        left, right = figure.subplots(1, 2, width_ratios=[3, 2])
        self._mesh = weight_heatmap(left, self.key_tokens, self.query_tokens)
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
