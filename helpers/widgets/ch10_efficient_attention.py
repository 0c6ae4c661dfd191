"""Chapter 10's explorers: FlashAttention's key tiles step by step, and the key/value heads
of grouped-query attention."""

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from helpers import validation
from helpers.attention import DotProductAttention, KeyValueCache, MultiHeadAttention
from helpers.efficient import grouped_from_multi_head, key_tile_steps, kv_head_of_query_heads
from helpers.widgets.base import Explorer, IntSlider, SelectionSlider, ToggleButtons

__all__ = ["TileStepperExplorer", "KeyValueHeadExplorer"]


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
            "tile": IntSlider(
                value=tile, min=0, max=self.num_tiles - 1, description="key tiles read: up to"
            ),
            "block": IntSlider(
                value=block, min=0, max=self.num_tiles - 1, description="query block"
            ),
            "mask": ToggleButtons(options=self.MASKS, value=mask, description="mask"),
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
            "kv_heads": SelectionSlider(
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
