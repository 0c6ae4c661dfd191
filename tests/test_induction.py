"""helpers.induction's measuring tools: the repeated sequences, the previous-token and induction
scores (their definition, values on hand-made patterns, gradients), and zeroing heads (equal to
zeroing that slice of W_o by hand, nothing left behind)."""

import copy
import dataclasses
import itertools
import time
import warnings

import numpy as np
import pytest
import torch

from helpers.attention import merge_heads, split_heads
from helpers.gpt import GPT, GPTConfig
from helpers.induction import (
    MOST_SHUFFLED,
    MOST_VOCAB,
    MOST_WEIGHTS,
    distinct_ids,
    induction_score,
    logits_with_heads_zeroed,
    placed_repeats,
    previous_token_score,
    repeated_sequences,
    zeroed_heads,
)
from helpers.masks import causal_mask

CONFIG = GPTConfig(
    vocab_size=16,
    context_length=16,
    d_model=16,
    num_heads=2,
    num_layers=2,
    d_ff=32,
    attention_only=True,
)
D_HEAD = CONFIG.d_model // CONFIG.num_heads


def small_model(seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(CONFIG)
    with torch.no_grad():  # larger embeddings than GPT-2's 0.02, so that heads matter
        model.tokens.weight.normal_(std=1.0)
        model.positions.weight.normal_(std=1.0)
    return model.eval()


def causal_weights(*shape: int, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """Random attention weights (..., n, n): each row a softmax over keys 0..t."""
    n = shape[-1]
    scores = torch.randn(*shape, n, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    future = torch.ones(n, n, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(-1)


def ids_of(batch: int = 3, length: int = 6) -> torch.Tensor:
    return repeated_sequences(batch, length, CONFIG.vocab_size, torch.Generator().manual_seed(5))


# repeated_sequences


def test_repeated_sequences_are_a_block_and_its_copy():
    ids = repeated_sequences(4, 7, 10, torch.Generator().manual_seed(1))
    assert ids.shape == (4, 14) and ids.dtype == torch.int64
    torch.testing.assert_close(ids[:, 7:], ids[:, :7], rtol=0, atol=0)
    assert ids.min() >= 0 and ids.max() < 10


def test_repeated_sequences_draw_every_token_of_the_vocabulary():
    ids = repeated_sequences(200, 5, 8, torch.Generator().manual_seed(2))
    assert set(ids.unique().tolist()) == set(range(8))


def test_repeated_sequences_are_reproducible_with_a_generator():
    first = repeated_sequences(3, 5, 50, torch.Generator().manual_seed(7))
    again = repeated_sequences(3, 5, 50, torch.Generator().manual_seed(7))
    other = repeated_sequences(3, 5, 50, torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_repeated_sequences_use_the_global_generator_without_one():
    torch.manual_seed(3)
    first = repeated_sequences(2, 4, 30)
    torch.manual_seed(3)
    assert torch.equal(first, repeated_sequences(2, 4, 30))


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        ((0, 4, 10), ValueError, "batch must be a whole number >= 1, got 0"),
        ((2, 2.0, 10), ValueError, "length must be a whole number >= 1, got 2.0"),
        ((2, 0, 10), ValueError, "length must be a whole number >= 1, got 0"),
        ((2, 4, True), ValueError, "vocab_size must be a whole number"),
        ((2, 4, 10, 7), TypeError, "generator must be a torch.Generator or None, got 7"),
    ],
)
def test_repeated_sequences_refuse_bad_arguments(arguments, error, words):
    with pytest.raises(error, match=words.replace("(", r"\(").replace(".", r"\.")):
        repeated_sequences(*arguments)


# The scores: hand-made patterns


def previous_token_pattern(n: int) -> torch.Tensor:
    """Query 0 reads itself, every later query the token before it."""
    weights = torch.zeros(n, n)
    weights[0, 0] = 1.0
    weights[torch.arange(1, n), torch.arange(n - 1)] = 1.0
    return weights


def induction_pattern(length: int) -> torch.Tensor:
    """The first copy reads position 0; query t of the copy reads key t - length + 1."""
    n = 2 * length
    weights = torch.zeros(n, n)
    weights[:length, 0] = 1.0
    queries = torch.arange(length, n)
    weights[queries, queries - length + 1] = 1.0
    return weights


@pytest.mark.parametrize("n", [2, 3, 10])
def test_an_exact_previous_token_pattern_scores_one(n):
    assert previous_token_score(previous_token_pattern(n)).item() == 1.0


@pytest.mark.parametrize("length", [2, 3, 7])
def test_an_exact_induction_stripe_scores_one(length):
    assert induction_score(induction_pattern(length), length).item() == 1.0


def test_the_two_patterns_score_low_on_each_other():
    length = 6
    # of the 11 queries t >= 1 only query 1 reads its previous key (key 0, like the first copy)
    assert previous_token_score(induction_pattern(length)).item() == pytest.approx(1 / 11)
    # the previous-token pattern reads key t - 1, the stripe key t - 5: they never meet
    assert induction_score(previous_token_pattern(2 * length), length).item() == 0.0


def uniform_causal(n: int) -> torch.Tensor:
    return torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None]


def test_uniform_causal_weights_give_the_mean_of_one_over_t_plus_one():
    n = 8
    queries = torch.arange(1, n, dtype=torch.float64)  # query t spreads 1 / (t + 1) per key
    expected = (1 / (queries + 1)).mean()
    assert previous_token_score(uniform_causal(n)).item() == pytest.approx(expected.item())
    length = n // 2
    second_copy = torch.arange(length, n, dtype=torch.float64)
    expected = (1 / (second_copy + 1)).mean()
    assert induction_score(uniform_causal(n), length).item() == pytest.approx(expected.item())


def test_a_block_of_one_token_has_no_induction_score():
    """With length 1 the induction stripe is the diagonal: torch.eye(2) scored 1.0."""
    with pytest.raises(ValueError, match="length must be a whole number >= 2, got 1"):
        induction_score(torch.eye(2), 1)
    with pytest.raises(ValueError, match="length must be a whole number >= 2, got 1"):
        induction_score(uniform_causal(2), 1)


# The scores: the definition, shapes, dtype, gradients


def previous_by_loop(weights: torch.Tensor) -> torch.Tensor:
    n = weights.shape[-1]
    return sum(weights[..., t, t - 1] for t in range(1, n)) / (n - 1)


def induction_by_loop(weights: torch.Tensor, length: int) -> torch.Tensor:
    return sum(weights[..., t, t - length + 1] for t in range(length, 2 * length)) / length


@pytest.mark.parametrize("shape", [(6, 6), (3, 10, 10), (2, 4, 8, 8), (2, 1, 3, 4, 4)])
def test_the_scores_follow_their_definition_for_any_leading_dims(shape):
    weights = causal_weights(*shape[:-1], seed=len(shape))
    length = shape[-1] // 2
    assert previous_token_score(weights).shape == shape[:-2]
    assert induction_score(weights, length).shape == shape[:-2]
    torch.testing.assert_close(previous_token_score(weights), previous_by_loop(weights))
    torch.testing.assert_close(induction_score(weights, length), induction_by_loop(weights, length))


def test_the_scores_of_random_non_causal_weights_follow_their_definition():
    weights = torch.rand(3, 12, 12, generator=torch.Generator().manual_seed(4))
    weights = weights / weights.sum(-1, keepdim=True)  # every key of every row, summing to 1
    torch.testing.assert_close(previous_token_score(weights), previous_by_loop(weights))
    torch.testing.assert_close(induction_score(weights, 6), induction_by_loop(weights, 6))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_the_scores_keep_the_dtype(dtype):
    weights = causal_weights(2, 6, dtype=torch.float64).to(dtype)
    assert previous_token_score(weights).dtype == dtype
    assert induction_score(weights, 3).dtype == dtype


def test_gradients_flow_back_through_both_scores():
    weights = causal_weights(2, 3, 8, seed=9, dtype=torch.float64).requires_grad_()
    upstream = torch.randn(2, 3, dtype=torch.float64)
    (previous_token_score(weights) * upstream).sum().backward()
    expected = torch.zeros_like(weights)
    t = torch.arange(1, 8)
    expected[..., t, t - 1] = upstream[..., None] / 7
    torch.testing.assert_close(weights.grad, expected)
    weights.grad = None
    (induction_score(weights, 4) * upstream).sum().backward()
    expected = torch.zeros_like(weights)
    t = torch.arange(4, 8)
    expected[..., t, t - 3] = upstream[..., None] / 4
    torch.testing.assert_close(weights.grad, expected)


def test_the_scores_leave_the_weights_as_they_were():
    weights = causal_weights(2, 8)
    before = weights.clone()
    previous_token_score(weights), induction_score(weights, 4)
    assert torch.equal(weights, before)


def test_the_scores_of_a_model_attention_map_have_one_value_per_head():
    model = small_model()
    model(ids_of(3, 6))
    maps = model.attention_maps()
    assert induction_score(maps[1], 6).shape == (3, CONFIG.num_heads)
    assert previous_token_score(maps[0]).shape == (3, CONFIG.num_heads)


# The scores: bad inputs


@pytest.mark.parametrize(
    ("weights", "words"),
    [
        ([[1.0, 0.0], [0.5, 0.5]], "weights must be a torch.Tensor (..., n, n), got list"),
        (torch.ones(2, 2).numpy(), "got a numpy array: convert it with torch.from_numpy"),
        (torch.ones(2, 2, dtype=torch.int64), "floating-point attention weights (..., n, n), got "),
        (torch.ones(4), "must be (..., n, n), one row of key weights per query, got shape (4,)"),
        (torch.ones(3, 4, 6), "got shape (3, 4, 6)"),
        (
            torch.tensor([[1.0, float("nan")], [0.5, 0.5]]),
            "weights hold NaN (first at index (0, 1))",
        ),
        (torch.ones(3, 1, 1), "n >= 2 positions (the first has no previous token), got n = 1"),
    ],
)
def test_previous_token_score_refuses_bad_weights(weights, words):
    with pytest.raises(ValueError) as error:
        previous_token_score(weights)
    assert words in str(error.value)


@pytest.mark.parametrize(
    ("weights", "length", "error", "words"),
    [
        (torch.ones(6, 6) / 6, 2, ValueError, "n = 6 positions, so a block and its copy right"),
        (torch.ones(5, 5) / 5, 2, ValueError, "have length n / 2 = 2.5, got length 2"),
        (torch.ones(4, 4) / 4, 2.0, ValueError, "length must be a whole number >= 2, got 2.0"),
        (torch.ones(4, 4) / 4, 0, ValueError, "length must be a whole number >= 2, got 0"),
        (torch.ones(4, 4, dtype=torch.bool), 2, ValueError, "got torch.bool"),
        (torch.full((2, 2), float("nan")), 1, ValueError, "weights hold NaN"),
        ("weights", 2, ValueError, "weights must be a torch.Tensor (..., n, n), got str"),
    ],
)
def test_induction_score_refuses_bad_arguments(weights, length, error, words):
    with pytest.raises(error) as raised:
        induction_score(weights, length)
    assert words in str(raised.value)


# Zeroing heads


def logits_with_W_o_columns_zeroed(model: GPT, ids, pairs) -> torch.Tensor:
    """The same ablation by hand, on a copy: W_o's input columns of each head set to zero."""
    ablated = copy.deepcopy(model)
    with torch.no_grad():
        for layer, head in pairs:
            W_o = ablated.blocks[layer].attention.W_o
            W_o.weight[:, head * D_HEAD : (head + 1) * D_HEAD] = 0.0
        return ablated(ids)


def logits_by_hand(model: GPT, ids, layer: int, head: int) -> torch.Tensor:
    """The forward pass written out with the model's own modules, the head's slice of the
    merged heads set to zero before W_o."""
    steps = ids.shape[1]
    x = model.tokens(ids) + model.positions(torch.arange(steps))
    for index, block in enumerate(model.blocks):
        attention = block.attention
        h = block.attention_residual.norm(x)
        q, k, v = (
            split_heads(W(h), CONFIG.num_heads)
            for W in (attention.W_q, attention.W_k, attention.W_v)
        )
        heads = attention.attention(q, k, v, mask=causal_mask(steps))  # (B, heads, T, d_head)
        if index == layer:
            heads = heads.clone()
            heads[:, head] = 0.0
        x = x + attention.W_o(merge_heads(heads))
    return model.output(model.norm(x))


@pytest.mark.parametrize(("layer", "head"), [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_zeroing_a_head_equals_zeroing_its_slice_by_hand(layer, head):
    model, ids = small_model(), ids_of()
    with torch.no_grad():
        expected = logits_by_hand(model, ids, layer, head)
        assert not torch.allclose(expected, model(ids), atol=1e-3)  # the head matters here
    got = logits_with_heads_zeroed(model, ids, [(layer, head)])
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got, logits_with_W_o_columns_zeroed(model, ids, [(layer, head)]))


def test_zeroing_several_heads_at_once_equals_zeroing_their_slices():
    model, ids = small_model(1), ids_of()
    pairs = [(0, 1), (1, 0), (1, 1)]
    got = logits_with_heads_zeroed(model, ids, iter(pairs))
    torch.testing.assert_close(got, logits_with_W_o_columns_zeroed(model, ids, pairs))


def merged_heads_seen_by_W_o(model: GPT, ids, layer: int, heads) -> torch.Tensor:
    """What W_o of `layer` reads, recorded by a pre-hook that runs after zeroed_heads' own."""
    seen = []
    with zeroed_heads(model, heads), torch.no_grad():
        W_o = model.blocks[layer].attention.W_o
        handle = W_o.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]))
        try:
            model(ids)
        finally:
            handle.remove()
    return seen[0]  # (B, T, d_model)


def test_zeroing_sets_the_head_columns_of_W_o_input_to_zero_and_leaves_the_rest():
    model, ids = small_model(), ids_of(2, 3)
    plain = merged_heads_seen_by_W_o(model, ids, 1, [])
    zeroed = merged_heads_seen_by_W_o(model, ids, 1, [(1, 1)])
    assert plain[..., D_HEAD:].abs().min() > 0
    assert torch.equal(zeroed[..., D_HEAD:], torch.zeros_like(zeroed[..., D_HEAD:]))
    assert torch.equal(zeroed[..., :D_HEAD], plain[..., :D_HEAD])


def test_zeroing_every_head_of_a_layer_keeps_the_bias_of_W_o():
    model, ids = small_model(), ids_of(1, 4)
    attention = model.blocks[0].attention
    seen = []
    handle = attention.W_o.register_forward_hook(lambda module, i, output: seen.append(output))
    with zeroed_heads(model, [(0, 0), (0, 1)]), torch.no_grad():
        model(ids)
    handle.remove()
    torch.testing.assert_close(seen[0], attention.W_o.bias.detach().expand_as(seen[0]))


def test_zeroing_no_head_changes_nothing():
    model, ids = small_model(), ids_of()
    with torch.no_grad():
        expected = model(ids)
    assert torch.equal(logits_with_heads_zeroed(model, ids, []), expected)
    with zeroed_heads(model, ()), torch.no_grad():
        assert torch.equal(model(ids), expected)


def hook_counts(model: GPT) -> list[int]:
    return [
        len(module._forward_pre_hooks) + len(module._forward_hooks) for module in model.modules()
    ]


def test_the_hooks_are_gone_after_the_block():
    model, ids = small_model(), ids_of()
    before, weights = hook_counts(model), copy.deepcopy(model.state_dict())
    with zeroed_heads(model, [(0, 1), (1, 0)]) as ablated:
        assert ablated is model and sum(hook_counts(model)) == 2  # one per layer
        model(ids)
    assert hook_counts(model) == before
    with torch.no_grad():
        assert torch.equal(model(ids), copy.deepcopy(model)(ids))
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name


def test_the_hooks_are_gone_after_an_exception_in_the_block():
    model = small_model()
    before = hook_counts(model)
    with pytest.raises(KeyError), zeroed_heads(model, [(0, 0)]):
        raise KeyError("inside")
    assert hook_counts(model) == before


def test_logits_with_heads_zeroed_restores_the_mode_and_records_no_graph():
    model, ids = small_model(), ids_of()
    model.train()
    logits = logits_with_heads_zeroed(model, ids, [(0, 0)])
    assert model.training and not logits.requires_grad
    assert logits.shape == (3, 12, CONFIG.vocab_size)
    model.eval()
    logits_with_heads_zeroed(model, ids, [(0, 0)])
    assert not model.training


def test_logits_with_heads_zeroed_runs_in_eval_mode():
    model = GPT(dataclasses.replace(CONFIG, dropout=0.5)).train()
    ids = ids_of()
    first = logits_with_heads_zeroed(model, ids, [(1, 1)])
    assert torch.equal(first, logits_with_heads_zeroed(model, ids, [(1, 1)]))  # no dropout


@pytest.mark.parametrize(
    ("model", "heads", "error", "words"),
    [
        ("model", [(0, 0)], TypeError, "model must be a GPT, got str"),
        (None, 3, TypeError, "heads must be an iterable of (layer, head) pairs such as [(0, 1)]"),
        (None, "01", TypeError, "heads must be an iterable of (layer, head) pairs"),
        (None, (0, 1), ValueError, "got the item 0 (for one head write [(layer, head)])"),
        (None, [(0, 1, 2)], ValueError, "(layer, head) pairs such as [(0, 1)], got the item"),
        (None, [(2, 0)], ValueError, "layer 2 is out of range: the model has 2 layers, 0..1"),
        (None, [(0, 2)], ValueError, "head 2 is out of range: each layer has 2 heads, 0..1"),
        (None, [(-1, 0)], ValueError, "layer must be a whole number >= 0, got -1"),
        (None, [(0, 1.0)], ValueError, "head must be a whole number >= 0, got 1.0"),
    ],
)
def test_zeroed_heads_refuses_bad_arguments_before_registering_anything(model, heads, error, words):
    real = small_model()
    before = hook_counts(real)
    with pytest.raises(error) as raised, zeroed_heads(real if model is None else model, heads):
        pass
    assert words in str(raised.value)
    assert hook_counts(real) == before


def test_zeroed_heads_refuses_bad_arguments_at_the_call_before_the_with_block():
    with pytest.raises(ValueError, match="head 7 is out of range"):
        zeroed_heads(small_model(), [(0, 7)])


def test_a_context_manager_never_entered_registers_nothing():
    model = small_model()
    before = hook_counts(model)
    zeroed_heads(model, [(0, 0)])
    assert hook_counts(model) == before


def test_a_bad_pair_after_good_ones_registers_nothing():
    model = small_model()
    before = hook_counts(model)
    with (
        pytest.raises(ValueError, match="layer 5 is out of range"),
        zeroed_heads(model, [(0, 0), (1, 1), (5, 0)]),
    ):
        pass
    assert hook_counts(model) == before


def test_logits_with_heads_zeroed_refuses_bad_ids_and_leaves_the_model_as_it_was():
    model = small_model().train()
    before = hook_counts(model)
    with pytest.raises(ValueError, match="outside the vocabulary 0..15"):
        logits_with_heads_zeroed(model, torch.tensor([[3, 16]]), [(0, 0)])
    with pytest.raises(ValueError, match="do not fit in the context of 16"):
        logits_with_heads_zeroed(model, torch.zeros(1, 17, dtype=torch.int64), [(0, 0)])
    assert hook_counts(model) == before and model.training


# Regressions from a hostile pass


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ((2, 3, 2**63), "vocab_size must be at most 2^63 - 1 (int64 ids), got 9223372036854775808"),
        ((2**63, 3, 5), "would allocate 664082786653543858176 bytes at its peak, more than"),
        ((10**7, 10**7, 5), "more than 2^31 (2 GiB): batch 10000000, length 10000000"),
        ((2**30, 1, 5), "repeated_sequences would allocate 25769803776 bytes at its peak"),
    ],
    ids=["vocabulary", "2^63 sequences", "10^7 by 10^7", "2^30 sequences"],
)
def test_repeated_sequences_refuse_sizes_torch_cannot_hold(arguments, words):
    with pytest.raises(ValueError) as raised:
        repeated_sequences(*arguments)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (float("inf"), "weights hold inf (first at index (1, 0))"),
        (float("-inf"), "weights hold -inf (first at index (1, 0))"),
    ],
)
def test_both_scores_refuse_infinite_weights(value, words):
    weights = causal_weights(4)  # (4, 4)
    weights[1, 0] = value
    for score in (previous_token_score, lambda w: induction_score(w, 2)):
        with pytest.raises(ValueError) as raised:
            score(weights)
        assert words in str(raised.value) and "attention weights are finite" in str(raised.value)


@pytest.mark.parametrize(
    ("weights", "words"),
    [
        (torch.empty(2, 4, 4, device="meta"), "ordinary dense tensor, got one on the meta device"),
        (causal_weights(2, 4).to_sparse(), "ordinary dense tensor, got one torch.sparse_coo"),
        ([causal_weights(4), causal_weights(4, seed=1)], "ordinary dense tensor, got one nested"),
        (torch.eye(4).to(torch.float8_e4m3fn), "got torch.float8_e4m3fn, a storage format"),
        (torch.eye(4).to(torch.float8_e5m2), "got torch.float8_e5m2, a storage format"),
    ],
    ids=["meta", "sparse", "nested", "float8_e4m3fn", "float8_e5m2"],
)
def test_both_scores_refuse_tensors_without_ordinary_values(weights, words):
    """float8 ("lt_cpu" not implemented) and nested tensors ("NestedTensorImpl doesn't support
    sizes") reached torch."""
    if isinstance(weights, list):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nested tensors are a prototype, torch warns
            weights = torch.nested.nested_tensor(weights)
    for score in (previous_token_score, lambda w: induction_score(w, 2)):
        with pytest.raises(ValueError) as raised:
            score(weights)
        assert str(raised.value).startswith("weights must be ")
        assert words in str(raised.value)


def _not_attention_weights() -> dict:
    """Numbers that cannot be attention weights, each of which scored without a word before."""
    weights = causal_weights(2, 6)  # (2, 6, 6)
    return {
        "raw scores of 5.0": (torch.full((6, 6), 5.0), "each in 0..1, got 5.0 at index (0, 0)"),
        "raw random scores": (
            torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(1)),
            "raw scores become weights through a softmax over the keys",
        ),
        "negative weights": (weights - 0.1, "each in 0..1, got -0.1"),
        "weights x10": (weights * 10, "each in 0..1, got 10.0"),
        "weights x0.5": (weights * 0.5, "but row (0, 0) sums to 0.5"),
        "weights x1.01": (weights * 1.01, "each in 0..1, got 1.0"),
        "weights x0.99": (weights * 0.99, "but row (0, 0) sums to 0.99"),
        "transposed: keys on the rows": (
            weights.transpose(-1, -2),
            "are the keys on the last axis, and the weights taken before dropout?",
        ),
        "log-probabilities": (weights.log().clamp(min=-30), "each in 0..1, got -"),
        "float16 raw scores": (
            torch.full((6, 6), 5.0, dtype=torch.float16),
            "each in 0..1, got 5.0",
        ),
        "float64 weights x3": (causal_weights(6, dtype=torch.float64) * 3, "each in 0..1, got 3.0"),
        "1e308": (torch.full((6, 6), 1e308, dtype=torch.float64), "each in 0..1, got 1e+308"),
        "a row of 1.5 and -0.5": (
            torch.tensor([[1.0, 0.0], [1.5, -0.5]]),
            "each in 0..1, got 1.5 at index (1, 0)",
        ),
    }


@pytest.mark.parametrize("case", list(_not_attention_weights()))
def test_both_scores_refuse_numbers_that_cannot_be_attention_weights(case):
    weights, words = _not_attention_weights()[case]
    for score in (previous_token_score, lambda w: induction_score(w, w.shape[-1] // 2)):
        with pytest.raises(ValueError) as raised:
            score(weights)
        assert "weights must be attention weights" in str(raised.value)
        assert words in str(raised.value), str(raised.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_both_scores_accept_a_softmax_rounded_to_any_floating_dtype(dtype):
    weights = causal_weights(3, 2, 8, seed=11, dtype=torch.float64)
    rounded = weights.to(dtype)
    torch.testing.assert_close(
        previous_token_score(rounded).double(), previous_by_loop(weights), atol=1e-2, rtol=0
    )
    torch.testing.assert_close(
        induction_score(rounded, 4).double(), induction_by_loop(weights, 4), atol=1e-2, rtol=0
    )
    softmax_in_dtype = (
        torch.randn(4, 8, 8, dtype=dtype)
        .masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
        .softmax(-1)
    )
    assert previous_token_score(softmax_in_dtype).shape == (4,)


def test_a_query_with_no_key_allowed_has_a_row_of_zeros_and_is_scored():
    weights = causal_weights(6)
    weights[3] = 0.0  # what masked_softmax returns for a fully masked row
    torch.testing.assert_close(previous_token_score(weights), previous_by_loop(weights))
    torch.testing.assert_close(induction_score(weights, 3), induction_by_loop(weights, 3))


@pytest.mark.parametrize(
    "heads",
    [torch.tensor([[1, 0], [0, 1]]), torch.tensor([1, 0]).unsqueeze(0), [torch.tensor([1, 0])]],
)
def test_heads_may_be_given_as_rows_of_a_tensor_or_an_array(heads):
    model, ids = small_model(), ids_of()
    listed = [tuple(int(x) for x in row) for row in heads]
    expected = logits_with_heads_zeroed(model, ids, listed)
    assert torch.equal(logits_with_heads_zeroed(model, ids, heads), expected)
    as_array = [row.numpy() for row in heads]
    assert torch.equal(logits_with_heads_zeroed(model, ids, as_array), expected)


def test_a_float_tensor_of_pairs_is_refused_by_its_layer():
    with pytest.raises(ValueError, match="layer must be a whole number >= 0, got tensor\\(0.\\)"):
        zeroed_heads(small_model(), torch.tensor([[0.0, 1.0]]))


def test_zeroed_heads_can_be_entered_again_after_it_was_left():
    model, ids = small_model(), ids_of()
    before = hook_counts(model)
    ablation = zeroed_heads(model, [(0, 1)])
    expected = logits_with_heads_zeroed(model, ids, [(0, 1)])
    for _ in range(2):
        with ablation, torch.no_grad():
            assert torch.equal(model(ids), expected)
        assert hook_counts(model) == before
    with ablation, ablation, torch.no_grad():  # nested: zeroing twice is zeroing once
        assert torch.equal(model(ids), expected)
    assert hook_counts(model) == before


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_logits_with_heads_zeroed_refuses_a_model_with_non_finite_weights(value):
    model = small_model()
    with torch.no_grad():
        model.blocks[1].attention.W_k.weight[0, 0] = value
    before = hook_counts(model)
    with pytest.raises(ValueError) as raised:
        logits_with_heads_zeroed(model, ids_of(), [(0, 0)])
    assert str(raised.value) == (
        "the model's weight blocks.1.attention.W_k.weight holds NaN or inf: every output would be "
        "NaN"
    )
    assert hook_counts(model) == before


def test_logits_with_heads_zeroed_refuses_meta_tensors_by_name():
    with pytest.raises(ValueError, match="the model is on the meta device: its weights"):
        logits_with_heads_zeroed(small_model().to("meta"), ids_of(), [(0, 0)])
    meta_ids = torch.zeros(2, 4, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match="ids are on the meta device \\(no values\\)"):
        logits_with_heads_zeroed(small_model(), meta_ids, [(0, 0)])


def test_logits_with_heads_zeroed_checks_the_ids_before_registering_a_hook():
    model = small_model()
    registered = []
    model.blocks[0].attention.W_o.register_forward_pre_hook = registered.append
    with pytest.raises(ValueError, match="ids must hold integer token ids"):
        logits_with_heads_zeroed(model, torch.zeros(1, 4), [(0, 0)])
    assert registered == []


# After a hostile pass: numbers too large to print, sparse ids, logits that overflow, and
# torch's random numbers


HUGE = 10**5000  # more digits than Python prints


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        (
            (HUGE, 4, 10),
            "repeated_sequences would allocate an int too large to print bytes at its peak",
        ),
        ((2, HUGE, 10), "batch 2, length an int too large to print"),
        ((2, 4, HUGE), "vocab_size must be at most 2^63 - 1 (int64 ids), got an int too large"),
        ((-HUGE, 4, 10), "batch must be a whole number >= 1, got an int too large to print"),
        ((2, -HUGE, 10), "length must be a whole number >= 1, got an int too large to print"),
    ],
    ids=["batch", "length", "vocab_size", "-batch", "-length"],
)
def test_repeated_sequences_name_a_number_too_large_to_print(arguments, words):
    with pytest.raises(ValueError) as raised:
        repeated_sequences(*arguments)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("length", "words"),
    [
        (HUGE, "have length n / 2 = 3, got length an int too large to print"),
        (-HUGE, "length must be a whole number >= 2, got an int too large to print"),
    ],
    ids=["huge", "-huge"],
)
def test_induction_score_names_a_length_too_large_to_print(length, words):
    with pytest.raises(ValueError) as raised:
        induction_score(causal_weights(6), length)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    ("heads", "words"),
    [
        ([(HUGE, 0)], "layer an int too large to print is out of range: the model has 2 layers"),
        ([(0, HUGE)], "head an int too large to print is out of range: each layer has 2 heads"),
        ([(0, -HUGE)], "head must be a whole number >= 0, got an int too large to print"),
    ],
    ids=["layer", "head", "-head"],
)
def test_heads_too_large_to_print_are_named(heads, words):
    with pytest.raises(ValueError) as raised:
        logits_with_heads_zeroed(small_model(), ids_of(), heads)
    assert words in str(raised.value)


def test_sparse_ids_are_refused_by_name():
    with pytest.raises(
        ValueError, match="ids must be an ordinary dense tensor, got one torch.sparse"
    ):
        logits_with_heads_zeroed(small_model(), ids_of().to_sparse(), [])


def test_logits_that_overflow_are_refused_instead_of_returned():
    model, ids = small_model(), ids_of()
    with torch.no_grad():
        model.tokens.weight[ids[0, 0]] = 1e30  # finite, but its logits are not in float32
    with pytest.raises(ValueError) as raised:
        logits_with_heads_zeroed(model, ids, [(0, 1)])
    assert "the logits overflow to inf or NaN in torch.float32" in str(raised.value)
    assert "(up to 1e+30, in tokens.weight)" in str(raised.value)
    assert model.training is False and not any(
        module._forward_pre_hooks for module in model.modules()
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda model, ids, weights: previous_token_score(weights),
        lambda model, ids, weights: induction_score(weights, 3),
        lambda model, ids, weights: logits_with_heads_zeroed(model, ids, [(0, 1)]),
        lambda model, ids, weights: zeroed_heads(model, [(1, 0)]).__enter__(),
    ],
    ids=["previous_token_score", "induction_score", "logits_with_heads_zeroed", "zeroed_heads"],
)
def test_the_measuring_tools_leave_torchs_random_numbers_alone(call):
    model, ids, weights = small_model(), ids_of(), causal_weights(2, 6)
    before = torch.random.get_rng_state()
    call(model, ids, weights)
    assert torch.equal(torch.random.get_rng_state(), before)


def test_the_peak_of_repeated_sequences_is_what_its_bound_counts():
    """The bound counts the block and the block with its copy, 24 bytes per block position."""
    from helpers.induction import MOST_BYTES

    batch = MOST_BYTES // 24
    with pytest.raises(ValueError, match="at its peak"):
        repeated_sequences(batch + 1, 1, 5)


def test_zeroed_heads_names_a_zero_dimensional_tensor():
    """torch.tensor(1) raised torch's 'iteration over a 0-d tensor'."""
    for heads in (torch.tensor(1), np.int64(1), np.array(1)):
        with pytest.raises(TypeError, match="heads must be an iterable of \\(layer, head\\) pairs"):
            zeroed_heads(small_model(), heads)


# Regressions from a fifth hostile pass


@pytest.mark.parametrize(
    "heads",
    [itertools.repeat((0, 1)), itertools.cycle([(0, 1), (1, 0)]), [(0, 0)] * 5],
    ids=["repeat", "cycle", "a list longer than the heads"],
)
def test_zeroed_heads_refuses_more_pairs_than_the_model_has_heads(heads):
    """An endless iterator of pairs was read forever."""
    with pytest.raises(ValueError, match=r"twice: name each \(layer, head\) at most once"):
        zeroed_heads(small_model(), heads)


def test_zeroed_heads_names_a_block_left_without_being_entered():
    """IndexError: pop from empty list."""
    with pytest.raises(RuntimeError, match="zeroed_heads was left without being entered"):
        zeroed_heads(small_model(), []).__exit__(None, None, None)


def test_the_scores_of_an_expanded_view_allocate_nothing_as_large_as_the_weights():
    """The weight checks made (n, n) masks and a float64 copy: 1.6 GB for a (20000, 20000)
    view of 20000 numbers."""
    n = 2000
    weights = torch.full((1, n), 1.0 / n).expand(n, n)  # rows of 1/n: n numbers held
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True
    ) as run:
        previous_token_score(weights)
        induction_score(weights, n // 2)
    largest = max(event.cpu_memory_usage for event in run.events())
    assert 0 < largest < n * n  # less than a boolean mask of the weights


def test_distinct_ids_hold_no_token_twice_in_a_row_and_cover_the_vocabulary():
    ids = distinct_ids(200, 48, 64, torch.Generator().manual_seed(0))
    assert ids.shape == (200, 48) and ids.dtype == torch.int64
    assert all(len(set(row)) == 48 for row in ids.tolist())
    assert set(ids.flatten().tolist()) == set(range(64))
    assert torch.equal(ids, distinct_ids(200, 48, 64, torch.Generator().manual_seed(0)))


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ((2, 65, 64), "n must be at most vocab_size: .*got n 65, vocab_size 64"),
        ((2, 10**5000, 64), "got n an int too large to print, vocab_size 64"),
        ((0, 4, 8), "batch"),
        ((2**20, 4, 2**20), "distinct_ids draws each row's different tokens"),
        ((2, 4, 8, "seed"), "generator must be a torch.Generator or None"),
    ],
)
def test_distinct_ids_refuse_bad_arguments_by_name(arguments, words):
    with pytest.raises((TypeError, ValueError), match=words):
        distinct_ids(*arguments)


@pytest.mark.parametrize(("start", "length"), [(0, 2), (5, 4), (40, 4), (0, 24), (13, 7)])
def test_placed_repeats_copy_the_block_right_after_itself_and_nothing_else(start, length):
    ids = placed_repeats(16, 48, start, length, 512, torch.Generator().manual_seed(1))
    block, copy_ = ids[:, start : start + length], ids[:, start + length : start + 2 * length]
    assert torch.equal(block, copy_)
    for row in ids.tolist():
        assert len(set(row)) == 48 - length  # the copy is the only repeat


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ((2, 48, 41, 4, 512), "a block of 4 at start 41 and its copy end at position 48"),
        ((2, 48, -1, 4, 512), "start"),
        ((2, 48, 0, 1, 512), "length"),
        ((2, 48, 0, 4, 40), "n must be at most vocab_size: .*got n 48, vocab_size 40"),
    ],
)
def test_placed_repeats_refuse_a_placement_that_does_not_fit(arguments, words):
    with pytest.raises(ValueError, match=words):
        placed_repeats(*arguments)


@pytest.mark.parametrize(("start", "length", "n"), [(0, 2, 4), (3, 2, 9), (5, 4, 13), (0, 3, 10)])
def test_an_exact_induction_stripe_at_a_start_scores_one(start, length, n):
    weights = torch.zeros(n, n)
    weights[torch.arange(n), torch.arange(n)] = 1.0  # attend to itself where not in the copy
    queries = torch.arange(start + length, start + 2 * length)
    weights[queries] = 0.0
    weights[queries, queries - length + 1] = 1.0
    assert induction_score(weights, length, start=start) == 1.0
    if start:
        shifted = induction_score(weights, length, start=start - 1)
        assert shifted < 1.0


def test_induction_score_at_start_zero_of_a_block_and_its_copy_is_the_plain_score():
    weights = torch.rand(3, 10, 10).tril().softmax(-1)
    weights = weights * torch.ones(10, 10).tril()
    weights = weights / weights.sum(-1, keepdim=True)
    assert torch.equal(induction_score(weights, 5, start=0), induction_score(weights, 5))


def test_induction_score_refuses_a_start_where_the_copy_does_not_fit():
    weights = torch.eye(10)
    with pytest.raises(ValueError, match="at start 3 and its copy end at position 12"):
        induction_score(weights, 5, start=3)


def test_logits_with_heads_zeroed_leaves_every_module_in_its_own_mode():
    model = small_model()
    model.train()
    model.blocks[0].eval()  # a mixed state: model.train(was_training) would flatten it
    logits_with_heads_zeroed(model, ids_of(), [(0, 0)])
    assert model.training and not model.blocks[0].training and model.blocks[1].training


# Regressions from a sixth hostile pass


def _without_W_o(model: GPT) -> GPT:
    model.blocks[0].attention.W_o = torch.nn.Identity()
    return model


def _without_layer_1(model: GPT) -> GPT:
    del model.blocks[1]
    return model


@pytest.mark.parametrize(
    ("swap", "heads", "words"),
    [
        (
            _without_W_o,
            [(0, 0)],
            "the model's blocks.0.attention.W_o is a Identity, where a GPT has a Linear: "
            "zeroed_heads silences heads",
        ),
        (_without_layer_1, [(1, 0)], "the model has no blocks.1, which a GPT of its config"),
    ],
    ids=["W_o replaced", "a layer deleted"],
)
def test_zeroing_heads_of_a_model_whose_modules_were_swapped_is_refused_by_name(swap, heads, words):
    """AttributeError ('Identity' object has no attribute 'weight') and IndexError from inside
    the hooks' registration."""
    model = swap(small_model())
    with pytest.raises(ValueError) as raised:
        logits_with_heads_zeroed(model, ids_of(), heads)
    assert words in str(raised.value), str(raised.value)
    assert hook_counts(model) == [0] * len(hook_counts(model))


@pytest.mark.parametrize("heads", [[(1, 0), (1, 0)], [(0, 1), (1, 1), (0, 1)]])
def test_zeroed_heads_refuses_a_head_named_twice(heads):
    """[(1, 0), (1, 0)] was taken while five pairs were told to name each head at most once."""
    with pytest.raises(ValueError, match=r"heads names \(\d, \d\) twice: name each"):
        zeroed_heads(small_model(), heads)


@pytest.mark.parametrize("factor", [0.95, 1.05])
def test_bfloat16_weights_off_by_five_percent_are_refused(factor):
    """A bfloat16 row summing to 0.95 or 1.05 was taken for attention weights: the tolerance
    was 8 eps, 0.0625 in bfloat16 (an eleventh hostile pass)."""
    weights = (torch.full((4, 4), 0.25) * factor).bfloat16()
    with pytest.raises(ValueError, match="summing to 1"):
        previous_token_score(weights)


# Regressions from a thirteenth hostile pass


def _timed(call):
    """call()'s result, or what it raised, and its seconds."""
    start = time.perf_counter()
    try:
        result = call()
    except ValueError as error:
        result = error
    return result, time.perf_counter() - start


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (
            lambda: placed_repeats(1, 48, 0, 2, 10**8, torch.Generator().manual_seed(0)),
            "placed_repeats draws each row's different tokens from a random order of the whole "
            "vocabulary, at most 2^20 = 1,048,576 tokens (vocab_size) and 2^23 = 8,388,608 in "
            "one call (batch x vocab_size), got batch 1, vocab_size 100000000",
        ),
        (
            lambda: distinct_ids(1, 5, 3 * 10**7),
            "distinct_ids draws each row's different tokens from a random order of the whole "
            "vocabulary, at most 2^20",
        ),
        (lambda: distinct_ids(1, 5, MOST_VOCAB + 1), "got batch 1, vocab_size 1048577"),
        (lambda: distinct_ids(MOST_SHUFFLED // 512 + 1, 5, 512), "got batch 16385, vocab_size 512"),
    ],
    ids=["placed_repeats 10^8", "distinct_ids 3 x 10^7", "2^20 + 1", "2^23 + 512 in all"],
)
def test_a_vocabulary_too_large_to_shuffle_is_refused_at_once(call, words):
    """placed_repeats(1, 48, 0, 2, 10**8) shuffled the whole vocabulary for 18 s and 1.2 GB to
    return 48 tokens; distinct_ids(1, 5, 3 * 10**7) 4 s."""
    raised, seconds = _timed(call)
    assert isinstance(raised, ValueError) and words in str(raised), raised
    assert seconds < 0.1


def test_the_largest_vocabulary_shuffled_draws_what_it_drew_before():
    """The limits admit what they name, drawn as before: the first n of a random order."""
    for batch, vocab_size in [(1, MOST_VOCAB), (MOST_SHUFFLED // 512, 512)]:
        ids = distinct_ids(batch, 5, vocab_size, torch.Generator().manual_seed(3))
        order = torch.rand(batch, vocab_size, generator=torch.Generator().manual_seed(3))
        assert torch.equal(ids, order.argsort(-1)[:, :5])


@pytest.mark.parametrize(
    "arguments",
    [
        (2**63, 10, 0, 3, 20),
        (10**5000, 10, 0, 3, 20),
        (2, 10, 0, 3, 2**63),
        (2, 10, 0, 3, 10**5000),
    ],
    ids=["batch 2^63", "batch 10^5000", "vocab_size 2^63", "vocab_size 10^5000"],
)
def test_placed_repeats_names_itself_when_its_sizes_are_refused(arguments):
    """placed_repeats(2**63, 10, 0, 3, 20) said 'distinct_ids would allocate ... bytes', a
    function the caller never called."""
    with pytest.raises(ValueError) as raised:
        placed_repeats(*arguments)
    assert str(raised.value).startswith("placed_repeats draws"), str(raised.value)


@pytest.mark.parametrize(
    "score", [previous_token_score, lambda weights: induction_score(weights, 20000)]
)
def test_weights_too_many_to_check_are_refused_even_in_a_view_of_one_number(score):
    """previous_token_score(torch.zeros(1, 1).expand(40000, 40000)) scanned 1.6 billion numbers
    for 16 s before it returned 0."""
    raised, seconds = _timed(lambda: score(torch.zeros(1, 1).expand(40000, 40000)))
    assert isinstance(raised, ValueError), raised
    assert str(raised).startswith(
        "weights hold 1,600,000,000 numbers (shape (40000, 40000)), more than the 2^26 = "
        "67,108,864 a score checks one by one"
    ), str(raised)
    assert seconds < 0.1


def test_the_most_weights_a_score_checks_are_scored():
    n = int(MOST_WEIGHTS**0.5)
    weights = torch.zeros(1, 1).expand(n, n)  # all-zero rows: queries with no key allowed
    assert previous_token_score(weights).item() == 0.0


# Regressions from a later hostile pass


def _config_edited_to_one_layer() -> GPT:
    model = copy.deepcopy(small_model())
    model.config = dataclasses.replace(CONFIG, num_layers=1)
    return model


@pytest.mark.parametrize(
    "call",
    [
        lambda model: logits_with_heads_zeroed(model, ids_of(), [(0, 0)]),
        lambda model: zeroed_heads(model, [(1, 0)]),
    ],
    ids=["logits_with_heads_zeroed", "zeroed_heads"],
)
def test_a_model_whose_config_was_edited_to_fewer_layers_is_refused_by_name(call):
    """A two-layer model with num_layers=1 in its config ran both blocks in
    logits_with_heads_zeroed, and zeroed_heads said layer 1 was out of range."""
    model = _config_edited_to_one_layer()
    with pytest.raises(ValueError) as raised:
        call(model)
    assert str(raised.value).startswith(
        "the model has blocks.1, which a GPT of its config (num_layers=1) lacks (was its config "
        "edited?): zeroed_heads silences heads"
    ), str(raised.value)
    assert hook_counts(model) == [0] * len(hook_counts(model))


@pytest.mark.parametrize(
    ("heads", "words"),
    [
        ([(1, 0)], "layer 1 is out of range: the model has 1 layer, 0..0"),
        ([(0, 1)], "head 1 is out of range: each layer has 1 head, 0..0"),
    ],
)
def test_a_pair_out_of_range_of_one_layer_or_one_head_reads_in_the_singular(heads, words):
    """'the model has 1 layers'."""
    model = GPT(dataclasses.replace(CONFIG, num_layers=1, num_heads=1))
    with pytest.raises(ValueError) as raised:
        zeroed_heads(model, heads)
    assert str(raised.value) == words
