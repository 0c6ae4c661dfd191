"""Chapter 11's explorers: RoPE's scores under a shift of both positions, and sparse
attention patterns with the tiles they touch."""

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from helpers import validation
from helpers.long_context import (
    block_sparse_mask,
    dilated_mask,
    fraction_computed,
    fraction_of_tiles,
    global_mask,
)
from helpers.masks import causal_mask
from helpers.positional import apply_rope, frequencies
from helpers.widgets.base import Explorer, FloatLogSlider, IntSlider, ToggleButtons

__all__ = ["RopeExplorer", "SparsePatternExplorer", "SPARSE_PATTERNS"]


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
            "shift": IntSlider(
                value=shift,
                min=0,
                max=self.MAX_SHIFT,
                step=10,
                description="shift both positions by",
            ),
            "base": FloatLogSlider(value=base, base=10, min=1, max=5, step=1, description="base"),
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
            "pattern": ToggleButtons(options=SPARSE_PATTERNS, value=pattern, description="pattern"),
            "radius": IntSlider(
                value=radius, min=0, max=self.MAX_RADIUS, description="window radius"
            ),
            "dilation": IntSlider(
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
