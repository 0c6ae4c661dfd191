"""Chapter 06's explorer: typed tokens, a kind of mask, and the weights the mask leaves."""

import zlib

import ipywidgets as widgets
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from helpers.attention import masked_softmax
from helpers.masks import MASK_KINDS, PAD_MARKERS, build_mask
from helpers.plotting import TokenHeatmap
from helpers.widgets.base import Explorer, ToggleButtons

__all__ = ["MaskBuilderExplorer"]


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
            "kind": ToggleButtons(options=MASK_KINDS, value=kind, description="mask"),
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

    @staticmethod
    def _check_drawable(text: str, name: str) -> None:
        unreadable = [c for c in text if not c.isprintable() and not c.isspace()]
        if unreadable:
            raise ValueError(
                f"the {name} tokens hold a character that cannot be drawn "
                f"(U+{ord(unreadable[0]):04X}): type letters, digits or symbols"
            )

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
        try:
            self._check_drawable(tokens, "target")
            self._check_drawable(source, "source")
            target = self._parse(tokens, "target")
            keys = self._parse(source, "source") if kind == "cross-attention" else target
        except ValueError as problem:
            self._summary.set_text("")
            self.state = {"error": str(problem)}
            self._mask_map.hide()
            self._weight_map.hide()
            self.show_error(self._mask_ax, problem)
            self._weight_ax.set_title("")
            return
        self._summary.set_text(f"target: {_shortened(tokens)}      source: {_shortened(source)}")
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
