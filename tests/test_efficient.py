"""Chapter 10's helpers: the online softmax, FlashAttention's tiled forward pass, the byte
counts, grouped-query attention, and the two explorers' logic."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers.attention import (
    DotProductAttention,
    KeyValueCache,
    MultiHeadAttention,
    copy_weights_from_torch,
    masked_softmax,
)
from helpers.efficient import (
    PUBLISHED_MODELS,
    grouped_from_multi_head,
    key_tile_steps,
    kv_cache_bytes,
    kv_head_of_query_heads,
    online_softmax,
    peak_bytes,
    score_matrix_bytes,
    tiled_attention,
)
from helpers.masks import causal_mask
from helpers.widgets import KeyValueHeadExplorer, TileStepperExplorer


def _inputs(batch=2, heads=3, q=37, k=45, d=8, d_v=5, dtype=torch.float64):
    shapes = ((batch, heads, q, d), (batch, heads, k, d), (batch, heads, k, d_v))
    return [torch.randn(shape, dtype=dtype, requires_grad=True) for shape in shapes]


def _masks(q=37, k=45):
    random = torch.rand(2, 1, q, k) > 0.5
    random[0, 0, 3] = False  # a fully masked row
    padding = (torch.arange(k) >= torch.tensor([0, 20])[:, None])[:, None, None, :]  # (2,1,1,k)
    causal = torch.ones(q, k, dtype=torch.bool).tril(diagonal=k - q)
    left_pad_causal = padding & causal  # example 1: the first tiles of every row are masked
    no_key = torch.zeros(q, k, dtype=torch.bool)
    return {
        "none": None,
        "random": random,
        "padding": padding,
        "causal": causal,
        "padding+causal": left_pad_causal,
        "nothing allowed": no_key,
    }


@pytest.mark.parametrize(
    ("mask_name", "tile_size"), list(itertools.product(_masks(), [1, 7, 16, 64]))
)
def test_tiled_attention_equals_dot_product_attention_values_and_gradients(mask_name, tile_size):
    q, k, v = _inputs()
    mask = _masks()[mask_name]
    ours = tiled_attention(q, k, v, mask, tile_size)
    reference = DotProductAttention()(q, k, v, mask=mask)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-12)
    upstream = torch.randn_like(reference)
    mine = torch.autograd.grad((ours * upstream).sum(), (q, k, v))
    theirs = torch.autograd.grad((reference * upstream).sum(), (q, k, v))
    for a, b in zip(mine, theirs, strict=True):
        assert a.isfinite().all()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def _masked_keys_holding(bad: float) -> dict:
    """name -> (queries, keys, values, mask, tile_size): a value of `bad` at keys that the mask
    hides from every query, so that each output must stay finite."""
    q, k, v = (t.detach() for t in _inputs(q=6, k=8))
    causal = causal_mask(8)[:6]  # the six queries see keys 0..i: keys 6 and 7 stay hidden
    future_values = v.clone()
    future_values[..., 6:, :] = bad
    padding = torch.tensor([[True] * 8, [True] * 5 + [False] * 3])[:, None, None, :]  # (B,1,1,k)
    padded_values = v.clone()
    padded_values[1, :, 5:] = bad
    first_tile_hidden = torch.ones(6, 8, dtype=torch.bool)
    first_tile_hidden[:, :2] = False
    row_hidden = first_tile_hidden.clone()
    row_hidden[2] = False
    hidden_values = v.clone()
    hidden_values[..., :2, :] = bad
    return {
        "causal, tiles of 2": (q, k, future_values, causal, 2),
        "causal, tiles of 4": (q, k, future_values, causal, 4),
        "pads under a (B, 1, 1, k) mask": (q, k, padded_values, padding, 2),
        "a fully masked tile": (q, k, hidden_values, first_tile_hidden, 2),
        "a fully masked row": (q, k, hidden_values, row_hidden, 3),
    }


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("case", list(_masked_keys_holding(0.0)))
def test_a_masked_value_never_leaks_into_tiled_attention(bad, case):
    q, k, v, mask, tile_size = _masked_keys_holding(bad)[case]
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    ours = tiled_attention(q, k, v, mask, tile_size)
    reference = DotProductAttention()(q, k, v, mask=mask)
    assert ours.isfinite().all()
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-12)
    upstream = torch.randn_like(reference)
    mine = torch.autograd.grad((ours * upstream).sum(), (q, k, v))
    theirs = torch.autograd.grad((reference * upstream).sum(), (q, k, v))
    for a, b in zip(mine, theirs, strict=True):
        assert a.isfinite().all()
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_value_whose_weight_underflows_to_zero_in_an_earlier_tile_counts_for_nothing(bad):
    """Key 0 scores 2000 below key 1: its weight exp(-2000) is 0 in float64, so
    DotProductAttention ignores its value; the tiles must not rescale inf or NaN by 0."""
    queries = torch.ones(1, 1, 4, dtype=torch.float64)
    keys = torch.tensor([[[-1000.0] * 4, [1.0] * 4, [0.5] * 4]], dtype=torch.float64)
    values = torch.tensor([[[bad, 1.0], [2.0, 3.0], [4.0, 5.0]]], dtype=torch.float64)
    ours = tiled_attention(queries, keys, values, tile_size=1)
    assert ours.isfinite().all()
    torch.testing.assert_close(ours, DotProductAttention()(queries, keys, values))


def test_a_masked_value_never_leaks_into_a_tile_step():
    q, k, v, mask, _ = _masked_keys_holding(float("nan"))["causal, tiles of 4"]
    steps = list(key_tile_steps(q, k, v, mask, tile_size=2))
    torch.testing.assert_close(steps[-1].output, DotProductAttention()(q, k, v, mask=mask))
    assert all(step.output.isfinite().all() for step in steps)


@pytest.mark.parametrize("mask_name", ["none", "random", "padding", "causal"])
def test_tiled_attention_equals_torch_sdpa(mask_name):
    q, k, v = (t.detach().float() for t in _inputs())
    mask = _masks()[mask_name]
    if mask_name == "random":
        mask = mask.clone()
        mask[0, 0, 3, 0] = True  # SDPA gives NaN for a fully masked row; ours gives zeros
    ours = tiled_attention(q, k, v, mask, tile_size=16)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, mask))


def test_tiled_attention_gives_zeros_for_rows_with_no_key_and_keeps_16_bit_dtypes():
    q, k, v = (t.detach() for t in _inputs())
    out = tiled_attention(q, k, v, _masks()["random"], tile_size=8)
    assert (out[0, :, 3] == 0).all()
    half = tiled_attention(q.half(), k.half(), v.half(), causal_mask(45)[8:], tile_size=8)
    assert half.dtype == torch.float16
    reference = DotProductAttention()(q.half(), k.half(), v.half(), mask=causal_mask(45)[8:])
    torch.testing.assert_close(half, reference, rtol=2e-3, atol=2e-3)


def test_tiled_attention_with_three_axes_and_float32_equals_sdpa():
    q, k, v = torch.randn(4, 100, 16), torch.randn(4, 70, 16), torch.randn(4, 70, 16)
    torch.testing.assert_close(
        tiled_attention(q, k, v, tile_size=32), F.scaled_dot_product_attention(q, k, v)
    )


def test_the_tile_steps_end_in_the_block_output_and_read_every_key_once():
    q, k, v = (t.detach() for t in _inputs(batch=1, heads=1, q=4, k=10))
    steps = list(key_tile_steps(q, k, v, tile_size=4))
    assert [(s.keys.start, s.keys.stop) for s in steps] == [(0, 4), (4, 8), (8, 12)]
    torch.testing.assert_close(steps[-1].output, DotProductAttention()(q, k, v))
    # after two tiles: attention over the first 8 keys
    torch.testing.assert_close(
        steps[1].output, DotProductAttention()(q, k[..., :8, :], v[..., :8, :])
    )


@pytest.mark.parametrize("tile_size", [1, 3, 64])
def test_online_softmax_equals_masked_softmax_values_and_gradients(tile_size):
    scores = torch.randn(5, 37, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(5, 37) > 0.3
    mask[0] = False  # nothing allowed
    mask[1, :20] = False  # the first tiles of this row are fully masked
    ours = online_softmax(scores, mask, tile_size)
    reference = masked_softmax(scores, mask=mask)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-14)
    upstream = torch.randn(5, 37, dtype=torch.float64)
    (mine,) = torch.autograd.grad((ours * upstream).sum(), scores)
    (theirs,) = torch.autograd.grad((reference * upstream).sum(), scores)
    torch.testing.assert_close(mine, theirs, rtol=0, atol=1e-14)
    assert (ours[0] == 0).all()


@pytest.mark.parametrize(
    ("dtype", "num_keys"), [(torch.bfloat16, 1024), (torch.bfloat16, 300), (torch.float16, 4096)]
)
def test_online_softmax_sums_16_bit_scores_in_float32(dtype, num_keys):
    """A 16-bit running sum of 1024 ones stops at 256 in bfloat16 (adding 1 no longer changes
    it), so the weights summed to 4; summed in float32 they sum to 1 within the dtype's step."""
    weights = online_softmax(torch.zeros(1, num_keys, dtype=dtype), tile_size=1)
    assert weights.dtype == dtype
    assert abs(weights.double().sum().item() - 1) <= num_keys * torch.finfo(dtype).eps / 2
    scores = torch.randn(3, num_keys).to(dtype)
    torch.testing.assert_close(online_softmax(scores, tile_size=7), masked_softmax(scores))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("tile_size", [1, 2, 7])
def test_online_softmax_gives_what_masked_softmax_gives_for_nan_and_inf_scores(bad, tile_size):
    scores = torch.randn(3, 7)
    scores[0, 2] = bad  # row 0 is NaN in masked_softmax: one contract for both
    mask = torch.ones(3, 7, dtype=torch.bool)
    mask[1] = scores[1] != scores[1, 4]
    scores[1, 4] = bad  # a masked NaN or inf counts for nothing
    ours = online_softmax(scores, mask, tile_size)
    reference = masked_softmax(scores, mask=mask)
    assert ours[0].isnan().all() and ours[1:].isfinite().all()
    torch.testing.assert_close(ours, reference, equal_nan=True)


def test_online_softmax_treats_minus_inf_scores_as_masked_and_large_scores_without_overflow():
    scores = torch.tensor([[float("-inf"), 1.0, 2.0], [float("-inf")] * 3, [1000.0, 999.0, 0.0]])
    torch.testing.assert_close(online_softmax(scores), masked_softmax(scores))


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: tiled_attention([[1.0]], torch.randn(1, 2, 3), torch.randn(1, 2, 3)), "torch"),
        (lambda: tiled_attention(*[torch.randn(1, 2, 3)] * 3, tile_size=0), "tile_size"),
        (lambda: tiled_attention(*[torch.randn(1, 2, 3)] * 3, tile_size=2.0), "tile_size"),
        (
            lambda: tiled_attention(*[torch.randn(1, 2, 3)] * 3, mask=torch.ones(2, 2)),
            "boolean",
        ),
        (
            lambda: tiled_attention(
                *[torch.randn(1, 2, 3)] * 3, mask=torch.ones(3, 2, dtype=torch.bool)
            ),
            "cannot broadcast",
        ),
        (
            lambda: tiled_attention(
                torch.randn(1, 2, 3), torch.randn(1, 2, 4), torch.randn(1, 2, 4)
            ),
            "one size",
        ),
        (lambda: tiled_attention(*[torch.ones(1, 2, 3, dtype=torch.long)] * 3), "floating"),
        (lambda: online_softmax(torch.ones(3, dtype=torch.long)), "floating-point"),
        (lambda: online_softmax(torch.ones(3), tile_size=-1), "tile_size"),
        (lambda: online_softmax(torch.ones(2, 3), torch.ones(3, 2, dtype=torch.bool)), "broadcast"),
        (lambda: key_tile_steps(None, torch.ones(3, 2), torch.ones(3, 2)), "query_block"),
        (lambda: key_tile_steps(torch.ones(2, 2), torch.ones(3, 4), torch.ones(3, 2)), "one size"),
        (
            lambda: key_tile_steps(
                torch.ones(2, 2), torch.ones(3, 2), torch.ones(3, 2), torch.ones(2, 4).bool()
            ),
            "cannot broadcast",
        ),
        (lambda: key_tile_steps(*[torch.ones(2, 2)] * 3, tile_size=0), "tile_size"),
        (lambda: key_tile_steps(*[torch.ones(2, 0)] * 3), "at least 1"),
        (lambda: TileStepperExplorer(mask="padding"), "mask must be one of"),
        (lambda: TileStepperExplorer(tile=4), "tile must be from 0 to 3"),
        (lambda: TileStepperExplorer(block=-1), "block must be"),
        (lambda: KeyValueHeadExplorer(kv_heads=3), "one of 1, 2, 4, 8, got 3"),
        (lambda: KeyValueHeadExplorer(kv_heads="2"), "kv_heads must be a whole number"),
        (lambda: kv_cache_bytes(2, 0, 4, 5), "num_kv_heads"),
        (lambda: kv_cache_bytes(2, 1, 4, 5.0), "tokens"),
        (lambda: score_matrix_bytes(-1, 4), "tokens"),
        (lambda: peak_bytes(3), "callable"),
        (lambda: kv_head_of_query_heads(8, 3), "divisible"),
        (lambda: MultiHeadAttention(16, 4, num_kv_heads=3), "divisible by num_kv_heads"),
        (lambda: MultiHeadAttention(16, 4, num_kv_heads=0), "num_kv_heads"),
        (lambda: MultiHeadAttention(16, 4, num_kv_heads=2.0), "num_kv_heads"),
        (lambda: grouped_from_multi_head(nn.Linear(2, 2), 1), "MultiHeadAttention"),
        (
            lambda: grouped_from_multi_head(MultiHeadAttention(16, 4, num_kv_heads=2), 1),
            "num_kv_heads=2",
        ),
        (
            lambda: copy_weights_from_torch(
                MultiHeadAttention(16, 4, num_kv_heads=2), nn.MultiheadAttention(16, 4)
            ),
            "num_kv_heads=2",
        ),
    ],
)
def test_bad_inputs_get_a_clear_value_error(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_byte_counts_follow_their_formulas_and_the_published_shapes():
    assert score_matrix_bytes(4096, 32, 2) == 32 * 4096 * 4096 * 2
    assert kv_cache_bytes(32, 8, 128, 8192) == 2 * 32 * 8 * 128 * 8192 * 2
    shapes = {model.name: model for model in PUBLISHED_MODELS}
    assert shapes["Llama 2 7B"].cache_bytes() == 2 * 32 * 32 * 128 * 4096 * 2  # 2 GiB
    assert shapes["Llama 2 7B"].cache_bytes() == 2 * 1024**3
    assert shapes["Llama 2 70B"].cache_bytes() == 1.25 * 1024**3
    assert shapes["Mistral 7B"].cache_bytes(tokens=4096) == 512 * 1024**2
    assert all(model.num_heads % model.num_kv_heads == 0 for model in PUBLISHED_MODELS)


def test_peak_bytes_sees_the_score_matrix_of_explicit_attention_and_not_of_tiled():
    n, d = 512, 64
    q, k, v = torch.randn(1, n, d), torch.randn(1, n, d), torch.randn(1, n, d)
    scores = score_matrix_bytes(n, 1, 4)
    with torch.no_grad():
        explicit = peak_bytes(lambda: torch.softmax(q @ k.mT / d**0.5, dim=-1) @ v)
        tiled = peak_bytes(lambda: tiled_attention(q, k, v, tile_size=64))
    assert explicit >= 2 * scores  # the scores, then the scaled scores, at once
    assert tiled < scores / 3  # the output (a quarter of it here) and a few tiles
    assert peak_bytes(lambda: torch.zeros(1000)) == 4000  # the result counts
    assert peak_bytes(lambda: q[:, :10].sum()) == 4  # a view of an input is not new memory


def test_tiled_peak_memory_grows_linearly_and_explicit_quadratically():
    def peaks(n):
        q = torch.randn(1, n, 32)
        with torch.no_grad():
            return (
                peak_bytes(lambda: DotProductAttention()(q, q, q)),
                peak_bytes(lambda: tiled_attention(q, q, q, tile_size=32)),
            )

    (explicit_1, tiled_1), (explicit_2, tiled_2) = peaks(256), peaks(512)
    assert explicit_2 / explicit_1 > 3.9  # n^2
    assert tiled_2 / tiled_1 < 2.1  # n


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
def test_grouped_query_attention_equals_torch_sdpa_with_enable_gqa(num_kv_heads):
    layer = MultiHeadAttention(32, 8, num_kv_heads=num_kv_heads).double()
    assert layer.W_k.out_features == layer.W_v.out_features == num_kv_heads * 4
    x, memory = torch.randn(2, 6, 32).double(), torch.randn(2, 9, 32).double()
    mask = torch.rand(2, 6, 9) > 0.3
    out = layer(x, memory, memory, mask=mask)
    q = layer.W_q(x).view(2, 6, 8, 4).transpose(1, 2)
    k = layer.W_k(memory).view(2, 9, num_kv_heads, 4).transpose(1, 2)
    v = layer.W_v(memory).view(2, 9, num_kv_heads, 4).transpose(1, 2)
    safe = mask | ~mask.any(-1, keepdim=True)  # SDPA's NaN rows aside
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=safe[:, None], enable_gqa=True)
    heads = heads.masked_fill(~mask.any(-1)[:, None, :, None], 0.0)
    torch.testing.assert_close(out, layer.W_o(heads.transpose(1, 2).reshape(2, 6, 32)))
    assert layer.attention_weights.shape == (2, 8, 6, 9)


def test_the_cache_holds_only_the_kv_heads_and_decoding_equals_one_pass():
    x = torch.randn(2, 7, 32).double()
    sizes = {}
    for num_kv_heads in (1, 2, 8):
        layer = MultiHeadAttention(32, 8, num_kv_heads=num_kv_heads).double()
        cache = KeyValueCache()
        steps = [layer(t, t, t, cache=cache) for t in x.split(1, dim=1)]
        torch.testing.assert_close(torch.cat(steps, 1), layer(x, x, x, mask=causal_mask(7)))
        assert cache.keys.shape == (2, num_kv_heads, 7, 4)
        assert cache.nbytes == kv_cache_bytes(1, num_kv_heads, 4, 7, batch=2, bytes_per_number=8)
        sizes[num_kv_heads] = cache.nbytes
    assert sizes[8] == 8 * sizes[1] == 4 * sizes[2]
    assert KeyValueCache().nbytes == 0


def test_default_layer_keeps_its_parameters_and_torch_equivalence():
    torch.manual_seed(0)
    ours = MultiHeadAttention(16, 4)
    torch.manual_seed(0)
    explicit = MultiHeadAttention(16, 4, num_kv_heads=4)
    for a, b in zip(ours.parameters(), explicit.parameters(), strict=True):
        assert torch.equal(a, b)
    theirs = nn.MultiheadAttention(16, 4, batch_first=True)
    copy_weights_from_torch(ours, theirs)
    x = torch.randn(2, 5, 16)
    torch.testing.assert_close(ours(x, x, x), theirs(x, x, x, need_weights=False)[0])


def test_grouped_from_multi_head_means_the_kv_heads_of_each_group():
    layer = MultiHeadAttention(16, 4).double()
    grouped = grouped_from_multi_head(layer, 2)
    assert grouped.num_kv_heads == 2 and grouped.W_q.weight.dtype == torch.float64
    first_group = layer.W_k.weight[:8].reshape(2, 4, 16).mean(0)  # heads 0 and 1, d_head 4
    torch.testing.assert_close(grouped.W_k.weight[:4], first_group)
    assert torch.equal(grouped.W_q.weight, layer.W_q.weight)
    same = grouped_from_multi_head(layer, 4)
    x = torch.randn(1, 3, 16).double()
    torch.testing.assert_close(same(x, x, x), layer(x, x, x))
    assert kv_head_of_query_heads(8, 2) == [0, 0, 0, 0, 1, 1, 1, 1]


def test_tile_stepper_explorer_converges_to_the_exact_output():
    explorer = TileStepperExplorer(tile=0, block=1, mask="left padding")
    assert bytes(explorer.image.value).startswith(b"\x89PNG")
    state = explorer.state
    assert state["keys_read"] == 4
    assert (state["running_max"] == float("-inf")).all()  # the first tile is all pads
    assert (state["normaliser"] == 0).all() and (state["partial_output"] == 0).all()
    first_image = bytes(explorer.image.value)
    explorer.controls["tile"].value = 3
    torch.testing.assert_close(explorer.state["partial_output"], explorer.state["exact_output"])
    assert bytes(explorer.image.value) != first_image
    explorer.controls["mask"].value = "causal"
    explorer.controls["block"].value = 0
    explorer.controls["tile"].value = 0  # block 0 under the causal mask: one tile is enough
    torch.testing.assert_close(explorer.state["partial_output"], explorer.state["exact_output"])
    explorer.controls["mask"].value = "none"
    explorer.controls["tile"].value = 1  # after two tiles: attention over 8 keys
    rows = slice(0, 4)
    expected = DotProductAttention()(
        explorer.query_vectors[None, rows],
        explorer.key_vectors[None, :8],
        explorer.value_vectors[None, :8],
    )[0]
    torch.testing.assert_close(explorer.state["partial_output"], expected)
    with pytest.raises(ValueError, match="tile_size"):
        TileStepperExplorer(tile_size=3)


def test_key_value_head_explorer_shares_heads_and_shrinks_the_cache():
    explorer = KeyValueHeadExplorer(kv_heads=2)
    assert explorer.state["kv_head_of"] == [0, 0, 0, 0, 1, 1, 1, 1]
    multi_head = explorer.cache_bytes[8]
    assert explorer.state["cache_bytes"] == multi_head // 4
    first_image = bytes(explorer.image.value)
    explorer.controls["kv_heads"].value = 1
    assert explorer.state["kv_head_of"] == [0] * 8
    assert explorer.state["cache_bytes"] == multi_head // 8
    assert bytes(explorer.image.value) != first_image
    weights = explorer.state["weights"]  # (heads, n, n): causal maps whose rows sum to 1
    torch.testing.assert_close(weights.sum(-1), torch.ones(8, 8, dtype=torch.float64))
    assert (weights.triu(1) == 0).all()
    assert not torch.allclose(weights[0], weights[1])  # a shared key head, distinct queries
    explorer.controls["kv_heads"].value = 8
    assert explorer.state["kv_head_of"] == list(range(8))
