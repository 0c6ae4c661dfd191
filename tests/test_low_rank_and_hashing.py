"""Chapter 11's last two rows of the cost table: Linformer's projected keys and values, and
Reformer's hashed buckets (LSH attention), each against exact attention and a plain loop."""

import math

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

from helpers.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from helpers.long_context import (
    PROJECTIONS,
    SAVED_LOW_RANK_MODELS,
    LowRankRecallModel,
    LowRankSelfAttention,
    RecallTask,
    Recipe,
    attention_costs,
    extrapolation_batches,
    linformer_attention,
    load_low_rank_models,
    local_mask,
    lsh_attention,
    lsh_buckets,
    lsh_pairs,
    recall_accuracy,
    train_low_rank_model,
    window_attention,
)
from helpers.masks import causal_mask


def exact_attention(queries, keys, values, allowed=None):
    scores = queries @ keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1) @ values


def lsh_by_loops(queries, values, buckets, chunk_size):
    """LSH attention one query at a time, from the rules as the docstring states them."""
    *leading, n, d = queries.shape
    buckets = buckets if buckets.dim() == queries.dim() else buckets[..., None, :]
    queries, values = queries.reshape(-1, n, d), values.reshape(-1, n, values.shape[-1])
    buckets = buckets.reshape(-1, buckets.shape[-2], n)
    chunks = n // chunk_size
    out = torch.zeros_like(values)
    for b in range(len(queries)):
        keys = queries[b] / queries[b].norm(dim=-1, keepdim=True)
        for i in range(n):
            masses, outputs = [], []
            for r in range(buckets.shape[1]):
                ids = buckets[b, r]
                rank = {
                    int(p): s for s, p in enumerate(sorted(range(n), key=lambda p: (ids[p], p)))
                }
                chunk_of = {p: rank[p] // chunk_size for p in range(n)}
                near = {chunk_of[i], (chunk_of[i] - 1) % chunks}
                found = [j for j in range(n) if j != i and ids[j] == ids[i] and chunk_of[j] in near]
                found = found or [i]
                met = torch.tensor(
                    [float((buckets[b, :, j] == buckets[b, :, i]).sum()) for j in found]
                )
                scores = keys[found] @ queries[b, i] / math.sqrt(d) - met.to(queries).log()
                masses.append(scores.logsumexp(0))
                outputs.append(torch.softmax(scores, 0) @ values[b, found])
            share = torch.softmax(torch.stack(masses), 0)
            out[b, i] = (share[:, None] * torch.stack(outputs)).sum(0)
    return out.reshape(*leading, n, -1)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    chunks=st.integers(1, 4),
    chunk_size=st.integers(1, 4),
    rounds=st.integers(1, 4),
    num_buckets=st.sampled_from([2, 4, 6]),
    batch=st.sampled_from([(), (2,), (2, 1)]),
)
def test_lsh_attention_equals_the_loop_over_queries(
    seed, chunks, chunk_size, rounds, num_buckets, batch
):
    generator = torch.Generator().manual_seed(seed)
    n = chunks * chunk_size
    queries = torch.randn(*batch, n, 3, generator=generator, dtype=torch.float64)
    values = torch.randn(*batch, n, 2, generator=generator, dtype=torch.float64)
    buckets = torch.stack(
        [lsh_buckets(queries, num_buckets, generator) for _ in range(rounds)], dim=-2
    )
    got = lsh_attention(queries, values, buckets, chunk_size)
    assert torch.allclose(got, lsh_by_loops(queries, values, buckets, chunk_size), atol=1e-12)


@pytest.mark.parametrize("chunk_size", [4, 8])
def test_one_bucket_in_two_chunks_is_exact_attention_without_the_query_itself(chunk_size):
    torch.manual_seed(0)
    queries, values = (
        torch.randn(2, 8, 4, dtype=torch.float64),
        torch.randn(2, 8, 3, dtype=torch.float64),
    )
    keys = queries / queries.norm(dim=-1, keepdim=True)
    others = ~torch.eye(8, dtype=torch.bool)
    expected = exact_attention(queries, keys, values, others)
    got = lsh_attention(queries, values, torch.zeros(2, 8, dtype=torch.int64), chunk_size)
    assert torch.allclose(got, expected, atol=1e-12)


def test_a_round_repeated_changes_nothing_and_a_query_alone_reads_itself():
    torch.manual_seed(1)
    queries, values = torch.randn(6, 4, dtype=torch.float64), torch.randn(6, 2, dtype=torch.float64)
    buckets = torch.tensor([0, 0, 1, 0, 2, 1])
    once = lsh_attention(queries, values, buckets, 3)
    assert torch.allclose(lsh_attention(queries, values, buckets.repeat(3, 1), 3), once, atol=1e-12)
    assert torch.allclose(once[4], values[4])  # alone in bucket 2: itself only


def test_lsh_attention_passes_gradients_and_leaves_its_inputs_alone():
    torch.manual_seed(2)
    queries = torch.randn(2, 8, 3, dtype=torch.float64, requires_grad=True)
    values = torch.randn(2, 8, 2, dtype=torch.float64, requires_grad=True)
    buckets = torch.stack([lsh_buckets(queries.detach(), 4) for _ in range(2)], dim=-2)
    kept = queries.detach().clone(), values.detach().clone(), buckets.clone()
    assert torch.autograd.gradcheck(lambda q, v: lsh_attention(q, v, buckets, 4), (queries, values))
    assert all(torch.equal(a, b) for a, b in zip(kept, (queries, values, buckets), strict=True))


def test_lsh_buckets_of_a_direction_and_its_multiples_agree():
    generator = torch.Generator().manual_seed(3)
    vectors = torch.randn(5, 7, 8, generator=generator)
    ids = lsh_buckets(
        torch.cat([vectors, 2.5 * vectors], dim=-2), 6, torch.Generator().manual_seed(4)
    )
    assert ids.shape == (5, 14) and ids.dtype == torch.int64
    assert ids.min() >= 0 and ids.max() < 6
    assert torch.equal(ids[:, :7], ids[:, 7:])
    again = lsh_buckets(vectors, 6, torch.Generator().manual_seed(4))
    assert torch.equal(again, ids[:, :7])
    assert torch.equal(lsh_buckets(vectors.double(), 6, torch.Generator().manual_seed(4)), again)


def test_nearer_vectors_share_a_bucket_more_often():
    generator = torch.Generator().manual_seed(5)
    base = torch.randn(2000, 16, generator=generator, dtype=torch.float64)
    near = base + 0.3 * torch.randn(2000, 16, generator=generator, dtype=torch.float64)
    far = torch.randn(2000, 16, generator=generator, dtype=torch.float64)
    shared = {}
    for name, other in (("near", near), ("far", far)):
        ids = lsh_buckets(torch.stack([base, other], dim=1), 8, torch.Generator().manual_seed(6))
        shared[name] = (ids[:, 0] == ids[:, 1]).double().mean().item()
    assert shared["near"] > 0.6 > 0.25 > shared["far"]


def test_linformer_with_identity_projections_is_exact_attention():
    torch.manual_seed(7)
    q, k, v = (torch.randn(2, 3, 10, size, dtype=torch.float64) for size in (4, 4, 5))
    identity = torch.eye(10, dtype=torch.float64)
    assert torch.allclose(
        linformer_attention(q, k, v, identity, identity), exact_attention(q, k, v), atol=1e-12
    )


def test_linformer_is_attention_over_the_projected_keys_and_values():
    torch.manual_seed(8)
    q, k, v = (torch.randn(12, size, dtype=torch.float64) for size in (4, 4, 3))
    E, F_ = torch.randn(5, 12, dtype=torch.float64), torch.randn(5, 12, dtype=torch.float64)
    assert torch.allclose(
        linformer_attention(q, k, v, E, F_), exact_attention(q, E @ k, F_ @ v), atol=1e-12
    )


def test_linformer_leaks_the_future_a_causal_mask_cannot_stop():
    torch.manual_seed(9)
    q, k, v = (torch.randn(8, 4, dtype=torch.float64) for _ in range(3))
    E, F_ = torch.randn(3, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64)
    changed_k, changed_v = k.clone(), v.clone()
    changed_k[-1], changed_v[-1] = 10.0, -10.0  # only the last token changes
    before, after = (
        linformer_attention(q, k, v, E, F_),
        linformer_attention(q, changed_k, changed_v, E, F_),
    )
    assert not torch.allclose(before[0], after[0])  # the first query reads the last token


def test_a_low_rank_layer_without_projection_is_exact_self_attention():
    torch.manual_seed(10)
    layer = LowRankSelfAttention(8, 2, 6).double()
    x = torch.randn(3, 6, 8, dtype=torch.float64)
    heads = [
        (w(x).unflatten(-1, (2, 4)).transpose(1, 2)) for w in (layer.W_q, layer.W_k, layer.W_v)
    ]
    expected = layer.W_o(exact_attention(*heads).transpose(1, 2).flatten(-2))
    assert torch.allclose(layer(x), expected, atol=1e-12)
    assert layer.attention_weights.shape == (3, 2, 6, 6)


def test_a_linformer_layer_takes_only_its_own_length():
    layer = LowRankSelfAttention(8, 2, 6, projected=3)
    assert layer(torch.randn(1, 6, 8)).shape == (1, 6, 8)
    assert layer.attention_weights.shape == (1, 2, 6, 3)
    with pytest.raises(ValueError, match="E and F project exactly 6 positions"):
        layer(torch.randn(1, 7, 8))
    model = LowRankRecallModel(16, 6, projected=3, d_model=8, num_heads=2)
    assert model(torch.randint(0, 16, (2, 6))).shape == (2, 6, 16)
    with pytest.raises(ValueError, match="exactly 6"):
        model(torch.randint(0, 16, (2, 5)))


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: LowRankSelfAttention(8, 2, 6, projected=7), "at most length"),
        (lambda: LowRankSelfAttention(8, 3, 6), "divisible by num_heads"),
        (lambda: LowRankSelfAttention(8, 2, 2**20, projected=2**9), "2^28"),
        (lambda: lsh_buckets(torch.randn(4, 3), 3), "must be even"),
        (lambda: lsh_buckets(torch.randn(4, 3), 0), ">= 2"),
        (lambda: lsh_buckets(torch.tensor([[1.0, float("nan")]]), 2), "NaN"),
        (lambda: lsh_buckets(torch.ones(4, 3, dtype=torch.int64), 2), "floating point"),
        (lambda: lsh_buckets(torch.randn(4, 3), 2, generator=0), "torch.Generator"),
        (
            lambda: lsh_attention(
                torch.randn(6, 3), torch.randn(6, 2), torch.zeros(6, dtype=torch.int64), 4
            ),
            "must divide n",
        ),
        (lambda: lsh_attention(torch.randn(6, 3), torch.randn(6, 2), torch.zeros(6), 3), "int64"),
        (
            lambda: lsh_attention(
                torch.randn(6, 3), torch.randn(6, 2), torch.zeros(5, dtype=torch.int64), 3
            ),
            "one round",
        ),
        (
            lambda: lsh_attention(
                torch.randn(6, 3), torch.randn(6, 2), -torch.ones(6, dtype=torch.int64), 3
            ),
            "ids 0",
        ),
        (
            lambda: lsh_attention(
                torch.zeros(6, 3), torch.randn(6, 2), torch.zeros(6, dtype=torch.int64), 3
            ),
            "no direction",
        ),
        (
            lambda: lsh_attention(
                torch.randn(6, 3), torch.randn(5, 2), torch.zeros(6, dtype=torch.int64), 3
            ),
            "same",
        ),
        (
            lambda: lsh_attention(
                torch.randn(6, 3), torch.randn(6, 2).double(), torch.zeros(6, dtype=torch.int64), 3
            ),
            "one dtype",
        ),
        (
            lambda: linformer_attention(
                *(torch.randn(6, 3),) * 3, torch.randn(2, 5), torch.randn(2, 5)
            ),
            "(k, n) with n = 6",
        ),
        (
            lambda: linformer_attention(
                *(torch.randn(6, 3),) * 3, torch.randn(2, 6), torch.randn(3, 6)
            ),
            "both be (k, n)",
        ),
        (
            lambda: linformer_attention(
                torch.randn(6, 3),
                torch.randn(6, 4),
                torch.randn(6, 3),
                torch.randn(2, 6),
                torch.randn(2, 6),
            ),
            "(..., n, d)",
        ),
    ],
)
def test_low_rank_and_hashing_refuse_what_they_cannot_use(call, words):
    with pytest.raises(ValueError) as refused:
        call()
    assert words in str(refused.value)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 19),
    radius=st.integers(0, 22),
    causal=st.booleans(),
)
def test_window_attention_equals_dense_attention_under_the_window_mask(seed, n, radius, causal):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (
        torch.randn(2, n, size, generator=generator, dtype=torch.float64, requires_grad=True)
        for size in (4, 4, 3)
    )
    allowed = local_mask(n, radius) & (causal_mask(n) if causal else True)
    expected = exact_attention(q, k, v, allowed)
    got = window_attention(q, k, v, radius, causal)
    assert torch.allclose(got, expected, atol=1e-12)
    upstream = torch.randn(expected.shape, generator=generator, dtype=torch.float64)
    for mine, theirs in zip(
        torch.autograd.grad(got, (q, k, v), upstream),
        torch.autograd.grad(expected, (q, k, v), upstream),
        strict=True,
    ):
        assert torch.allclose(mine, theirs, atol=1e-12)


def test_window_attention_scores_only_three_blocks_per_block():
    from torch.utils.flop_counter import FlopCounterMode

    def flops(n):
        q = torch.randn(1, n, 8)
        with FlopCounterMode(display=False) as counter:
            window_attention(q, q, q, 16)
        return counter.get_total_flops()

    assert flops(512) == 2 * flops(256) == 4 * flops(128)


def test_the_counted_costs_grow_as_the_table_says():
    small, large = attention_costs(512), attention_costs(1024)
    assert large["exact"]["flops"] == 4 * small["exact"]["flops"]
    assert large["exact"]["bytes"] == 4 * small["exact"]["bytes"]
    for kind in ("window", "linear", "Linformer", "LSH"):
        assert large[kind]["flops"] == 2 * small[kind]["flops"], kind
        assert 1.9 < large[kind]["bytes"] / small[kind]["bytes"] < 2.1, kind
    assert all(large[kind]["bytes"] < large["exact"]["bytes"] for kind in large if kind != "exact")


@pytest.mark.parametrize(
    ("sizes", "words"),
    [
        ({"n": 100}, "multiple of window"),
        ({"n": 64, "projected": 128}, "at least projected"),
        ({"n": 16384}, "2\\^26"),
        ({"n": 0}, "whole number >= 1"),
    ],
)
def test_the_cost_counts_refuse_sizes_they_cannot_count(sizes, words):
    with pytest.raises(ValueError, match=words):
        attention_costs(**sizes)


def test_the_saved_low_rank_models_lose_accuracy_as_k_shrinks():
    saved = load_low_rank_models()
    assert set(saved["models"]) == set(PROJECTIONS)
    tokens, answers = extrapolation_batches(saved["task"], (1,), num=256)[64]
    accuracy = {
        k: recall_accuracy(m, tokens, answers)["accuracy"] for k, m in saved["models"].items()
    }
    assert accuracy[None] > 0.9 and accuracy[32] > 0.9 and accuracy[4] < 0.8
    assert accuracy[32] > accuracy[16] > accuracy[8] > accuracy[4]


def test_a_low_rank_checkpoint_of_other_projections_is_refused(tmp_path):
    keys = ("projections", "weights", "recipe", "task", "loss", "seconds")
    saved = load_checkpoint(SAVED_LOW_RANK_MODELS, keys, "")
    save_checkpoint(tmp_path / "x.pt", {**saved, "projections": [None, 32]})
    with pytest.raises(CheckpointError, match="one model, loss and time for each of"):
        load_low_rank_models(tmp_path / "x.pt")
    swapped = {**saved, "weights": saved["weights"][::-1]}
    save_checkpoint(tmp_path / "y.pt", swapped)
    with pytest.raises(CheckpointError):
        load_low_rank_models(tmp_path / "y.pt")


def test_training_a_low_rank_model_is_repeatable():
    recipe = Recipe(steps=5, task=RecallTask(train_length=16))
    first, second = (train_low_rank_model(4, recipe)["model"] for _ in range(2))
    assert all(
        torch.equal(a, b)
        for a, b in zip(first.state_dict().values(), second.state_dict().values(), strict=True)
    )


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    chunks=st.integers(1, 4),
    chunk_size=st.integers(1, 4),
    rounds=st.integers(1, 3),
)
def test_lsh_pairs_are_the_keys_whose_weight_lsh_attention_uses(seed, chunks, chunk_size, rounds):
    generator = torch.Generator().manual_seed(seed)
    n = chunks * chunk_size
    queries = torch.randn(n, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    buckets = torch.stack([lsh_buckets(queries.detach(), 4, generator) for _ in range(rounds)])
    values = torch.eye(n, dtype=torch.float64)  # output i, j: the weight query i puts on key j
    weights = lsh_attention(queries.detach(), values, buckets, chunk_size)
    assert torch.equal(lsh_pairs(buckets, chunk_size), weights > 0)


def test_lsh_pairs_refuse_what_they_cannot_picture():
    with pytest.raises(ValueError, match="must divide n"):
        lsh_pairs(torch.zeros(6, dtype=torch.int64), 4)
    with pytest.raises(ValueError, match="int64"):
        lsh_pairs(torch.zeros(6), 3)
    with pytest.raises(ValueError, match="2\\^28"):
        lsh_pairs(torch.zeros(2, 2**14, dtype=torch.int64), 4)


# What a hostile pass over these helpers and their checkers found, each held


def test_a_window_wider_than_the_sequence_is_the_whole_sequence():
    q = torch.randn(8, 4, dtype=torch.float64)
    assert torch.allclose(window_attention(q, q, q, 10**30), exact_attention(q, q, q), atol=1e-12)


def test_a_positive_multiple_keeps_its_bucket_in_float16():
    x = torch.tensor([[1.0, 3.0, -3.0, 3.0]], dtype=torch.float16)
    seeded = [lsh_buckets(v, 8, torch.Generator().manual_seed(0)) for v in (x, 8192 * x)]
    assert torch.equal(*seeded)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: LowRankRecallModel(16, 8, 4, d_model="32"), "d_model must be a whole number"),
        (lambda: LowRankRecallModel(2**40, 8, 4), "more than 2\\^28"),
        (lambda: lsh_pairs(torch.tensor(3), 1), "a single id"),
        (
            lambda: lsh_attention(
                torch.randn(1, 4).expand(2**20, 4),
                torch.randn(1, 4).expand(2**20, 4),
                torch.zeros(2**20, dtype=torch.int64),
                2**10,
            ),
            "more than 2\\^28",
        ),
        (
            lambda: linformer_attention(
                *(torch.randn(1, 4).expand(2**20, 4),) * 3,
                torch.randn(512, 1).expand(512, 2**20),
                torch.randn(512, 1).expand(512, 2**20),
            ),
            "more than 2\\^28",
        ),
    ],
)
def test_sizes_nobody_can_allocate_are_refused_by_name(make, words):
    with pytest.raises(ValueError, match=words):
        make()


def test_sixteen_bit_attention_is_computed_wide_enough_not_to_overflow():
    h = torch.full((4, 4), 200.0, dtype=torch.float16)
    for out in (
        window_attention(h, h, h, 1),
        linformer_attention(
            h, h, h, torch.eye(4, dtype=torch.float16), torch.eye(4, dtype=torch.float16)
        ),
    ):
        assert out.dtype == torch.float16 and out.isfinite().all()


def test_training_leaves_the_callers_grad_mode_and_random_numbers_alone():
    recipe = Recipe(steps=3, task=RecallTask(train_length=8))
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    with torch.no_grad():
        trained = train_low_rank_model(4, recipe)
    assert len(trained["loss"]) == 3 and torch.equal(torch.rand(3), expected)
    with pytest.raises(ValueError, match="diverged"):
        train_low_rank_model(None, Recipe(steps=50, lr=1e30, task=RecallTask(train_length=8)))


def test_recall_accuracy_refuses_what_its_float64_copy_would_not_follow():
    model = load_low_rank_models()["models"][8]
    tokens, answers = extrapolation_batches(RecallTask(train_length=64), (1,), num=2)[64]

    class Mine(LowRankRecallModel):
        pass

    mine = Mine(16, 64, 8)
    with pytest.raises(ValueError, match="a subclass"):
        recall_accuracy(mine, tokens, answers)
    handle = model.output.register_forward_hook(lambda m, i, o: o * 0)
    with pytest.raises(ValueError, match="forward hook"):
        recall_accuracy(model, tokens, answers)
    handle.remove()
    broken = LowRankRecallModel(16, 64, 8)
    with torch.no_grad():
        broken.output.weight.fill_(float("inf"))
    with pytest.raises(ValueError, match="NaN or inf"):
        recall_accuracy(broken, tokens, answers)


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda saved: saved["weights"][2].__setitem__(
                "attention.E", saved["weights"][2]["attention.E"].double() * 1e40
            ),
            "beyond torch.float32's largest",
        ),
        (lambda saved: saved.__setitem__("loss", ["a"] * 5), "its loss should be"),
        (lambda saved: saved.__setitem__("seconds", [-1.0] * 5), "its seconds should be"),
        (lambda saved: saved["task"].__setitem__("train_length", 16), "does not build the model"),
    ],
)
def test_a_damaged_low_rank_checkpoint_is_refused_by_name(edit, words, tmp_path):
    keys = ("projections", "weights", "recipe", "task", "loss", "seconds")
    saved = load_checkpoint(SAVED_LOW_RANK_MODELS, keys, "")
    edit(saved)
    save_checkpoint(tmp_path / "x.pt", saved)
    with pytest.raises(CheckpointError, match=words):
        load_low_rank_models(tmp_path / "x.pt")
