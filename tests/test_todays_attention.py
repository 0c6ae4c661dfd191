"""Chapter 16's helpers: the softmax with a sink logit, and multi-head latent attention in its
plain and absorbed forms, with and without its cache."""

import pytest
import torch

from helpers.attention import masked_softmax
from helpers.efficient import PUBLISHED_MODELS, kv_cache_bytes
from helpers.todays_attention import (
    PUBLISHED_LATENT_MODELS,
    CausalSelfAttention,
    LatentCache,
    MultiHeadLatentAttention,
    RollingCache,
    cache_bytes_by_model,
    latent_cache_bytes,
    softmax_with_sink,
    window_mask,
)


def scores_and_mask(seed=0, shape=(2, 3, 4, 5)):
    generator = torch.Generator().manual_seed(seed)
    scores = torch.randn(shape, generator=generator, dtype=torch.float64)
    mask = torch.rand(shape, generator=generator) < 0.7
    return scores, mask


def test_a_sink_of_minus_infinity_is_masked_softmax():
    scores, mask = scores_and_mask()
    sink = torch.full((3,), float("-inf"), dtype=torch.float64)
    assert torch.equal(softmax_with_sink(scores, sink, mask), masked_softmax(scores, mask=mask))


def test_the_sink_takes_the_weight_it_is_given_and_brings_no_value():
    scores, mask = scores_and_mask(1)
    sink = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64)
    weights = softmax_with_sink(scores, sink, mask)
    kept = torch.where(mask, scores.exp(), 0).sum(-1)  # (B, heads, q)
    assert torch.allclose(weights.sum(-1), kept / (kept + sink.exp()[:, None]))
    assert (weights.sum(-1) < 1).all() and (weights[~mask] == 0).all()
    by_hand = torch.where(mask, scores.exp(), 0) / (kept + sink.exp()[:, None])[..., None]
    assert torch.allclose(weights, by_hand)


def test_a_row_with_every_key_masked_is_zeros_whatever_the_sink():
    scores, _ = scores_and_mask(2)
    mask = torch.zeros(scores.shape, dtype=torch.bool)
    for sink in (torch.zeros(3), torch.full((3,), float("-inf"))):
        weights = softmax_with_sink(scores, sink.double(), mask)
        assert torch.equal(weights, torch.zeros_like(scores))


def test_gradients_reach_the_sink_logits_and_16_bit_scores_keep_their_dtype():
    scores, mask = scores_and_mask(3)
    sink = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    softmax_with_sink(scores, sink, mask)[..., 0].sum().backward()
    assert sink.grad is not None and (sink.grad != 0).all()
    half = softmax_with_sink(scores.half(), torch.zeros(3, dtype=torch.float16), mask)
    assert half.dtype == torch.float16 and half.isfinite().all()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ((torch.zeros(2, 3, 4), torch.zeros(3)), "scores must be floating point \\(B, heads"),
        ((torch.zeros(2, 3, 4, 5), torch.zeros(4)), "one per head: \\(3,\\)"),
        ((torch.zeros(2, 3, 4, 5), torch.tensor([0.0, float("nan"), 0.0])), "NaN or \\+inf"),
        (
            (torch.zeros(2, 3, 4, 5), torch.zeros(3, dtype=torch.long)),
            "sink_logits must be floating",
        ),
    ],
)
def test_bad_sink_inputs_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        softmax_with_sink(*arguments)


def latent_layer(seed=0, **sizes):
    torch.manual_seed(seed)
    sizes = {"d_model": 16, "num_heads": 4, "d_latent": 6, "d_rope": 4} | sizes
    return MultiHeadLatentAttention(**sizes).double()


def test_the_absorbed_form_gives_the_plain_forms_output():
    layer = latent_layer()
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    plain, absorbed = layer(x), layer(x, absorbed=True)
    assert plain.shape == (3, 7, 16)
    assert torch.allclose(plain, absorbed, atol=1e-12)


@pytest.mark.parametrize("absorbed", [False, True])
def test_one_position_at_a_time_through_the_cache_gives_the_full_pass(absorbed):
    layer = latent_layer(1, d_head=5)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    full = layer(x)
    cache = LatentCache()
    steps = [layer(x[:, t : t + 1], cache, absorbed) for t in range(6)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-12)
    assert cache.entries.shape == (2, 6, 6 + 4)  # the latents and the rotated key parts only
    assert cache.nbytes == 2 * 6 * 10 * 8
    prompt_then_steps = LatentCache()
    first = layer(x[:, :4], prompt_then_steps, absorbed)
    rest = [layer(x[:, t : t + 1], prompt_then_steps, absorbed) for t in (4, 5)]
    assert torch.allclose(torch.cat([first, *rest], dim=1), full, atol=1e-12)


def test_a_later_position_never_changes_an_earlier_output():
    layer = latent_layer(2)
    x = torch.randn(1, 5, 16, dtype=torch.float64)
    changed = x.clone()
    changed[:, 3:] = torch.randn(1, 2, 16, dtype=torch.float64)
    assert torch.equal(layer(x)[:, :3], layer(changed)[:, :3])
    assert not torch.allclose(layer(x)[:, 3:], layer(changed)[:, 3:])


def test_scores_depend_on_the_distance_through_the_rotated_part():
    layer = latent_layer(3)
    with torch.no_grad():
        layer.W_down.weight.zero_()  # only the rotated parts score
    x = torch.randn(1, 1, 16, dtype=torch.float64).expand(1, 6, 16)  # one token, six positions
    layer(x)
    weights = layer.attention_weights[0, 0]  # (6, 6)
    assert torch.allclose(weights[3, 2] / weights[3, 1], weights[5, 4] / weights[5, 3])


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"d_rope": 3}, "d_rope must be even"),
        ({"d_model": 15}, "must divide into num_heads"),
        ({"d_latent": 0}, "d_latent must be a whole number >= 1"),
        ({"d_model": 2**20, "d_latent": 2**10}, "a typing slip"),
    ],
)
def test_bad_sizes_are_named(sizes, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadLatentAttention(
            **{"d_model": 16, "num_heads": 4, "d_latent": 6, "d_rope": 4} | sizes
        )


def test_bad_inputs_and_caches_are_named():
    layer = latent_layer()
    with pytest.raises(ValueError, match="x must be floating point \\(B, n, d_model = 16\\)"):
        layer(torch.zeros(2, 3, 8, dtype=torch.float64))
    with pytest.raises(ValueError, match="layer's dtype"):
        layer(torch.zeros(2, 3, 16))
    with pytest.raises(TypeError, match="cache must be a LatentCache"):
        layer(torch.zeros(2, 3, 16, dtype=torch.float64), cache={})
    cache = LatentCache()
    layer(torch.zeros(2, 3, 16, dtype=torch.float64), cache)
    with pytest.raises(ValueError, match="x must have its batch"):
        layer(torch.zeros(3, 1, 16, dtype=torch.float64), cache)
    with pytest.raises(ValueError, match="absorbed must be"):
        layer(torch.zeros(2, 1, 16, dtype=torch.float64), absorbed="yes")


def test_a_latent_cache_holds_the_bytes_counted_for_it():
    layer = latent_layer(4)
    cache = LatentCache()
    layer(torch.randn(3, 9, 16, dtype=torch.float64), cache)
    assert cache.nbytes == latent_cache_bytes(1, 6, 4, tokens=9, batch=3, bytes_per_number=8)


def test_deepseek_v3_caches_four_and_a_half_heads_worth_per_layer():
    v3 = {shape.name: shape for shape in PUBLISHED_LATENT_MODELS}["DeepSeek-V3"]
    per_token = v3.cache_bytes(tokens=1)
    assert per_token == 61 * (512 + 64) * 2 == 70_272
    as_multi_head = kv_cache_bytes(61, 128, 128, tokens=1)  # the same heads, keys and values kept
    assert as_multi_head / per_token == 2 * 128 * 128 / 576  # about 57 times more
    assert (512 + 64) == 4.5 * 128  # DeepSeek-V2's "4.5 d_h" per layer
    llama_70b = {shape.name: shape for shape in PUBLISHED_MODELS}["Llama 2 70B"]
    assert llama_70b.cache_bytes(tokens=1) == 80 * 2 * 8 * 128 * 2 == 327_680


def test_bad_cache_sizes_are_named():
    with pytest.raises(ValueError, match="d_rope must be a whole number"):
        latent_cache_bytes(1, 512, 0.5, 10)


# Every cache equals no cache: the same layer read in one pass, one position at a time, and a
# prompt then one position at a time, gives the same output; a cache with a window keeps no more
# than it may read again.

VARIANTS = {
    "multi-head": {},
    "grouped-query": {"num_kv_heads": 2},
    "multi-query": {"num_kv_heads": 1},
    "QK-norm": {"qk_norm": True},
    "sink logits": {"sink": True},
    "window 3": {"window": 3},
    "window 3, first 2 kept": {"window": 3, "keep": 2},
    "everything": {"num_kv_heads": 2, "qk_norm": True, "sink": True, "window": 4, "keep": 1},
}


def attention_layer(seed=0, **options):
    torch.manual_seed(seed)
    layer = CausalSelfAttention(16, 4, **options).double()
    if layer.sink_logits is not None:
        with torch.no_grad():
            layer.sink_logits.normal_()
    return layer


def through_cache(layer, x, prompt):
    cache = layer.new_cache()
    pieces = [layer(x[:, :prompt], cache)] if prompt else []
    pieces += [layer(x[:, t : t + 1], cache) for t in range(prompt, x.shape[1])]
    return torch.cat(pieces, dim=1), cache


@pytest.mark.parametrize("options", VARIANTS.values(), ids=list(VARIANTS))
def test_every_cache_gives_the_output_of_no_cache(options):
    layer = attention_layer(**options)
    x = torch.randn(2, 11, 16, dtype=torch.float64)
    full = layer(x)
    for prompt in (0, 1, 5):
        cached, cache = through_cache(layer, x, prompt)
        assert torch.allclose(cached, full, atol=1e-12), prompt
        assert cache.seen == 11
        held = 11 if layer.window is None else layer.window + layer.keep
        assert len(cache) <= held and cache.keys.shape[2] == len(cache)


def test_a_window_reads_only_its_window_and_the_kept_positions():
    mask = window_mask(torch.arange(6), torch.arange(6), window=2, keep=1)
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [1, 0, 1, 1, 0, 0],
            [1, 0, 0, 1, 1, 0],
            [1, 0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(mask, expected)
    layer = attention_layer(window=2, keep=1)
    layer(torch.randn(1, 6, 16, dtype=torch.float64))
    assert torch.equal(layer.attention_weights[0, 0] > 0, expected)


class CacheThatForgetsWhereItIs(RollingCache):
    """A typical bug: every step's keys are turned as if the sequence started again."""

    def _extend(self, keys, values, slots, pads):
        keys, values, slots = super()._extend(keys, values, slots, pads)
        self.seen = 0
        return keys, values, slots


class CacheThatReordersHeads(RollingCache):
    """Another: key/value heads stored in the wrong order, as a repeat() where
    repeat_interleave() was meant would put them."""

    def _extend(self, keys, values, slots, pads):
        return super()._extend(keys.flip(1), values.flip(1), slots, pads)


@pytest.mark.parametrize("broken", [CacheThatForgetsWhereItIs, CacheThatReordersHeads])
def test_a_broken_cache_is_caught(broken):
    layer = attention_layer(num_kv_heads=2)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    cache = broken()
    steps = torch.cat([layer(x[:, t : t + 1], cache) for t in range(7)], dim=1)
    assert not torch.allclose(steps, layer(x), atol=1e-6)


def test_sink_logits_learn_and_take_weight_in_every_row():
    layer = attention_layer(sink=True, qk_norm=True)
    x = 100 * torch.randn(1, 8, 16, dtype=torch.float64)
    layer(x).sum().backward()
    assert layer.sink_logits.grad is not None and layer.sink_logits.grad.abs().sum() > 0
    assert (layer.attention_weights.sum(-1) < 1).all()  # the sink took some weight in every row


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_kv_heads": 3}, "must divide num_heads"),
        ({"keep": 2}, "only means something with a window"),
        ({"window": 0}, "window must be a whole number >= 1"),
        ({"qk_norm": "yes"}, "qk_norm must be"),
    ],
)
def test_bad_attention_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        CausalSelfAttention(16, 4, **options)


def test_a_cache_made_for_another_window_is_refused():
    layer = attention_layer(window=3)
    with pytest.raises(ValueError, match="make it with layer.new_cache"):
        layer(torch.randn(1, 2, 16, dtype=torch.float64), RollingCache())


def test_pads_are_named_when_wrong_or_changed_through_one_cache():
    layer = attention_layer()
    x = torch.randn(2, 3, 16, dtype=torch.float64)
    with pytest.raises(ValueError, match="pads must be >= 0"):
        layer(x, pads=torch.tensor([0, -1]))
    with pytest.raises(ValueError, match="pads must be \\(B,\\) = \\(2,\\) integers"):
        layer(x, pads=torch.tensor([0.0, 1.0]))
    cache = layer.new_cache()
    layer(x, cache, pads=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="the same on every pass through one cache"):
        layer(x[:, :1], cache, pads=torch.tensor([0, 1]))
    latent = latent_layer()
    latent_cache = LatentCache()
    latent(x, latent_cache, pads=torch.tensor([1, 0]))
    with pytest.raises(ValueError, match="the same on every pass through one cache"):
        latent(x[:, :1], latent_cache)


def test_a_rows_pads_are_never_read():
    layer = attention_layer(num_kv_heads=2, window=3, keep=1)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    changed = x.clone()
    changed[1, :2] = torch.randn(2, 16, dtype=torch.float64)  # row 1's two pads
    pads = torch.tensor([0, 2])
    assert torch.equal(layer(x, pads=pads)[1, 2:], layer(changed, pads=pads)[1, 2:])
    assert torch.allclose(layer(x, pads=pads)[1, 2:], layer(x[1:, 2:])[0], atol=1e-12)


def test_a_window_cache_holds_no_more_than_its_window_and_kept_slots_and_the_pads_between():
    layer = attention_layer(window=3, keep=2)
    cache = layer.new_cache()
    x = torch.randn(2, 12, 16, dtype=torch.float64)
    for t in range(12):
        layer(x[:, t : t + 1], cache, pads=torch.tensor([0, 4]))
        assert len(cache) <= 3 + 2 + 4


def test_the_cache_bytes_of_published_models_side_by_side():
    rows = {row["model"]: row for row in cache_bytes_by_model(tokens=4096)}
    assert [rows[name]["attention"] for name in rows] == ["MHA", "GQA", "GQA", "MQA", "MLA", "MLA"]
    assert rows["Llama 2 7B"]["per token"] == 32 * 2 * 32 * 128 * 2 == 524_288
    assert rows["Falcon-7B"]["per token"] == 32 * 2 * 1 * 64 * 2 == 8_192
    assert rows["DeepSeek-V3"]["per token"] == 70_272
    assert all(row["cache"] == row["per token"] * 4096 for row in rows.values())
    assert cache_bytes_by_model()[0]["tokens"] == 4096  # Llama 2's context


def test_16_bit_layers_score_in_float32_and_stay_finite():
    for layer in (attention_layer(), latent_layer()):
        half = layer.half()
        x = (
            1000 * torch.randn(1, 5, 16).half()
        )  # products of such queries and keys overflow float16
        assert half(x).isfinite().all()


def test_a_sink_that_does_not_fit_the_scores_dtype_is_named():
    with pytest.raises(ValueError, match="in the scores' dtype torch.float16"):
        softmax_with_sink(torch.zeros(1, 3, 2, 2).half(), torch.full((3,), 1e5))


def test_positions_of_small_or_other_types_and_oversized_passes_are_named():
    with pytest.raises(ValueError, match="1-d integer positions"):
        window_mask(torch.arange(4, dtype=torch.uint8), torch.arange(4, dtype=torch.uint8), 2)
    assert torch.equal(
        window_mask(torch.arange(4, dtype=torch.int16), torch.arange(4, dtype=torch.int16), 2),
        window_mask(torch.arange(4), torch.arange(4), 2),
    )
    layer = attention_layer()
    with pytest.raises(ValueError, match="more than 2\\^28 scores"):
        layer(torch.zeros(1, 1, 16, dtype=torch.float64).expand(1, 10_000, 16))
    other = CausalSelfAttention(32, 4).double()  # heads of 8, where the layer's are of 4
    cache = other.new_cache()
    other(torch.zeros(1, 2, 32, dtype=torch.float64), cache)
    with pytest.raises(ValueError, match="key/value heads of 4"):
        layer(torch.zeros(1, 1, 16, dtype=torch.float64), cache)
