"""Chapter 03's explorers: the key size, the scaling by sqrt(d_k) and a temperature; and a query
and keys in a plane that you drag, scored three ways."""

import math

import ipywidgets as widgets
import numpy as np
import torch
from matplotlib.figure import Figure

from helpers.attention import masked_softmax, weighted_sum
from helpers.scoring import (
    SCORE_FUNCTIONS,
    dot_scores,
    fixed_additive_attention,
    random_queries_keys,
    saturation_statistics,
    scores_by_function,
)
from helpers.widgets.base import Dropdown, Explorer, SelectionSlider, log_slider, weight_heatmap
from helpers.widgets.direct import COLOURS, PlaneExplorer, position_of, slider_number

__all__ = ["QueryKeyPlaneExplorer", "ScalingExplorer"]

TEMPERATURES = (-1, 1)  # the temperature slider's range: 10**-1 to 10**1


def temperature_slider(temperature: float) -> widgets.FloatLogSlider:
    return log_slider(temperature, TEMPERATURES, 0.05, "temperature T", ".2f")


class ScalingExplorer(Explorer):
    """Chapter 03: the key size d_k, the scaling by sqrt(d_k) and a temperature, against the
    attention weights (heatmap) and the spread of the scores (histogram)."""

    SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]

    def __init__(self, d_k: int = 64, scaled: bool = True, temperature: float = 1.0):
        num_queries, num_keys = 6, 8
        self.key_tokens = [f"k{j}" for j in range(num_keys)]
        self.query_tokens = [f"q{i}" for i in range(num_queries)]
        controls = {
            "d_k": SelectionSlider(options=self.SIZES, value=d_k, description="key size d_k"),
            "scaled": widgets.Checkbox(value=scaled, description="divide by √d_k"),
            "temperature": temperature_slider(temperature),
        }
        figure = Figure(figsize=(10, 3.6), layout="constrained")
        figure.get_layout_engine().set(wspace=0.08)
        left, right = figure.subplots(1, 2, width_ratios=[3, 2])
        self._mesh = weight_heatmap(left, self.key_tokens, self.query_tokens)
        self._bins = np.linspace(-60, 60, 121)
        self._histogram = right.stairs(np.zeros(120), self._bins, fill=True, color=COLOURS["blue"])
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


KEY_NAMES = ("k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7")
SCORE_COLOURS = {
    "dot product": COLOURS["blue"],
    "scaled dot product": COLOURS["orange"],
    "additive": COLOURS["green"],
}
QUERY_KEY_PLANE = {
    "x": [-3.0, 3.0],
    "y": [-3.0, 3.0],
    "xticks": [-3, -2, -1, 0, 1, 2, 3],
    "yticks": [-3, -2, -1, 0, 1, 2, 3],
    "xlabel": "first entry",
    "ylabel": "second entry",
    "step": 0.1,  # an arrow key's move; positions are kept to a tenth of it
}
TABLE_NAMES = {"dot product": "dot", "scaled dot product": "scaled", "additive": "additive"}
DEFAULT_QUERY = (1.5, 1.0)
DEFAULT_KEYS = ((2.0, 1.6), (0.8, 0.5), (-1.5, 1.0), (-2.0, -1.5), (1.0, -2.0), (0.0, 2.5))


class QueryKeyPlaneExplorer(PlaneExplorer):
    """Chapter 03: a query and 4 to 8 keys, vectors of two entries, as points you drag (or move
    with the arrow keys once clicked). For their positions: each key's score under the three
    scoring functions (dot product, scaled dot product, additive with fixed weights), divided by
    the temperature; the softmax weights of each (bars) and of the chosen one (the circles round
    the keys, the arrows); and the output, the weighted sum of the values, which here are the
    keys themselves (the green point)."""

    PLANE = QUERY_KEY_PLANE

    def __init__(
        self,
        query=DEFAULT_QUERY,
        keys=DEFAULT_KEYS,
        score: str = "scaled dot product",
        temperature: float = 1.0,
    ):
        if not isinstance(keys, list | tuple) or not 4 <= len(keys) <= len(KEY_NAMES):
            raise ValueError(f"keys must be 4 to {len(KEY_NAMES)} points (x, y), got {keys!r:.80}")
        if score not in SCORE_FUNCTIONS:
            raise ValueError(f"score must be one of {list(SCORE_FUNCTIONS)}, got {score!r:.80}")
        temperature = slider_number(temperature, "temperature", TEMPERATURES)
        points = {"q": _point(query, "query")}
        for name, key in zip(KEY_NAMES, keys, strict=False):
            points[name] = _point(key, f"key {name}")
        self.additive = fixed_additive_attention(size=2, num_hiddens=8, seed=0)
        controls = {
            "score": Dropdown(options=SCORE_FUNCTIONS, value=score, description="score"),
            "temperature": temperature_slider(temperature),
        }
        super().__init__(points, controls)

    def compute(self, score: str, temperature: float) -> dict:
        query = torch.tensor(self.points["q"], dtype=torch.float64)  # (2,)
        names = [name for name in self.points if name != "q"]
        keys = torch.tensor([self.points[name] for name in names], dtype=torch.float64)  # (k, 2)
        scores = scores_by_function(query, keys, self.additive, temperature)  # name -> (k,)
        weights = {kind: masked_softmax(s[None])[0] for kind, s in scores.items()}  # name -> (k,)
        chosen = weights[score]
        output = weighted_sum(chosen[None], keys)[0]  # (2,): the values are the keys
        self.state = {
            "scores": scores,
            "weights": weights,
            "output": output,
            "points": dict(self.points),
        }
        return {
            "plane": QUERY_KEY_PLANE,
            "points": _plane_points(self.points),
            "lines": [_query_direction(self.points["q"])],
            "markers": [
                {
                    "x": x,
                    "y": y,
                    "radius": 6 + 30 * math.sqrt(w),
                    "colour": COLOURS["red"],
                    "label": f"{name}: weight {w:.3f}",
                }
                for name, (x, y), w in zip(names, keys.tolist(), chosen.tolist(), strict=True)
            ]
            + [
                {
                    "x": output[0].item(),
                    "y": output[1].item(),
                    "radius": 7,
                    "colour": COLOURS["green"],
                    "opacity": 1.0,
                    "label": "output",
                    "above": True,
                }
            ],
            "arrows": [
                {
                    "from": [x, y],
                    "to": output.tolist(),
                    "colour": COLOURS["red"],
                    "width": 0.5 + 8 * w,
                }
                for (x, y), w in zip(keys.tolist(), chosen.tolist(), strict=True)
                if w > 0.01
            ],
            "bars": {
                "title": f"softmax weights, scores ÷ T = {temperature:.2f}",
                "labels": names,
                "series": [
                    {"name": kind, "values": w.tolist(), "colour": SCORE_COLOURS[kind]}
                    for kind, w in weights.items()
                ],
                "ymax": 1.0,
            },
            "table": _score_table(self.points, scores, weights),
            "title": (
                f"{score}, T = {temperature:.2f}: {names[int(chosen.argmax())]} wins with weight "
                f"{chosen.max().item():.3f}; output (green) at ({output[0].item():.2f}, "
                f"{output[1].item():.2f})"
            ),
        }


def _point(position, what: str) -> tuple[float, float]:
    """A default position, checked: two finite numbers inside the plane."""
    x, y = position_of(position, f"the {what}")
    low, high = QUERY_KEY_PLANE["x"]
    if not (low <= x <= high and low <= y <= high):
        raise ValueError(
            f"the {what} must lie in the plane, {low}..{high} on each axis, got {position}"
        )
    return (x, y)


def _plane_points(points: dict) -> list:
    return [
        {
            "name": name,
            "x": x,
            "y": y,
            "label": name,
            "colour": COLOURS["blue"] if name == "q" else COLOURS["red"],
            "drag": "xy",
        }
        for name, (x, y) in points.items()
    ]


def _query_direction(query: tuple) -> dict:
    """A dashed line through the origin along the query: a key's dot product with the query is
    its length along this line times the query's length."""
    x, y = query
    reach = 3.0 / max(abs(x), abs(y), 1e-9)
    return {
        "xy": [[-x * reach, -y * reach], [x * reach, y * reach]],
        "colour": COLOURS["blue"],
        "width": 1,
        "dashed": True,
    }


def _score_table(points: dict, scores: dict, weights: dict) -> dict:
    """Each point's position; each key's three scores (divided by the temperature, as the
    softmax takes them) and weights."""
    columns = ["point", "x", "y"]
    for kind in SCORE_FUNCTIONS:
        columns += [f"{TABLE_NAMES[kind]}: score ÷ T", f"{TABLE_NAMES[kind]}: weight"]
    x, y = points["q"]
    rows = [["q", f"{x:.2f}", f"{y:.2f}", *[""] * (2 * len(SCORE_FUNCTIONS))]]
    for index, (name, (x, y)) in enumerate(list(points.items())[1:]):
        row = [name, f"{x:.2f}", f"{y:.2f}"]
        for kind in SCORE_FUNCTIONS:
            row += [f"{scores[kind][index].item():.3f}", f"{weights[kind][index].item():.3f}"]
        rows.append(row)
    return {"columns": columns, "rows": rows}
