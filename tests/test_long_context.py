"""Chapter 11: RoPE, ALiBi, the length-extrapolation task, sparse patterns, linear attention
and the two explorers."""

import math
import re

import hypothesis.strategies as st
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings

from helpers.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from helpers.long_context import (
    EPSILON,
    POSITIONS,
    REMAKE,
    SAVED_MODELS,
    PositionAwareAttention,
    RecallModel,
    RecallTask,
    Recipe,
    block_sparse_mask,
    dilated_mask,
    elu_feature_map,
    extrapolation_batches,
    fraction_computed,
    fraction_of_tiles,
    global_mask,
    linear_attention,
    linear_attention_quadratic,
    linear_attention_weights,
    load_recall_models,
    local_mask,
    recall_accuracy,
    train_and_save_all,
    train_recall_model,
)
from helpers.masks import causal_mask
from helpers.positional import alibi_bias, alibi_slopes, apply_rope, frequencies
from helpers.widgets import RopeExplorer, SparsePatternExplorer

# ---------------------------------------------------------------------------------------------
# RoPE


@settings(max_examples=40, deadline=None)
@given(
    d_half=st.integers(1, 16),
    m=st.integers(0, 2000),
    n=st.integers(0, 2000),
    shift=st.integers(-500, 5000),
)
def test_a_rope_score_depends_only_on_the_distance(d_half, m, n, shift):
    generator = torch.Generator().manual_seed(d_half)
    query, key = torch.randn(2, 1, 2 * d_half, generator=generator, dtype=torch.float64)
    here = apply_rope(query, torch.tensor([m])) @ apply_rope(key, torch.tensor([n])).T
    moved = (
        apply_rope(query, torch.tensor([m + shift])) @ apply_rope(key, torch.tensor([n + shift])).T
    )
    torch.testing.assert_close(here, moved, atol=1e-9, rtol=0)


def test_rope_is_a_complex_rotation_of_each_pair():
    x = torch.randn(2, 3, 7, 10, dtype=torch.float64)
    positions = torch.tensor([0, 1, 5, 9, 100, 1000, 3])
    pairs = torch.view_as_complex(x.reshape(2, 3, 7, 5, 2))  # x_2j + i x_2j+1
    turn = torch.polar(torch.ones(7, 5, dtype=torch.float64), positions[:, None] * frequencies(10))
    expected = torch.view_as_real(pairs * turn).flatten(-2)
    torch.testing.assert_close(apply_rope(x, positions), expected, atol=1e-12, rtol=0)


def test_rope_keeps_lengths_dtype_and_defaults_to_positions_from_zero():
    x = torch.randn(4, 6, 8)
    turned = apply_rope(x)
    assert turned.dtype == torch.float32 and turned.shape == x.shape
    torch.testing.assert_close(turned.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(turned, apply_rope(x, torch.arange(6)))
    torch.testing.assert_close(turned[:, 0], x[:, 0])  # position 0 is not turned
    assert not torch.allclose(apply_rope(x, base=100.0), turned)


def test_gradients_flow_through_rope():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: apply_rope(t, torch.tensor([2, 0, 7])), (x,))


@pytest.mark.parametrize(
    ("x", "positions", "words"),
    [
        (torch.randn(3, 5), None, "must be even"),
        (torch.randn(3, 0), None, "must be even and > 0"),
        (torch.randn(6), None, "(..., seq, d)"),
        (torch.ones(3, 4, dtype=torch.long), None, "floating point"),
        ([[1.0, 2.0]], None, "torch.Tensor"),
        (torch.randn(3, 4), torch.arange(4), "one per row of x"),
        (torch.randn(3, 4), torch.tensor([0.0, float("nan"), 1.0]), "finite"),
        (torch.randn(3, 4), torch.tensor([True, False, True]), "real numbers"),
    ],
)
def test_rope_refuses_bad_input_with_a_named_reason(x, positions, words):
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        apply_rope(x, positions)


def test_rope_refuses_a_base_that_turns_nothing():
    with pytest.raises(ValueError, match="base must be > 1"):
        apply_rope(torch.randn(2, 4), base=1.0)


# ---------------------------------------------------------------------------------------------
# ALiBi


def test_alibi_slopes_are_those_of_press_et_al():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0**-k for k in (2, 4, 6, 8)]))
    # 6 heads: the 4-head slopes, then every other slope of 8 heads (1/2, 1/8)
    torch.testing.assert_close(alibi_slopes(6), torch.tensor([2.0**-k for k in (2, 4, 6, 8, 1, 3)]))
    torch.testing.assert_close(alibi_slopes(1), torch.tensor([2.0**-8]))


def test_alibi_bias_is_minus_slope_times_distance():
    bias = alibi_bias(8, 5, 5)
    assert bias.shape == (8, 5, 5) and bias.dtype == torch.float32
    assert bias[0, 4, 1].item() == -0.5 * 3 and bias[7, 4, 0].item() == -4 / 256
    assert (bias.diagonal(dim1=1, dim2=2) == 0).all()
    # the queries of a decoding step are the newest positions: one query sees distances 6..0
    step = alibi_bias(2, 1, 7)
    torch.testing.assert_close(step[0, 0], -torch.arange(6, -1, -1).float() / 16)
    torch.testing.assert_close(alibi_bias(4, 3, 6), alibi_bias(4, 6, 6)[:, 3:])


def test_alibi_as_a_float_mask_of_sdpa_equals_the_explicit_scores():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 2, 8, 6, 4, dtype=torch.float64).unbind(0)
    bias = alibi_bias(8, 6, 6).double().masked_fill(~causal_mask(6), float("-inf"))
    explicit = torch.softmax(q @ k.mT / 2 + bias, dim=-1) @ v
    torch.testing.assert_close(
        F.scaled_dot_product_attention(q, k, v, attn_mask=bias), explicit, atol=1e-12, rtol=0
    )


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ((0, 4, 4), "num_heads must be a whole number >= 1"),
        ((8, 5, 4), "must be <= num_keys"),
        ((8, 2.0, 4), "num_queries must be a whole number"),
        ((True, 2, 2), "num_heads must be a whole number"),
    ],
)
def test_alibi_refuses_bad_sizes(args, words):
    with pytest.raises(ValueError, match=words):
        alibi_bias(*args)


# ---------------------------------------------------------------------------------------------
# The length-extrapolation task


def test_every_answer_is_the_most_recent_marker():
    task = RecallTask()
    tokens, answers = task.batch(50, 40, torch.Generator().manual_seed(3))
    for row, answer_row in zip(tokens.tolist(), answers.tolist(), strict=True):
        latest = None
        for token, answer in zip(row, answer_row, strict=True):
            latest = token if token < task.num_markers else latest
            assert answer == latest
    assert (tokens[:, 0] < task.num_markers).all()
    assert len(task.token_names()) == task.vocab_size == 16


def test_the_test_batches_are_the_same_every_time():
    first, second = extrapolation_batches(RecallTask()), extrapolation_batches(RecallTask())
    assert list(first) == [32, 64, 128]
    for length in first:
        assert torch.equal(first[length][0], second[length][0])


@pytest.mark.parametrize("position", POSITIONS)
def test_a_model_runs_at_any_length_and_learns_a_little(position):
    result = train_recall_model(position, Recipe(steps=60))
    assert result["loss"][-1] < result["loss"][0]
    model = result["model"]
    assert model(torch.zeros(2, 100, dtype=torch.long)).shape == (2, 100, 16)


def test_the_saved_models_extrapolate_as_the_chapter_says():
    saved = load_recall_models()
    tests = extrapolation_batches(saved["task"])
    accuracy = {
        position: {
            length: recall_accuracy(model, *batch)["accuracy"] for length, batch in tests.items()
        }
        for position, model in saved["models"].items()
    }
    assert all(accuracy[position][32] > 0.9 for position in POSITIONS)
    assert accuracy["alibi"][128] > 0.95
    assert accuracy["sinusoidal"][128] < 0.6 and accuracy["rope"][128] < 0.8


def test_saving_and_loading_round_trips(tmp_path):
    path = tmp_path / "models.pt"
    seconds = train_and_save_all(path, Recipe(steps=3))
    assert set(seconds) == set(POSITIONS)
    loaded = load_recall_models(path)
    assert set(loaded["models"]) == set(POSITIONS) and loaded["recipe"]["steps"] == 3
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match="make long-context-models"):
        load_recall_models(path)


def test_the_model_and_task_refuse_bad_input():
    with pytest.raises(ValueError, match="position must be one of"):
        RecallModel(16, "learned")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        RecallModel(16, "rope")(torch.tensor([[3, 16]]))
    with pytest.raises(ValueError, match="generator must be a torch.Generator"):
        RecallTask().batch(2, 5, 0)
    with pytest.raises(ValueError, match="recipe must be a Recipe"):
        train_recall_model("rope", {"steps": 3})
    with pytest.raises(ValueError, match="marker_rate must be below 1"):
        RecallTask(marker_rate=2.0)
    with pytest.raises(ValueError, match="num_markers must be a whole number >= 1"):
        RecallTask(num_markers=0)
    with pytest.raises(ValueError, match="steps must be a whole number >= 1"):
        Recipe(steps=0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        Recipe(lr=0.0)
    with pytest.raises(ValueError, match="task must be a RecallTask"):
        Recipe(task=None)
    with pytest.raises(ValueError, match="task must be a RecallTask"):
        extrapolation_batches(None)
    model, tokens = RecallModel(16, "rope"), torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"answers must have the shape of tokens \(2, 5\)"):
        recall_accuracy(model, tokens, tokens[:, :4])
    with pytest.raises(
        ValueError, match="model must be a RecallModel or a LowRankRecallModel, got NoneType"
    ):
        recall_accuracy(None, tokens, tokens)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: RecallModel(16, "alibi", d_model=0), "d_model must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", d_model=-1), "d_model must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", d_model=32.0), "d_model must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", num_heads=0), "num_heads must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", num_heads=-1), "num_heads must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", num_heads=2.0), "num_heads must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", num_heads=True), "num_heads must be a whole number >= 1"),
        (lambda: RecallModel(16, "rope", 30, 4), r"d_model \(30\) must be num_heads \(4\) times"),
        (lambda: RecallModel(16, "sinusoidal", 12, 4), "times an even head size"),
        (lambda: RecallModel(16, None), "position must be one of"),
        (lambda: RecallModel(0, "rope"), "vocab_size must be a whole number >= 1"),
        (lambda: PositionAwareAttention(8, 0, "rope"), "num_heads must be a whole number >= 1"),
        (lambda: PositionAwareAttention(8, 2, "rope")(torch.randn(1, 5, 6)), "d_model=8"),
        (lambda: PositionAwareAttention(8, 2, "rope")(torch.randn(5, 8)), r"\(B, n, d_model=8\)"),
        (lambda: PositionAwareAttention(8, 2, "rope")(torch.ones(1, 5, 8).long()), "dtype"),
        (lambda: PositionAwareAttention(8, 2, "rope")(None), "torch.Tensor"),
        (lambda: Recipe(d_model=30, num_heads=4), r"d_model \(30\) must be num_heads \(4\)"),
        (lambda: train_recall_model("rope", Recipe(steps=1), progress="no"), "progress must be"),
        (lambda: train_recall_model("learned", Recipe(steps=1)), "position must be one of"),
        (lambda: extrapolation_batches(RecallTask(), (2.5,)), "a factor must be a whole number"),
        (lambda: extrapolation_batches(RecallTask(), ()), "factors must be a non-empty tuple"),
    ],
)
def test_the_model_refuses_sizes_it_cannot_be_built_with(make, words):
    """RecallModel(16, "alibi", d_model=0) used to run with NaN weights, num_heads=0 raised
    ZeroDivisionError and num_heads=2.0 built a model."""
    with pytest.raises(ValueError, match=words):
        make()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda answers: answers.float(), "answers must hold integer token ids"),
        (lambda answers: answers.float() + 0.5, "answers must hold integer token ids"),
        (lambda answers: answers.bool(), "answers must hold integer token ids"),
        (lambda answers: answers + 100, "outside the vocabulary 0..15"),
        (lambda answers: answers.tolist(), "answers must be a torch.Tensor"),
    ],
)
def test_recall_accuracy_refuses_answers_that_are_not_token_ids(change, words):
    model = RecallModel(16, "rope")
    tokens, answers = RecallTask().batch(2, 5, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=words):
        recall_accuracy(model, tokens, change(answers))


@pytest.mark.parametrize("shape", [(0, 5), (2, 0)])
def test_recall_accuracy_refuses_empty_batches(shape):
    empty = torch.zeros(shape, dtype=torch.long)
    with pytest.raises(ValueError, match="at least one position"):
        recall_accuracy(RecallModel(16, "rope"), empty, empty)


def test_recall_accuracy_leaves_the_model_as_it_was():
    model = RecallModel(16, "alibi").double().train()
    tokens, answers = RecallTask().batch(2, 5, torch.Generator().manual_seed(0))
    before = {name: value.clone() for name, value in model.state_dict().items()}
    recall_accuracy(model, tokens, answers)
    assert next(model.parameters()).dtype == torch.float64 and model.training
    for name, value in model.state_dict().items():
        assert torch.equal(value, before[name])


@pytest.mark.parametrize("position", POSITIONS)
def test_recall_accuracy_after_a_forward_pass_that_records_gradients(position):
    """The attention weights kept from such a pass cannot be deep-copied: recall_accuracy
    used to fail with 'Only Tensors created explicitly by the user ... deepcopy'."""
    model = RecallModel(16, position)
    tokens, answers = RecallTask().batch(2, 10, torch.Generator().manual_seed(0))
    model(tokens).sum().backward()
    assert 0 <= recall_accuracy(model, tokens, answers)["accuracy"] <= 1


@pytest.mark.parametrize("position", POSITIONS)
def test_a_recall_model_refuses_a_sequence_of_no_positions(position):
    with pytest.raises(ValueError, match=r"tokens must be \(B, n\) with at least one position"):
        RecallModel(16, position)(torch.zeros(2, 0, dtype=torch.long))


def _retyped(weights: dict, dtype: torch.dtype) -> dict:
    return {name: value.to(dtype) for name, value in weights.items()}


CRAFTED_CHECKPOINTS = {
    "no d_model in the recipe": (lambda c: c["recipe"].pop("d_model"), "its recipe should hold"),
    "a recipe that is a list": (lambda c: c.update(recipe=[1, 2]), "its recipe should hold"),
    "d_model 0": (lambda c: c["recipe"].update(d_model=0), "d_model must be a whole number"),
    "3 heads for d_model 32": (lambda c: c["recipe"].update(num_heads=3), "even head size"),
    "a task with an unknown field": (lambda c: c["task"].update(colour=1), "its task should"),
    "a task of no markers": (lambda c: c["task"].update(num_markers=0), "num_markers must"),
    "no alibi weights": (lambda c: c["weights"].pop("alibi"), "one set per"),
    "weights that are a number": (lambda c: c.update(weights=3), "one set per"),
    "a missing tensor": (
        lambda c: c["weights"]["rope"].pop("output.bias"),
        "(rope): its weights do not fit its config (missing: output.bias)",
    ),
    "a tensor of the wrong shape": (
        lambda c: c["weights"]["rope"].update({"output.bias": torch.zeros(3)}),
        "(rope): its weights do not fit its config (shape: output.bias (3,) (its config needs",
    ),
    "int64 weights": (
        lambda c: c["weights"].update(rope=_retyped(c["weights"]["rope"], torch.int64)),
        "rope weights are not floating-point tensors",
    ),
    "a list in place of a tensor": (
        lambda c: c["weights"]["rope"].update({"output.bias": [0.0] * 16}),
        "rope weights are not floating-point tensors",
    ),
    "d_model 64 for weights of 32": (
        lambda c: c["recipe"].update(d_model=64),
        "(sinusoidal): its weights do not fit its config (shape: embedding.weight",
    ),
}


@pytest.mark.parametrize("name", list(CRAFTED_CHECKPOINTS))
def test_a_crafted_checkpoint_is_refused_with_a_checkpoint_error(tmp_path, name):
    """Files with valid checksums whose contents are wrong used to raise KeyError 'd_model', raw
    load_state_dict errors, or load int64 weights as truncated floats."""
    change, words = CRAFTED_CHECKPOINTS[name]
    contents = load_checkpoint(
        SAVED_MODELS, ("weights", "recipe", "task", "loss", "seconds"), REMAKE
    )
    change(contents)
    path = tmp_path / "crafted.pt"
    save_checkpoint(path, contents)
    with pytest.raises(CheckpointError, match=re.escape(words)):
        load_recall_models(path)


def test_float16_weights_load_as_float32_models(tmp_path):
    contents = load_checkpoint(
        SAVED_MODELS, ("weights", "recipe", "task", "loss", "seconds"), REMAKE
    )
    contents["weights"] = {p: _retyped(w, torch.float16) for p, w in contents["weights"].items()}
    save_checkpoint(tmp_path / "half.pt", contents)
    model = load_recall_models(tmp_path / "half.pt")["models"]["rope"]
    assert next(model.parameters()).dtype == torch.float32


# ---------------------------------------------------------------------------------------------
# Sparse patterns


def test_local_global_and_dilated_masks_follow_their_rules():
    local = local_mask(10, 2)
    assert local[5].nonzero().flatten().tolist() == [3, 4, 5, 6, 7]
    assert torch.equal(local, local.T)
    assert (local & causal_mask(10))[5].nonzero().flatten().tolist() == [3, 4, 5]
    glob = global_mask(6, [0, 4])
    assert glob[0].all() and glob[:, 4].all() and not glob[2, 3]
    dilated = dilated_mask(12, 2, 3)
    assert dilated[6].nonzero().flatten().tolist() == [0, 3, 6, 9]
    assert torch.equal(dilated_mask(12, 2, 1), local_mask(12, 2))


def test_block_sparse_is_decided_block_by_block_and_fixed_by_its_seed():
    mask = block_sparse_mask(32, 4, num_random=1, num_global=1, seed=0)
    blocks = mask[::4, ::4]
    assert torch.equal(mask, blocks.repeat_interleave(4, 0).repeat_interleave(4, 1))
    assert blocks[0].all() and blocks[:, 0].all()  # the global block
    assert (blocks.diagonal() == 1).all()
    assert blocks[1:].sum(1).tolist() == [4, 5, 5, 5, 5, 5, 4]  # window, global, 1 random
    assert torch.equal(mask, block_sparse_mask(32, 4, seed=0))
    assert not torch.equal(mask, block_sparse_mask(32, 4, seed=1))
    assert block_sparse_mask(32, 4, seed=2**32 - 1).shape == (32, 32)  # the largest seed


def test_fractions_count_entries_and_tiles():
    mask = local_mask(64, 4)
    assert fraction_computed(mask) == mask.sum().item() / 4096
    diagonal = torch.eye(16, dtype=torch.bool)
    assert fraction_computed(diagonal) == 1 / 16
    assert fraction_of_tiles(diagonal, 4) == 4 / 16  # one entry fills its whole tile
    assert fraction_of_tiles(torch.ones(8, 8, dtype=torch.bool), 2) == 1.0


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: local_mask(0, 1), "size must be a whole number >= 1"),
        (lambda: local_mask(5, -1), "radius must be a whole number >= 0"),
        (lambda: global_mask(5, [7]), "outside 0..4"),
        (lambda: global_mask(5, "0"), "positions must be a list"),
        (lambda: dilated_mask(5, 1, 0), "dilation must be a whole number >= 1"),
        (lambda: block_sparse_mask(30, 4), "multiple of block_size"),
        (lambda: block_sparse_mask(8, 4, num_global=3), "more than the 2 blocks"),
        (lambda: block_sparse_mask(8, 4, seed=2**32), r"seed must be below 2\^32"),
        (lambda: Recipe(seed=2**70), r"seed must be below 2\^32"),
        (lambda: fraction_computed(torch.ones(3, 3)), "boolean"),
        (lambda: fraction_of_tiles(torch.ones(6, 6, dtype=torch.bool), 4), "4 x 4 tiles"),
    ],
)
def test_patterns_refuse_bad_input(call, words):
    with pytest.raises(ValueError, match=words):
        call()


# ---------------------------------------------------------------------------------------------
# Linear attention


@pytest.mark.parametrize("causal", [False, True])
def test_the_three_forms_of_linear_attention_agree(causal):
    torch.manual_seed(1)
    q, k = torch.randn(2, 2, 3, 9, 5, dtype=torch.float64).unbind(0)
    v = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    torch.testing.assert_close(
        linear_attention(q, k, v, causal), linear_attention_quadratic(q, k, v, causal)
    )
    phi_q, phi_k = F.elu(q) + 1, F.elu(k) + 1
    for i in (0, 4, 8):  # one query at a time, straight from the formula
        last = i + 1 if causal else 9
        weights = phi_q[..., i : i + 1, :] @ phi_k[..., :last, :].mT  # (2, 3, 1, keys)
        expected = (weights @ v[..., :last, :]) / (weights.sum(-1, keepdim=True) + EPSILON)
        torch.testing.assert_close(linear_attention(q, k, v, causal)[..., i : i + 1, :], expected)


def test_linear_attention_weights_are_positive_rows_summing_to_one():
    q, k = torch.randn(2, 6, 3).unbind(0)
    weights = linear_attention_weights(q, k, causal=True)
    assert (weights[causal_mask(6)] > 0).all() and (weights[~causal_mask(6)] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(6))
    assert (elu_feature_map(torch.tensor([-30.0, 0.0, 2.0])) >= 0).all()


def test_features_that_round_to_zero_give_zeros_not_nan():
    q = torch.full((3, 4), -40.0)  # elu(-40) + 1 is 0 in float32
    k, v = torch.randn(3, 4), torch.randn(3, 2)
    for causal in (False, True):
        assert torch.equal(linear_attention(q, k, v, causal), torch.zeros(3, 2))
        assert linear_attention_weights(q, k, causal).isfinite().all()


def test_linear_attention_passes_the_same_gradients_both_ways():
    q, k, v = (torch.randn(5, 3, dtype=torch.float64, requires_grad=True) for _ in range(3))
    grads = [
        torch.autograd.grad(form(q, k, v, True).sum(), (q, k, v))
        for form in (linear_attention, linear_attention_quadratic)
    ]
    for fast, slow in zip(*grads, strict=True):
        torch.testing.assert_close(fast, slow)


FORMS = {
    "linear_attention": linear_attention,
    "linear_attention_quadratic": linear_attention_quadratic,
    "linear_attention_weights": lambda q, k, v, causal: linear_attention_weights(q, k, causal),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("form", list(FORMS))
def test_linear_attention_refuses_queries_and_keys_whose_features_overflow(form, causal):
    """q and k near 1e20 give phi(q) . phi(k) near 1e40, inf in float32, and the output was NaN
    from finite input."""
    q, k, v = torch.randn(3, 2, 6, 4).unbind(0)
    with pytest.raises(ValueError, match="linear attention overflows torch.float32"):
        FORMS[form](q * 1e20, k * 1e20, v, causal)
    assert FORMS[form](q.double() * 1e20, k.double() * 1e20, v.double(), causal).isfinite().all()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("form", list(FORMS))
def test_16_bit_linear_attention_is_summed_in_float32(form, dtype, causal):
    """In float16 the normaliser phi(q) . sum phi(k) of 4096 keys passes 65504: every output
    was 0 (x / inf)."""
    generator = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 4096, 8, generator=generator).to(dtype).unbind(0)
    v = torch.randn(1, 4096, 4, generator=generator).to(dtype)
    ours = FORMS[form](q, k, v, causal)
    exact = FORMS[form](q.double(), k.double(), v.double(), causal)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours.double(), exact, rtol=0, atol=2 * torch.finfo(dtype).eps)


@pytest.mark.parametrize(
    ("shapes", "causal", "words"),
    [
        (((4, 3), (4, 2), (4, 5)), False, "the same leading axes"),
        (((4, 3), (5, 3), (4, 5)), False, "the same leading axes"),
        (((4, 3), (6, 3), (6, 5)), True, "as many queries as keys"),
        (((3,), (3,), (3,)), False, "(..., n, size)"),
        (((4, 0), (4, 0), (4, 5)), False, "a size of at least 1"),
        (((4, 3), (4, 3), (4, 0)), True, "a size of at least 1"),
    ],
)
def test_linear_attention_refuses_bad_shapes(shapes, causal, words):
    q, k, v = (torch.randn(shape) for shape in shapes)
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        linear_attention(q, k, v, causal)


def test_linear_attention_refuses_integers_mixed_dtypes_and_a_non_boolean_flag():
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="floating point"):
        linear_attention(x.long(), x.long(), x.long())
    with pytest.raises(ValueError, match="share one dtype"):
        linear_attention(x, x.double(), x)
    with pytest.raises(ValueError, match="causal must be True or False"):
        linear_attention(x, x, x, causal="yes")


# ---------------------------------------------------------------------------------------------
# The explorers


def test_rope_explorer_scores_do_not_move_with_a_shift_but_the_additive_ones_do():
    explorer = RopeExplorer(shift=0)
    assert explorer.state["rope_change"] == 0 and explorer.state["additive_change"] == 0
    first_image = bytes(explorer.image.value)
    for shift in (10, 500, 1000):
        explorer.controls["shift"].value = shift
        assert explorer.state["rope_change"] < 1e-9
        assert explorer.state["additive_change"] > 0.5
    assert bytes(explorer.image.value) != first_image
    explorer.controls["base"].value = 100.0
    wavelengths = explorer.state["wavelengths"]
    assert wavelengths[0] == pytest.approx(2 * math.pi)
    assert wavelengths[-1] == pytest.approx(2 * math.pi * 100 ** (14 / 16))


def test_rope_explorer_scores_are_those_of_apply_rope():
    explorer = RopeExplorer(shift=30, base=10000.0)
    query = apply_rope(explorer.query, torch.tensor([30 + 32]))
    keys = apply_rope(explorer.key.expand(64, -1), torch.arange(30, 94))
    torch.testing.assert_close(explorer.state["rope"], (query @ keys.T)[0])
    with pytest.raises(ValueError, match="must be even"):
        RopeExplorer(d=5)


def test_pattern_explorer_counts_what_it_draws():
    explorer = SparsePatternExplorer(pattern="sliding window", radius=2, dilation=1)
    mask = explorer.state["mask"]
    assert torch.equal(mask, local_mask(64, 2))
    assert explorer.state["entries"] == fraction_computed(mask)
    assert explorer.state["tiled"] >= explorer.state["entries"]
    explorer.controls["causal"].value = True
    assert not explorer.state["mask"].triu(1).any()
    explorer.controls["dilation"].value = 3
    assert torch.equal(explorer.state["mask"], dilated_mask(64, 2, 3) & causal_mask(64))
    explorer.controls["pattern"].value = "block-sparse"
    assert explorer.controls["radius"].disabled and explorer.controls["dilation"].disabled
    assert torch.equal(explorer.state["mask"], block_sparse_mask(64, 8) & causal_mask(64))
    assert explorer.state["tiled"] == explorer.state["tiles"].float().mean().item()
    explorer.controls["pattern"].value = "window + global"
    assert not explorer.controls["radius"].disabled
    assert explorer.state["mask"][:, 0].all()


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: RopeExplorer(shift=-5), "shift must be a whole number >= 0"),
        (lambda: RopeExplorer(shift=2000), "shift must be at most 1000"),
        (lambda: RopeExplorer(base=1.0), "base must be between 10 and 100000"),
        (lambda: RopeExplorer(base="x"), "base must be an int or a float, got 'x'"),
        (lambda: SparsePatternExplorer(pattern="dilated"), "pattern must be one of"),
        (lambda: SparsePatternExplorer(radius=100), "radius must be at most 16"),
        (lambda: SparsePatternExplorer(dilation=0), "dilation must be a whole number >= 1"),
        (lambda: SparsePatternExplorer(causal=None), "causal must be True or False"),
    ],
)
def test_the_explorers_refuse_settings_their_sliders_cannot_show(make, words):
    with pytest.raises(ValueError, match=words):
        make()
