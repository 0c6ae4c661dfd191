"""Chapter 04's explorer: one head's attention over one example of the neighbour task."""

import torch
from matplotlib.figure import Figure

from helpers.neighbour_task import NeighbourModel, make_neighbour_batch, weight_by_offset
from helpers.plotting import TokenHeatmap
from helpers.widgets.base import Explorer, IntSlider, ToggleButtons

__all__ = ["HeadExplorer"]


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
            "head": ToggleButtons(
                options=[(f"head {h}", h) for h in range(num_heads)], value=head, description="head"
            ),
            "example": IntSlider(value=example, min=0, max=len(tokens) - 1, description="example"),
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
