"""Chapter 07's explorer: a typed date, the trained model's answer and its attention maps."""

import ipywidgets as widgets
from matplotlib.figure import Figure

from helpers.dates import MAX_SOURCE_LENGTH, attention_for, load_date_model
from helpers.plotting import TokenHeatmap
from helpers.transformer import Seq2SeqTransformer
from helpers.widgets.base import Explorer, ToggleButtons

__all__ = ["DateExplorer"]


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
            "kind": ToggleButtons(options=self.KINDS, value=kind, description="attention"),
            "layer": ToggleButtons(
                options=[(f"layer {i}", i) for i in range(config.num_layers)],
                value=config.num_layers - 1,
                description="layer",
            ),
            "head": ToggleButtons(
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
