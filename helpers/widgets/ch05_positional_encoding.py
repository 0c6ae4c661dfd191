"""Chapter 05's explorer: a sin/cos pair of the sinusoidal encoding turns with the offset."""

import numpy as np
from matplotlib.figure import Figure

from helpers import validation
from helpers.positional import frequencies, offset_rotations, sinusoidal_encoding
from helpers.widgets.base import Explorer, IntSlider

__all__ = ["PositionalExplorer"]


class PositionalExplorer(Explorer):
    """Chapter 05: one sin/cos pair of the sinusoidal encoding; an offset slider shows that
    moving delta positions turns the pair's point by the same angle at every position."""

    STARTS = (0, 6, 12, 18)

    def __init__(self, offset: int = 3, pair: int = 2, d_model: int = 32, max_len: int = 60):
        longest_offset = 30
        if validation.whole_number(max_len, "max_len") <= self.STARTS[-1] + longest_offset:
            raise ValueError(
                f"max_len must be more than {self.STARTS[-1] + longest_offset}: the arrows start "
                f"at positions up to {self.STARTS[-1]} and move up to {longest_offset}"
            )
        self.encoding = sinusoidal_encoding(max_len, d_model)  # (max_len, d_model)
        self.rates = frequencies(d_model)  # (d_model / 2,)
        controls = {
            "offset": IntSlider(value=offset, min=0, max=longest_offset, description="offset δ"),
            "pair": IntSlider(
                value=pair, min=0, max=d_model // 2 - 1, description="frequency pair j"
            ),
        }
        figure = Figure(figsize=(10, 4.2), layout="constrained")
        left, right = figure.subplots(1, 2, width_ratios=[3, 2])
        positions = np.arange(max_len)
        (self._sin_line,) = left.plot(positions, np.zeros(max_len), ".-", label="P[i, 2j] (sin)")
        (self._cos_line,) = left.plot(positions, np.zeros(max_len), ".-", label="P[i, 2j+1] (cos)")
        colours = [f"C{k + 2}" for k in range(len(self.STARTS))]
        self._start_marks = left.scatter(np.zeros(4), np.zeros(4), c=colours, s=60, zorder=3)
        self._end_marks = left.scatter(
            np.zeros(4), np.zeros(4), c=colours, s=60, marker="s", zorder=3
        )
        left.set_ylim(-1.15, 1.35)
        left.set_xlabel("position i")
        left.set_ylabel("encoding value")
        left.legend(loc="upper right", ncols=2, fontsize="small")
        angle = np.linspace(0, 2 * np.pi, 200)
        right.plot(np.cos(angle), np.sin(angle), color="lightgray", lw=1)
        self._points = right.scatter(
            np.zeros(max_len), np.zeros(max_len), c=positions, cmap="viridis", s=14
        )
        figure.colorbar(self._points, ax=right, label="position i")
        self._arrows = [
            right.annotate(
                "",
                xy=(0, 0),
                xytext=(0, 0),
                arrowprops={"arrowstyle": "->", "color": colour, "lw": 2},
            )
            for colour in colours
        ]
        right.set_aspect("equal")
        right.set_xlim(-1.2, 1.2)
        right.set_ylim(-1.2, 1.2)
        right.set_xlabel("P[i, 2j+1] (cos)")
        right.set_ylabel("P[i, 2j] (sin)")
        self._left, self._right = left, right
        dynamic = [self._sin_line, self._cos_line, self._start_marks, self._end_marks]
        dynamic += [self._points, *self._arrows, left.title, right.title]
        super().__init__(controls, figure, dynamic)

    def draw(self, offset: int, pair: int) -> None:
        pair_values = self.encoding[:, 2 * pair : 2 * pair + 2]  # (max_len, 2): sin, cos
        rotation = offset_rotations(offset, self.encoding.shape[1])[pair]  # (2, 2)
        moved = pair_values[: -offset or None] @ rotation.T  # R @ P[i] for every i
        error = (moved - pair_values[offset:]).abs().max().item()
        rate = self.rates[pair].item()
        self.state = {"rotation": rotation, "max_error": error, "angle": rate * offset}

        sines, cosines = pair_values[:, 0].numpy(), pair_values[:, 1].numpy()
        self._sin_line.set_ydata(sines)
        self._cos_line.set_ydata(cosines)
        starts = np.array(self.STARTS)
        ends = starts + offset
        self._start_marks.set_offsets(np.c_[starts, sines[starts]])
        self._end_marks.set_offsets(np.c_[ends, sines[ends]])
        self._points.set_offsets(np.c_[cosines, sines])
        for arrow, start, end in zip(self._arrows, starts, ends, strict=True):
            arrow.xyann = (cosines[start], sines[start])
            arrow.xy = (cosines[end], sines[end])
        self._left.set_title(
            f"pair j = {pair}: rate ω = {rate:.3g} rad per position, wavelength "
            f"{2 * np.pi / rate:,.0f} positions; ● i and ■ i + {offset}",
            fontsize=10,
        )
        self._right.set_title(
            f"i → i + {offset}: every point turns by ωδ = {np.degrees(rate * offset) % 360:.1f}°",
            fontsize=10,
        )
