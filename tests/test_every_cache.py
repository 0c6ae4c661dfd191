"""Every key/value cache in the series gives what no cache gives: chapter 06's KeyValueCache in
multi-head attention, chapter 10's with grouped-query heads and RoPE, chapter 07's decoder
writing dates greedily, chapter 12's GPT writing greedily and by seeded sampling, and chapter
16's caches (test_todays_attention.py and test_todays_models.py test each variant there; here
one of each kind stands beside the others). A cache that turns its keys from position 0 again
is caught by the same check."""

import pytest
import torch

from helpers.attention import KeyValueCache, MultiHeadAttention
from helpers.gpt import GPT, GPTConfig, generate
from helpers.masks import causal_mask
from helpers.todays_models import TodayConfig, TodayGPT
from helpers.todays_models import generate as generate_today
from helpers.transformer import Seq2SeqTransformer

LAYERS = {
    "chapter 06: multi-head": {},
    "chapter 10: grouped-query with RoPE": {"num_kv_heads": 2, "rope": True},
    "chapter 10: multi-query": {"num_kv_heads": 1},
}


def one_position_at_a_time(layer, x, cache):
    return torch.cat(
        [
            layer(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], cache=cache)
            for t in range(x.shape[1])
        ],
        dim=1,
    )


@pytest.mark.parametrize("options", LAYERS.values(), ids=list(LAYERS))
def test_a_layers_cache_gives_the_causal_full_pass(options):
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, **options).double().eval()
    x = torch.randn(3, 9, 16, dtype=torch.float64)
    full = layer(x, x, x, mask=causal_mask(9))
    cache = KeyValueCache()
    assert torch.allclose(one_position_at_a_time(layer, x, cache), full, atol=1e-12)
    assert len(cache) == 9


class KeyValueCacheThatForgetsWhereItIs(KeyValueCache):
    """Keys turned as if every step were position 0: the bug reports call it a wrong offset."""

    def __len__(self) -> int:
        return 0


def test_a_cache_with_the_wrong_rotation_offset_is_caught():
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, num_kv_heads=2, rope=True).double().eval()
    x = torch.randn(1, 6, 16, dtype=torch.float64)
    steps = one_position_at_a_time(layer, x, KeyValueCacheThatForgetsWhereItIs())
    assert not torch.allclose(steps, layer(x, x, x, mask=causal_mask(6)), atol=1e-6)
    without_rope = MultiHeadAttention(16, 4, num_kv_heads=2).double().eval()  # nothing to turn
    steps = one_position_at_a_time(without_rope, x, KeyValueCacheThatForgetsWhereItIs())
    assert torch.allclose(steps, without_rope(x, x, x, mask=causal_mask(6)), atol=1e-12)


def test_chapter_07s_decoder_writes_the_same_with_its_cache():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(20, 20, d_model=16, num_heads=2, num_layers=2, d_ff=32).eval()
    src = torch.randint(3, 20, (4, 7), generator=torch.Generator().manual_seed(1))
    src[1, 5:] = 0  # a padded source
    cached = model.greedy_decode(src, bos_id=1, eos_id=2, max_steps=12, use_cache=True)
    assert torch.equal(cached, model.greedy_decode(src, 1, 2, 12, use_cache=False))


@pytest.mark.parametrize("sampling", [{"temperature": 0.0}, {"temperature": 1.0, "top_p": 0.9}])
def test_chapter_12s_gpt_writes_the_same_with_its_cache(sampling):
    torch.manual_seed(0)
    config = GPTConfig(30, 24, d_model=16, num_heads=2, num_layers=2, d_ff=32, position="rope")
    model = GPT(config).eval()
    ids = torch.randint(30, (3, 5), generator=torch.Generator().manual_seed(1))
    written = [
        generate(
            model, ids, 10, generator=torch.Generator().manual_seed(2), use_cache=use, **sampling
        )
        for use in (True, False)
    ]
    assert torch.equal(*written)


@pytest.mark.parametrize("attention", ["grouped-query", "latent"])
def test_chapter_16s_caches_stand_with_the_others(attention):
    torch.manual_seed(0)
    config = TodayConfig(
        vocab_size=30,
        d_model=16,
        num_heads=4,
        num_layers=2,
        d_ff=32,
        attention=attention,
        num_kv_heads=2,
        d_latent=6,
        d_rope=4,
    )
    model = TodayGPT(config).eval()
    ids = torch.randint(30, (3, 5), generator=torch.Generator().manual_seed(1))
    written = [generate_today(model, ids, 10, use_cache=use) for use in (True, False)]
    assert torch.equal(*written)
