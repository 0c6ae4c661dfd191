"""What the twenty-fifth and twenty-sixth hostile passes over chapters 12-14 found, each held:
a caller's default dtype reaching the checkers' cases and the float64 copies, chapter 14's
explorer functions run under a caller's default device, the time limit cutting short an import
it meant to let finish, a word the menu refuses in its own words, and probabilities that kept
their gradient."""

import contextlib
import sys

import pytest
import torch

from helpers import vision_models
from helpers.contexts import plain_torch
from helpers.exercises import (
    check_attention_centroid,
    check_previous_token_score,
    check_top_p_filter,
)
from helpers.widgets.ch13_induction_heads import find_repeat, parse_tokens
from helpers.widgets.ch14_attention_across_modalities import (
    cell_mass,
    compose_canvas,
    first_test_images,
    layout_text,
    most_attended_cell,
    parse_layout,
)


@pytest.fixture
def default_dtype():
    """Sets torch's default dtype for the test and puts float32 back after it."""
    yield torch.set_default_dtype
    torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_plain_torch_builds_in_float32_and_gives_the_callers_dtype_back(default_dtype, dtype):
    default_dtype(dtype)
    with plain_torch():
        assert torch.get_default_dtype() == torch.float32
        assert torch.zeros(2).dtype == torch.float32
    assert torch.get_default_dtype() == dtype


def top_p_with_exp_unshifted(logits, top_p):
    """Right but for the softmax, which exponentiates the logits without subtracting the row's
    maximum: e^100 is inf in float32."""
    if top_p >= 1:
        return logits.clone()
    exps = logits.exp()
    probabilities = exps / exps.sum(-1, keepdim=True)
    ordered, order = probabilities.sort(-1, descending=True)
    keep_sorted = (ordered.cumsum(-1) - ordered) < top_p
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def test_a_callers_float64_default_does_not_make_the_float32_cases_float64(
    run_checker, default_dtype
):
    default_dtype(torch.float64)
    verdict, out = run_checker(check_top_p_filter, top_p_with_exp_unshifted)
    assert not verdict and "e^100 is inf in torch.float32" in out, out


def centroid(weights, grid, patch):
    rows, columns = grid
    down = torch.arange(rows, dtype=weights.dtype) * patch + (patch - 1) / 2
    across = torch.arange(columns, dtype=weights.dtype) * patch + (patch - 1) / 2
    centres = torch.stack(torch.meshgrid(down, across, indexing="ij"), -1).reshape(-1, 2)
    return (weights / weights.sum(-1, keepdim=True)) @ centres


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_right_centroid_passes_under_a_callers_half_precision_default(
    run_checker, default_dtype, dtype
):
    default_dtype(dtype)
    verdict, out = run_checker(check_attention_centroid, centroid)
    assert verdict, out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_float64_copy_holds_the_weights_exactly_under_a_half_precision_default(
    default_dtype, dtype
):
    torch.manual_seed(0)
    vit = vision_models.build(vision_models.VitRecipe())
    default_dtype(dtype)
    copy = vision_models.float64_copy(vit)
    for (name, weight), (_, copied) in zip(
        vit.state_dict().items(), copy.state_dict().items(), strict=True
    ):
        assert torch.equal(copied, weight.double()), name


def test_the_float64_copy_of_a_model_on_meta_says_it_has_no_weights():
    with torch.device("meta"):
        vit = vision_models.build(vision_models.VitRecipe())
    with pytest.raises(ValueError, match="on the meta device: it has shapes but no weights"):
        vision_models.float64_copy(vit)


@pytest.mark.parametrize("where", ["with", "set"])
def test_the_explorers_functions_answer_on_the_cpu_under_a_callers_default_device(where):
    scores = torch.randn(36, generator=torch.Generator().manual_seed(0))  # (patches,)
    attention = scores.softmax(-1)
    digits = torch.tensor([7, -1, -1, -1, 1, -1, -1, -1, -1])
    images = first_test_images()
    expected = cell_mass(attention, 4), most_attended_cell(attention)
    canvas = compose_canvas(digits, images)
    ids = parse_tokens("5 9 12 5 9 12", 64, 48)
    if where == "set":
        torch.set_default_device("meta")
    try:
        with torch.device("meta") if where == "with" else contextlib.nullcontext():
            assert (cell_mass(attention, 4), most_attended_cell(attention)) == expected
            assert torch.equal(parse_layout("7 . . . 1 . . . ."), digits)
            assert layout_text(digits) == layout_text(parse_layout(layout_text(digits)))
            composed = compose_canvas(digits, images)
            assert composed.device.type == "cpu" and torch.equal(composed, canvas)
            assert torch.equal(parse_tokens("5 9 12 5 9 12", 64, 48), ids)
            assert find_repeat(ids) == find_repeat(parse_tokens("5 9 12 5 9 12", 64, 48))
    finally:
        torch.set_default_device(None)


def test_an_import_of_busy_python_finishes_though_the_limit_passes_in_the_checkers_hook(
    run_checker, monkeypatch, tmp_path
):
    """Many small Python calls, as a large import makes: the time runs out while the checker's
    own profile hook runs, on top of the import's frames."""
    from helpers.exercises import framework

    (tmp_path / "busy_to_import.py").write_text(
        "import time\n"
        "def step(x):\n    return len(str(x))\n"
        "start = time.perf_counter()\n"
        "while time.perf_counter() - start < 0.6:\n    step(12345)\n"
        "READY = True\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(framework, "ANSWER_TIME_LIMIT_SECONDS", 0.1)

    def answer(weights):
        import busy_to_import  # noqa: F401

        return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(-1)

    verdict, out = run_checker(check_previous_token_score, answer)
    imported = sys.modules.get("busy_to_import")  # not imported anew here
    assert imported is not None and imported.READY  # whole, though the limit passed during it
    assert not verdict and "did not return within" in out, out


# What the twenty-sixth pass found


@pytest.fixture(scope="module")
def tiny_vision_models() -> dict:
    torch.manual_seed(14)
    return {
        "vit": vision_models.VisionTransformer(8, 2, 1, 8),
        "finder": vision_models.DigitFinder(8),
        "reader": vision_models.CanvasReader(8, 2, 1, 1, 8),
    }


@pytest.mark.parametrize("mode", ["find", "read"])
def test_a_word_the_menu_does_not_hold_is_a_value_error_in_either_mode(tiny_vision_models, mode):
    from helpers.widgets import CanvasExplorer

    with pytest.raises(ValueError, match=r"word must be one of \['zero', .* got 'Seven'"):
        CanvasExplorer(mode=mode, word="Seven", models=tiny_vision_models)


def test_the_drawing_explorers_probabilities_carry_no_gradient(tiny_vision_models):
    from helpers.widgets import DrawingExplorer

    explorer = DrawingExplorer(models=tiny_vision_models)
    image = torch.zeros(1, 1, 24, 24, dtype=torch.float64)
    image[0, 0, 2:6, 3] = 1.0  # a stroke in cell 0
    cells, probabilities = explorer.naming(image)
    assert cells == [0] and not probabilities.requires_grad
    assert probabilities.numpy().shape == (1, 10)
