"""Regression tests from the 21st hostile pass over chapter 14 (attention across modalities:
vision): a model with forward hooks refused by name where its numbers are computed on a float64
copy rebuilt from its sizes (and by read_canvas, to agree), a replaced or added module named by
its weights, a mouse drawing inked by its length rather than its points, and a patch made large
by its channels named as such."""

import math
import time

import numpy as np
import pytest
import torch

from helpers.vision import (
    MOST_PEN_CELLS,
    MOST_PEN_WORK,
    MOST_STROKE_POINTS,
    PEN_RADIUS,
    Digits,
    patchify,
    rasterise_strokes,
)
from helpers.vision_models import (
    CanvasReader,
    DigitFinder,
    VisionTransformer,
    evaluate_finder,
    evaluate_reader,
    evaluate_vit,
    finder_test_set,
    float64_copy,
    read_canvas,
    reader_test_set,
    vit_attention_entropy,
)
from helpers.widgets import CanvasExplorer, DrawingExplorer


def tiny_models() -> dict:
    torch.manual_seed(21)
    return {
        "vit": VisionTransformer(8, 2, 1, 8),
        "finder": DigitFinder(8),
        "reader": CanvasReader(8, 2, 1, 1, 8),
    }


@pytest.fixture
def tiny() -> dict:
    return tiny_models()


@pytest.fixture(scope="module")
def digits() -> Digits:
    generator = torch.Generator().manual_seed(21)
    images = torch.rand(12, 1, 8, 8, generator=generator)
    return Digits(images, torch.arange(12) % 10)


@pytest.fixture(scope="module")
def canvases():
    return reader_test_set(4)


# S1. A forward hook (the usual way to ablate a head or a layer) was dropped without a word by
# float64_copy, so evaluate_*, vit_attention_entropy and the explorers reported the numbers of
# the model without it; read_canvas, which runs the model itself, followed it


def zero_output(module, inputs, output):
    return output * 0


def nothing_before(module, inputs):
    return None


HOOKED = {  # the model's kind, where the hook goes, which hook, and the path the error names
    "head": ("vit", lambda m: m.head, "forward_hook", r"head \(forward hook\)"),
    "attention pre-hook": (
        "vit",
        lambda m: m.blocks[0].self_attention,
        "forward_pre_hook",
        r"blocks\.0\.self_attention \(forward pre-hook\)",
    ),
    "the model itself": ("vit", lambda m: m, "forward_hook", r"the model itself \(forward hook\)"),
}


def _hook(module, which: str):
    if which == "forward_hook":
        return module.register_forward_hook(zero_output)
    return module.register_forward_pre_hook(nothing_before)


@pytest.mark.parametrize("where", list(HOOKED))
@pytest.mark.parametrize("evaluation", ["evaluate_vit", "vit_attention_entropy", "float64_copy"])
def test_a_hooked_vit_is_refused_naming_the_module_why_and_how(tiny, digits, where, evaluation):
    _, module, which, named = HOOKED[where]
    vit = tiny["vit"]
    handle = _hook(module(vit), which)
    calls = {
        "evaluate_vit": lambda: evaluate_vit(vit, digits),
        "vit_attention_entropy": lambda: vit_attention_entropy(vit, digits.images[:3]),
        "float64_copy": lambda: float64_copy(vit),
    }
    with pytest.raises(ValueError, match=named) as refused:
        calls[evaluation]()
    message = str(refused.value)
    assert "float64 copy rebuilt from the model's sizes" in message, message
    assert "nor a replaced forward would follow" in message, message
    assert "handle's .remove()" in message, message
    handle.remove()
    calls[evaluation]()  # without the hook: computed again


def test_the_hook_that_zeroes_every_logit_is_no_longer_ignored(tiny, digits):
    """The pass's case: every logit 0 made the model itself 1 in 10, while evaluate_vit
    reported the unhooked model's accuracy."""
    vit = tiny["vit"]
    vit.head.register_forward_hook(lambda module, inputs, output: torch.zeros_like(output))
    with pytest.raises(ValueError, match=r"the model has a hook on head \(forward hook\)"):
        evaluate_vit(vit, digits)


def test_every_hooked_module_is_named_in_the_plural(tiny, digits):
    vit = tiny["vit"]
    vit.register_forward_pre_hook(nothing_before)
    vit.blocks[0].self_attention.register_forward_hook(zero_output)
    vit.head.register_forward_hook(zero_output)
    vit.head.register_forward_pre_hook(nothing_before)
    with pytest.raises(ValueError) as refused:
        evaluate_vit(vit, digits)
    message = str(refused.value)
    assert message.startswith("the model has hooks on the model itself (forward pre-hook); "), (
        message
    )
    assert "blocks.0.self_attention (forward hook)" in message
    assert "head (forward pre-hook and forward hook)" in message
    assert "remove each with the handle's .remove()" in message


def test_a_hooked_finder_or_reader_is_refused_by_their_evaluations(tiny, canvases):
    finder, reader = tiny["finder"], tiny["reader"]
    handle = finder.attention.register_forward_hook(zero_output)
    with pytest.raises(ValueError, match=r"hook on attention \(forward hook\).*float64 copy"):
        evaluate_finder(finder, *finder_test_set(4))
    handle.remove()
    evaluate_finder(finder, *finder_test_set(4))
    handle = reader.decoder[0].cross_attention.register_forward_hook(zero_output)
    with pytest.raises(ValueError, match=r"hook on decoder\.0\.cross_attention \(forward hook\)"):
        evaluate_reader(reader, canvases)
    handle.remove()
    evaluate_reader(reader, canvases)


def test_read_canvas_refuses_a_hook_too_so_that_it_agrees_with_evaluate_reader(tiny, canvases):
    """read_canvas runs the model itself and so followed the hook, while evaluate_reader, reading
    through a float64 copy, did not: the two disagreed on the same model."""
    reader = tiny["reader"]
    handle = reader.head.register_forward_hook(zero_output)
    with pytest.raises(ValueError, match=r"hook on head \(forward hook\): read_canvas refuses it"):
        read_canvas(reader, canvases.images[:1])
    with pytest.raises(ValueError, match=r"hook on head \(forward hook\)"):
        evaluate_reader(reader, canvases)
    handle.remove()
    assert read_canvas(reader, canvases.images[:1]).shape == (1, reader.max_len)


@pytest.mark.parametrize(
    ("explorer", "name", "module"),
    [
        (CanvasExplorer, "finder", lambda m: m.head),
        (CanvasExplorer, "reader", lambda m: m.decoder[0].cross_attention),
        (DrawingExplorer, "vit", lambda m: m.head),
        (DrawingExplorer, "reader", lambda m: m.head),
    ],
    ids=["canvas finder", "canvas reader", "drawing vit", "drawing reader"],
)
def test_the_explorers_refuse_a_hooked_model(tiny, explorer, name, module):
    module(tiny[name]).register_forward_hook(zero_output)
    with pytest.raises(ValueError, match=rf"^models\['{name}'\]: the model has a hook on .* \(for"):
        explorer(models=tiny)


def test_an_evaluation_leaves_the_models_own_hooks_alone(tiny, digits):
    """The check only reads the hooks: a refused model keeps its hook, and a model without one
    gets none from the copy."""
    vit = tiny["vit"]
    handle = vit.head.register_forward_hook(zero_output)
    with pytest.raises(ValueError):
        evaluate_vit(vit, digits)
    assert list(vit.head._forward_hooks) == [handle.id]
    handle.remove()
    evaluate_vit(vit, digits)
    assert all(
        not module._forward_hooks and not module._forward_pre_hooks for module in vit.modules()
    )


# P2. A module replaced or added was blamed on model.sizes


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            lambda vit: setattr(vit, "norm", torch.nn.Identity()),
            r"its sizes .* build: it lacks norm\.weight, norm\.bias \(was a module replaced, added",
        ),
        (
            lambda vit: setattr(vit, "extra", torch.nn.Linear(2, 2)),
            r"build: it has extra\.weight, extra\.bias, which they do not build \(was a module "
            r"replaced, added",
        ),
        (
            lambda vit: vit.blocks.append(VisionTransformer(8, 2, 1, 8).blocks[0]),
            r"it has blocks\.1\.[\w.]+, .* and \d+ more, which they do not build",
        ),
    ],
    ids=["norm replaced", "module added", "block added"],
)
def test_a_replaced_or_added_module_is_named_by_its_weights(tiny, digits, change, words):
    vit = tiny["vit"]
    change(vit)
    with pytest.raises(ValueError, match=words) as refused:
        evaluate_vit(vit, digits)
    assert "do not fit its sizes" not in str(refused.value)


def test_sizes_changed_keep_their_message(tiny, digits):
    vit = tiny["vit"]
    vit.sizes = dict(vit.sizes, d_model=12)
    with pytest.raises(ValueError, match=r"do not fit its sizes .*was model.sizes changed"):
        evaluate_vit(vit, digits)


# P1. rasterise_strokes counted segments, each at least a piece, while the pad sends a point
# every 0.25 cells: a mouse drawing of ~1,100 cells of ink was refused


def nine_eights_traced_twice(spacing: float = 0.26) -> list:
    """The pass's drawing: an 8 (two loops) in each of the nine cells, traced twice, with points
    `spacing` cells apart as the pad sends them (about 1,360 cells, 5,220 points)."""
    strokes = []
    for _ in range(2):
        for cell in range(9):
            row, col = divmod(cell, 3)
            cx, cy = 32 * col + 16, 32 * row + 16
            for dy in (-6, 6):
                n = int(2 * math.pi * 6 / spacing)
                strokes.append(
                    [
                        [
                            cx + 6 * math.cos(2 * math.pi * i / n),
                            cy + dy + 6 * math.sin(2 * math.pi * i / n),
                        ]
                        for i in range(n + 1)
                    ]
                )
    return strokes


def zigzag(points: int, step: float = 0.25) -> list:
    """The pass's stroke: back and forth across the pad, a point every `step` cells."""
    stroke, x, y, dx = [], 2.0, 2.0, step
    while len(stroke) < points:
        stroke.append([x, y])
        x += dx
        if x > 94 or x < 2:
            dx, y = -dx, y + 8
    return [stroke]


def inked_by_distance(strokes: list, size: int, radius: float) -> np.ndarray:
    """Every cell centre's exact distance to every segment, on the whole grid at once."""
    centres = np.stack(np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5), -1)  # [y, x]
    inked = np.zeros((size, size), dtype=bool)
    for stroke in strokes:
        points = np.clip(np.asarray(stroke, dtype=float), 0, size)
        a, b = points[:-1], points[1:]  # (segments, 2)
        for start in range(0, len(a), 256):
            sa, sb = a[start : start + 256], b[start : start + 256]
            direction = sb - sa  # (m, 2)
            relative = centres[None] - sa[:, None, None]  # (m, size, size, 2)
            along = (relative * direction[:, None, None]).sum(-1) / np.maximum(
                (direction**2).sum(-1), 1e-12
            )[:, None, None]
            nearest = sa[:, None, None] + np.clip(along, 0, 1)[..., None] * direction[:, None, None]
            inked |= (((centres[None] - nearest) ** 2).sum(-1) <= radius**2).any(0)
    return inked


def test_a_mouse_stroke_of_1100_cells_is_inked_exactly():
    strokes = zigzag(4400)
    inked = rasterise_strokes(strokes)
    np.testing.assert_array_equal(inked.numpy(), inked_by_distance(strokes, 96, PEN_RADIUS))


def test_the_promised_length_is_inked_however_densely_the_pad_sends_points():
    """About 8,600 cells of stroke with the default pen, as MOST_PEN_CELLS says; points 0.5
    cells apart, so that the drawing is still under MOST_STROKE_POINTS points."""
    window = 2 * (math.ceil(1 + PEN_RADIUS) + 1) + 1
    pieces = MOST_PEN_CELLS // window**2
    assert pieces * 2 > 8_600
    strokes = zigzag(MOST_STROKE_POINTS, 0.42)  # 19,999 segments, about 8,500 cells
    on_pad = [[min(max(v, 0), 96) for v in point] for point in strokes[0]]  # as it is clamped
    length = sum(math.dist(p, q) for p, q in zip(on_pad, on_pad[1:], strict=False))
    assert 8_000 < length <= pieces * 2
    assert rasterise_strokes(strokes).any()
    with pytest.raises(ValueError, match=r"about 8,664 cells of stroke; draw fewer or shorter"):
        rasterise_strokes(zigzag(MOST_STROKE_POINTS, 0.45))


def test_the_drawing_explorer_takes_nine_eights_traced_twice(tiny):
    strokes = nine_eights_traced_twice()
    assert 5_000 < sum(map(len, strokes)) < MOST_STROKE_POINTS
    explorer = DrawingExplorer(models=tiny)
    explorer.draw(strokes)
    assert "problem" not in explorer.live.view, explorer.live.view.get("problem")
    assert explorer.state["inked_cells"] == list(range(9))
    assert len(explorer.strokes) == len(strokes) == 36


def test_a_drawing_too_long_is_still_refused_by_its_length_and_at_once():
    far = [[[0, 0], [96, 96]] * 5000]  # one stroke, 1.4 M cells of ink
    started = time.perf_counter()
    with pytest.raises(ValueError, match=r"the strokes are [\d,]+ cells long in all, in 9,999 "):
        rasterise_strokes(far)
    assert time.perf_counter() - started < 2


def test_separate_dots_are_each_a_piece_and_named_so():
    dots = [[[40, 40]] for _ in range(5_000)]
    with pytest.raises(
        ValueError, match=r"of 5,000 strokes: 5,000 pieces .*a dot, or a stroke shorter"
    ):
        rasterise_strokes(dots)
    assert rasterise_strokes([[[40, 40]] * MOST_STROKE_POINTS]).sum() > 0  # one stroke: a piece


def test_many_points_with_a_wide_pen_are_refused_by_the_work_they_take():
    """Points close together in one stroke cost little length, yet each segment is inked apart:
    with a wide pen they are refused by the cells examined, naming the points."""
    window = 2 * (math.ceil(1 + 10) + 1) + 1
    points = MOST_PEN_WORK // window**2 + 2
    stroke = [[[40 + 0.1 * (i % 2), 40] for i in range(points)]]
    with pytest.raises(ValueError, match=r"draw with fewer points, further apart, or with a"):
        rasterise_strokes(stroke, pen_radius=10)
    assert rasterise_strokes([stroke[0][: points - 2]], pen_radius=10).any()


# P4. A patch made large by its channels was blamed on the patch size


def test_a_patch_too_large_for_its_channels_names_them():
    images = torch.empty(1, 2**26, 8, 8, device="meta")
    with pytest.raises(ValueError, match=r"a patch of C x p x p = 67,108,864 channels x 8 x 8"):
        patchify(images, 8)


def test_a_patch_size_too_large_on_its_own_keeps_its_message():
    with pytest.raises(ValueError, match=r"^a patch of size 16385 would hold more than 2\^28"):
        patchify(torch.empty(1, 1, 16385, 16385, device="meta"), 16385)
