"""helpers.gpt: the decoder-only model sees no later position, ties its output to its token
embedding, drops the feed-forward blocks when attention_only, decodes the same with and
without its key/value cache, and samples from exactly the distribution generate() documents."""

import copy
import dataclasses
import re

import pytest
import torch

from helpers import gpt
from helpers.attention import KeyValueCache, MultiHeadAttention
from helpers.gpt import GPT, GPTConfig, generate, next_token_probabilities, read_prompt
from helpers.masks import causal_mask
from helpers.positional import sinusoidal_encoding

CONFIG = GPTConfig(vocab_size=11, context_length=16, d_model=16, num_heads=2, num_layers=2, d_ff=32)


def small_gpt(**changes) -> GPT:
    torch.manual_seed(0)
    model = GPT(dataclasses.replace(CONFIG, **changes)).double()
    with torch.no_grad():  # sharper than GPT-2's initialisation, so that tokens differ
        model.tokens.weight.mul_(40)
    return model.eval()


def prompt(batch: int = 3, length: int = 4) -> torch.Tensor:
    return torch.randint(
        0, CONFIG.vocab_size, (batch, length), generator=torch.Generator().manual_seed(1)
    )


def test_logits_have_one_row_per_position():
    assert small_gpt()(prompt()).shape == (3, 4, CONFIG.vocab_size)


@pytest.mark.parametrize("attention_only", [False, True])
def test_position_t_sees_positions_0_to_t_only(attention_only):
    model = small_gpt(attention_only=attention_only)
    ids = prompt(2, 10)
    changed = ids.clone()
    changed[:, 6:] = (changed[:, 6:] + 1) % CONFIG.vocab_size
    before, after = model(ids), model(changed)
    torch.testing.assert_close(before[:, :6], after[:, :6], rtol=0, atol=0)
    assert not torch.allclose(before[:, 6:], after[:, 6:])


def test_the_output_layer_is_the_token_embedding():
    model = small_gpt()
    assert model.output.weight is model.tokens.weight
    names = [name for name, _ in model.named_parameters()]
    assert "output.weight" not in names and "tokens.weight" in names


def test_attention_only_drops_every_feed_forward_block():
    full, attention_only = small_gpt(), small_gpt(attention_only=True)
    assert all(block.ffn is None for block in attention_only.blocks)
    assert not any("ffn" in name for name, _ in attention_only.named_parameters())
    per_ffn = 2 * CONFIG.d_model * CONFIG.d_ff + CONFIG.d_ff + CONFIG.d_model + 2 * CONFIG.d_model
    difference = sum(p.numel() for p in full.parameters()) - sum(
        p.numel() for p in attention_only.parameters()
    )
    assert difference == CONFIG.num_layers * per_ffn  # the FFN and its LayerNorm, per layer


def test_a_cached_pass_equals_a_full_pass():
    model, ids = small_gpt(), prompt(2, 9)
    caches = model.new_caches()
    pieces = [model(ids[:, :5], caches)] + [model(ids[:, t : t + 1], caches) for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(pieces, dim=1), model(ids))
    assert all(len(cache) == 9 for cache in caches)


def test_greedy_is_the_argmax_written_out():
    model, ids = small_gpt(), prompt()
    written = ids
    for _ in range(5):
        written = torch.cat([written, model(written)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(generate(model, ids, 5, temperature=0), written)


@pytest.mark.parametrize(
    "sampling",
    [{"temperature": 0}, {}, {"temperature": 0.7, "top_k": 3}, {"temperature": 1.3, "top_p": 0.8}],
)
def test_the_cache_changes_no_token(sampling):
    model, ids = small_gpt(), prompt()
    cached = generate(model, ids, 8, generator=torch.Generator().manual_seed(2), **sampling)
    recomputed = generate(
        model, ids, 8, generator=torch.Generator().manual_seed(2), use_cache=False, **sampling
    )
    assert cached.shape == (3, 12) and torch.equal(cached[:, :4], ids)
    assert torch.equal(cached, recomputed)


def test_generate_leaves_the_model_in_its_mode_and_zero_new_tokens_returns_the_prompt():
    model, ids = small_gpt().train(), prompt()
    assert torch.equal(generate(model, ids, 0), ids)
    assert model.training


LOGITS = torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]], dtype=torch.float64)


def test_top_k_keeps_the_k_largest_renormalised():
    probabilities = next_token_probabilities(LOGITS, top_k=2)
    expected = torch.tensor([[1.0, torch.e**-1, 0, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(probabilities, expected / expected.sum())


def test_top_p_keeps_the_smallest_set_that_reaches_p_and_always_the_most_likely():
    full = LOGITS.softmax(-1)  # 0.636, 0.234, 0.086, ...
    kept = next_token_probabilities(LOGITS, top_p=0.8)  # 0.636 < 0.8 <= 0.636 + 0.234
    torch.testing.assert_close(kept[0, :2], full[0, :2] / full[0, :2].sum())
    assert kept[0, 2:].eq(0).all()
    only = next_token_probabilities(LOGITS, top_p=0.01)
    assert only[0, 0] == 1 and only[0, 1:].eq(0).all()


def test_temperature_divides_the_logits():
    torch.testing.assert_close(
        next_token_probabilities(LOGITS, temperature=2.0), (LOGITS / 2).softmax(-1)
    )


def test_logits_whose_difference_overflows_are_divided_by_the_temperature_first():
    """1e308 - (-1e308) overflowed to -inf before the division by 1e308, which gave [1, 0];
    logits beside a cut token (-inf) keep it at 0, and a subnormal difference stays exact."""
    huge = torch.tensor([[1e308, -1e308, float("-inf")]], dtype=torch.float64)
    expected = torch.tensor([1.0, -1.0]).double().softmax(-1)
    torch.testing.assert_close(next_token_probabilities(huge, 1e308)[0, :2], expected)
    assert next_token_probabilities(huge, 1e308)[0, 2] == 0
    tiny = torch.tensor([[5e-324, 0.0]], dtype=torch.float64)
    one_and_zero = torch.tensor([1.0, 0.0]).double().softmax(-1)
    torch.testing.assert_close(next_token_probabilities(tiny, 5e-324)[0], one_and_zero)


def test_sampling_follows_the_distribution():
    model = small_gpt()
    ids = prompt(1, 3).repeat(4000, 1)
    drawn = generate(model, ids, 1, top_k=3, generator=torch.Generator().manual_seed(0))[:, -1]
    expected = next_token_probabilities(model(ids[:1])[:, -1], top_k=3)[0]
    counts = torch.bincount(drawn, minlength=CONFIG.vocab_size).double() / len(drawn)
    assert (counts[expected == 0] == 0).all()
    assert (counts - expected).abs().max() < 0.03


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"d_model": 15}, r"d_model \(15\) must be divisible by num_heads \(2\)"),
        ({"vocab_size": 0}, "vocab_size must be a whole number >= 1"),
        ({"context_length": 2.0}, "context_length must be a whole number"),
        ({"num_layers": -1}, "num_layers must be a whole number >= 1"),
        ({"dropout": 1.5}, "dropout must be a probability"),
        ({"attention_only": "yes"}, "attention_only must be True or False"),
    ],
)
def test_a_bad_config_is_named(settings, message):
    with pytest.raises((ValueError, TypeError), match=message):
        dataclasses.replace(CONFIG, **settings)


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.zeros(2, 3), "ids must hold integer token ids"),
        (torch.zeros(2, 3, dtype=torch.int16), "ids must be int64 or int32 token ids"),
        (torch.zeros(2, 3, dtype=torch.uint8), "ids must be int64 or int32 token ids"),
        (torch.full((2, 3), 11), "outside the vocabulary 0..10"),
        (torch.full((2, 3), -1), "outside the vocabulary"),
        (torch.zeros(3, dtype=torch.long), r"ids must be \(B, T\)"),
        (torch.zeros(2, 0, dtype=torch.long), "at least one token"),
        (torch.zeros(2, 17, dtype=torch.long), "17 positions do not fit in the context of 16"),
        ([[1, 2]], "torch"),
        (torch.zeros(2, 3, dtype=torch.long, device="meta"), "meta device"),
    ],
)
def test_bad_ids_are_named(ids, message):
    with pytest.raises((ValueError, TypeError), match=message):
        small_gpt()(ids)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_new_tokens": -1}, "max_new_tokens must be a whole number >= 0"),
        ({"max_new_tokens": 13}, "4 prompt tokens \\+ 13 new ones do not fit in the context of 16"),
        ({"temperature": -0.5}, "temperature must be"),
        ({"top_k": 0}, "top_k must be a whole number >= 1"),
        ({"top_p": 0.0}, "top_p must be"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"generator": 3}, "generator must be a torch.Generator"),
        ({"use_cache": "no"}, "use_cache must be True or False"),
    ],
)
def test_bad_generation_settings_are_named(options, message):
    options = {"max_new_tokens": 2, **options}
    with pytest.raises((ValueError, TypeError), match=message):
        generate(small_gpt(), prompt(), **options)


def test_generate_names_a_model_that_is_not_a_gpt():
    with pytest.raises(TypeError, match="model must be a GPT, got Linear"):
        generate(torch.nn.Linear(2, 2), prompt(), 2)


def test_next_token_probabilities_refuses_nan_and_asks_for_argmax_at_temperature_zero():
    with pytest.raises(ValueError, match="NaN"):
        next_token_probabilities(torch.full((1, 3), float("nan")))
    with pytest.raises(ValueError, match=r"\+inf"):
        next_token_probabilities(torch.tensor([[0.0, float("inf")]]))
    with pytest.raises(ValueError, match="a row of logits is all -inf"):
        next_token_probabilities(torch.full((1, 3), float("-inf")))


def test_top_k_keeps_exactly_k_even_among_ties_and_top_p_one_keeps_everything():
    tied = next_token_probabilities(torch.tensor([[1.0, 1.0, 1.0, 0.0]]), top_k=1)
    assert (tied > 0).sum() == 1
    far = torch.tensor([[0.0, -40.0, -45.0, -50.0]], dtype=torch.float64)
    assert (next_token_probabilities(far, top_p=1.0) > 0).all()


def test_generate_keeps_the_prompts_dtype_and_never_returns_the_prompt_itself():
    model, ids = small_gpt(), prompt().int()
    assert generate(model, ids, 2, temperature=0).dtype == torch.int32
    unchanged = generate(model, ids, 0)
    assert torch.equal(unchanged, ids) and unchanged is not ids


@pytest.mark.parametrize("caches", [[], "caches", [None, None]])
def test_caches_must_be_one_per_layer(caches):
    with pytest.raises(ValueError, match="caches must be a list of 2 KeyValueCache"):
        small_gpt()(prompt(), caches)


@pytest.mark.parametrize("temperature", [10**400, float("inf"), float("nan")])
def test_a_temperature_that_is_not_finite_is_named(temperature):
    with pytest.raises(ValueError, match="temperature must be a finite number"):
        generate(small_gpt(), prompt(), 2, temperature=temperature)


def test_a_tiny_temperature_is_greedy_not_nan():
    probabilities = next_token_probabilities(LOGITS, temperature=1e-300)
    assert torch.equal(probabilities, torch.tensor([[1.0, 0, 0, 0, 0]], dtype=torch.float64))
    with pytest.raises(ValueError, match="temperature 0 is greedy"):
        next_token_probabilities(LOGITS, temperature=0)


@pytest.mark.parametrize("start", [-1, 2.5, "x", None])
def test_check_ids_names_a_start_that_is_not_a_count_of_positions(start):
    with pytest.raises(ValueError, match="start .* must be a whole number >= 0"):
        small_gpt().check_ids(prompt(), start)


def test_greedy_generation_refuses_nan_logits_instead_of_writing_their_position():
    model = small_gpt()
    with torch.no_grad():
        model.norm.bias.fill_(float("nan"))
    with pytest.raises(ValueError, match="logits hold NaN"):
        generate(model, prompt(), 2, temperature=0)


def test_generate_with_a_stop_id_writes_the_same_tokens_up_to_each_rows_first_stop():
    torch.manual_seed(0)
    model = GPT(GPTConfig(12, 40, 16, 2, 1, 32)).eval()
    prompt = torch.randint(0, 12, (6, 3))
    for temperature in (0.0, 1.5):
        plain = generate(model, prompt, 30, temperature, generator=torch.Generator().manual_seed(1))
        stopped = generate(
            model, prompt, 30, temperature, generator=torch.Generator().manual_seed(1), stop_id=5
        )
        assert stopped.shape == plain.shape == (6, 33)
        for row, stopped_row in zip(plain.tolist(), stopped.tolist(), strict=True):
            end = row.index(5, 3) + 1 if 5 in row[3:] else len(row)
            assert stopped_row[:end] == row[:end]
            assert set(stopped_row[end:]) <= set(row[end:]) | {5}


def test_generate_stops_early_and_fills_with_the_stop_id_once_every_row_has_stopped():
    torch.manual_seed(0)
    model = GPT(GPTConfig(12, 40, 16, 2, 1, 32)).eval()
    prompt = torch.randint(0, 12, (1, 3))
    first = int(generate(model, prompt, 1, temperature=0)[0, -1])
    written = generate(model, prompt, 20, temperature=0, stop_id=first)  # stops after one step
    assert written.shape == (1, 23) and (written[0, 3:] == first).all()
    assert torch.equal(written[:, :3], prompt)


@pytest.mark.parametrize("stop_id", [-1, 12, 2.5, "2"])
def test_generate_refuses_a_stop_id_outside_the_vocabulary(stop_id):
    model = GPT(GPTConfig(12, 40, 16, 2, 1, 32))
    with pytest.raises((ValueError, TypeError), match="stop_id"):
        generate(model, torch.zeros(1, 2, dtype=torch.long), 3, stop_id=stop_id)


# --- hostile input: caches that cannot be right, sizes nobody can allocate, +inf logits ----


def filled_caches(model: GPT, ids: torch.Tensor) -> list[KeyValueCache]:
    caches = model.new_caches()
    model(ids, caches)
    return caches


def shared_cache(model, ids):
    return [KeyValueCache()] * len(model.blocks)  # one object for every layer


def one_layer_emptied(model, ids):
    caches = filled_caches(model, ids)
    caches[1] = KeyValueCache()
    return caches


def first_layer_emptied(model, ids):
    caches = filled_caches(model, ids)
    caches[0] = KeyValueCache()
    return caches


def one_layer_cut(model, ids):
    caches = filled_caches(model, ids)
    caches[1].keys, caches[1].values = caches[1].keys[:, :, :2], caches[1].values[:, :, :2]
    return caches


def another_batch(model, ids):
    return filled_caches(model, ids[:2])


def another_model(model, ids):
    return filled_caches(small_gpt(d_model=32), ids)


def another_dtype(model, ids):
    caches = filled_caches(model, ids)
    for cache in caches:
        cache.keys, cache.values = cache.keys.float(), cache.values.float()
    return caches


def keys_without_values(model, ids):
    caches = filled_caches(model, ids)
    caches[0].values = None
    return caches


def keys_as_a_list(model, ids):
    caches = filled_caches(model, ids)
    caches[0].keys = caches[0].keys.tolist()
    return caches


def meta_keys(model, ids):
    caches = filled_caches(model, ids)
    for cache in caches:
        cache.keys, cache.values = cache.keys.to("meta"), cache.values.to("meta")
    return caches


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (shared_cache, r"one cache object serves several layers \(\[KeyValueCache\(\)\] \* n"),
        (one_layer_emptied, r"same positions of the same rows, got layer 0: \(3, 2, 4, 8\), "),
        (first_layer_emptied, "layer 0: empty, layer 1: "),
        (one_layer_cut, r"layer 1: \(3, 2, 2, 8\): caches from one model's passes"),
        (another_batch, "the caches hold 2 rows but ids has 3"),
        (another_model, r"the caches hold keys \(3, 2, 4, 16\), torch.float64 on cpu; this model"),
        (another_dtype, "torch.float32 on cpu; this model's layers make .*torch.float64"),
        (keys_without_values, r"caches\[0\] must hold values .* got NoneType"),
        (keys_as_a_list, r"caches\[0\] must hold keys .* got list"),
        (meta_keys, r"caches\[0\] must hold keys .* got a meta tensor"),
    ],
)
def test_caches_that_cannot_be_right_are_refused_before_decoding(make, message):
    """A shared, emptied or cut cache used to decode without complaint, its logits off."""
    model, ids = small_gpt(), prompt(3, 4)
    caches = make(model, ids)
    kept = [(cache.keys, cache.values) for cache in caches]
    with pytest.raises(ValueError, match=message):
        model(ids[:, :1], caches)
    assert [(cache.keys, cache.values) for cache in caches] == kept  # nothing was appended


@pytest.mark.parametrize("filled", [True, False])
def test_caches_made_or_filled_by_another_model_of_the_same_sizes_are_refused(filled):
    """Another GPT's caches of the same shape gave logits from that model's keys and values."""
    model, other, ids = small_gpt(), small_gpt(), prompt(3, 4)
    caches = filled_caches(other, ids) if filled else other.new_caches()
    kept = [(cache.keys, cache.values) for cache in caches]
    with pytest.raises(ValueError, match=r"caches\[0\] was made or filled by another model"):
        model(ids[:, :1], caches)
    with pytest.raises(ValueError, match=r"caches\[0\] was made or filled by another model"):
        model.features(ids[:, :1], caches)
    assert [(cache.keys, cache.values) for cache in caches] == kept  # nothing was appended
    own = [KeyValueCache() for _ in model.blocks]  # made by no model: the first pass fills them
    model(ids[:, :3], own)
    with pytest.raises(ValueError, match=r"caches\[0\] was made or filled by another model"):
        other(ids[:, 3:], own)
    torch.testing.assert_close(model(ids[:, 3:], own)[:, -1], model(ids)[:, -1])


@pytest.mark.parametrize("copied", [copy.copy, copy.deepcopy], ids=["copy", "deepcopy"])
@torch.no_grad()  # deepcopy takes only tensors outside a graph
def test_a_copy_of_another_models_caches_is_refused_and_ones_own_taken(copied):
    """A copied cache lost its owner, so another GPT of the same sizes read its keys."""
    model, other, ids = small_gpt(), small_gpt(), prompt(3, 4)
    caches = filled_caches(other, ids[:, :3])
    with pytest.raises(ValueError, match=r"caches\[0\] was made or filled by another model"):
        model(ids[:, 3:], [copied(cache) for cache in caches])
    own = filled_caches(model, ids[:, :3])
    torch.testing.assert_close(
        model(ids[:, 3:], [copied(cache) for cache in own])[:, -1], model(ids)[:, -1]
    )


def test_caches_from_one_models_passes_are_taken_as_a_tuple_too():
    model, ids = small_gpt(), prompt(3, 5)
    caches = tuple(filled_caches(model, ids[:, :4]))
    torch.testing.assert_close(model(ids[:, 4:], caches)[:, -1], model(ids)[:, -1])


@pytest.mark.parametrize("kind", ["+inf", "nan", "all -inf"])
@pytest.mark.parametrize("temperature", [0, 1.0])
def test_greedy_and_sampling_refuse_logits_no_token_can_be_chosen_from(kind, temperature):
    """Greedy used to take the first +inf as a token, and a row of -inf as token 0. The model
    itself refuses to write such logits, and generate a reading whose logits were replaced,
    so they go straight to what generate chooses a token with."""
    model, ids = small_gpt(), prompt()
    read = read_prompt(model, ids)
    logits = read.logits.clone()  # (B, V)
    if kind == "all -inf":
        logits[1] = float("-inf")
    else:
        logits[1, 3] = float(kind)
    message = {"+inf": r"NaN or \+inf", "nan": r"NaN or \+inf", "all -inf": "all -inf"}[kind]
    with pytest.raises(ValueError, match=message):
        if temperature == 0:
            gpt.check_logits(logits)  # greedy's guard
        else:
            next_token_probabilities(logits, temperature)
    with pytest.raises(ValueError, match="read's ids, logits or caches were changed"):
        generate(model, ids, 2, temperature, read=dataclasses.replace(read, logits=logits))


@pytest.mark.parametrize("use_cache", [False, True])
@pytest.mark.parametrize(
    ("weight", "value", "message"),
    [
        ("norm.bias", float("nan"), r"the model's weights make them \(norm.bias holds NaN or inf"),
        (
            "tokens.weight",
            3e38,  # finite in float32, but its logits are not
            r"the logits overflow to inf or NaN in torch.float32, .*\(up to 3e\+38, in tokens",
        ),
    ],
)
def test_a_forward_pass_refuses_logits_its_weights_make_nan_or_inf(
    use_cache, weight, value, message
):
    """Without caches it returned NaN logits quietly (with caches it refused them)."""
    model, ids = small_gpt().float(), prompt()
    with torch.no_grad():
        model.get_parameter(weight).fill_(value)
    with pytest.raises(ValueError, match=message):
        model(ids, model.new_caches() if use_cache else None)
    with pytest.raises(ValueError, match=message):
        generate(model, ids, 2, temperature=0, use_cache=use_cache)


def test_a_stack_of_more_layers_than_any_model_here_is_refused_before_it_is_built():
    """num_layers=20000 took over 20 s to build; 10**6 was accepted."""
    for layers in (65, 20000, 10**6):
        with pytest.raises(ValueError, match=f"num_layers must be at most 64 blocks, got {layers}"):
            GPTConfig(
                vocab_size=11, context_length=16, d_model=8, num_heads=2, num_layers=layers, d_ff=16
            )
    assert len(GPT(dataclasses.replace(CONFIG, num_layers=64)).blocks) == 64


def test_a_read_prompt_whose_ids_are_not_a_tensor_is_named():
    """An AttributeError: 'str' object has no attribute 'shape'."""
    model, ids = small_gpt(), prompt()
    read = dataclasses.replace(read_prompt(model, ids), ids="x")
    with pytest.raises(TypeError, match="read.ids must be the prompt ids read_prompt kept .* str"):
        generate(model, ids, 2, read=read)


def test_a_cache_holding_something_else_is_named_by_len_and_nbytes():
    """len(cache) and cache.nbytes raised AttributeError for keys that were a str."""
    cache = KeyValueCache()
    cache.keys = "abc"
    for measure in (len, lambda c: c.nbytes):
        with pytest.raises(ValueError, match="cache must hold keys .* got str"):
            measure(cache)


def test_a_model_is_copied_after_a_forward_pass_that_kept_its_graph():
    """deepcopy refused the attention weights a grad-mode pass kept (not graph leaves)."""
    model, ids = small_gpt(), prompt()
    model(ids)
    twin = copy.deepcopy(model)
    torch.testing.assert_close(twin(ids), model(ids))
    assert all(weights.grad_fn is None for weights in model.attention_maps())


@pytest.mark.parametrize(
    "sizes",
    [
        {"vocab_size": 2**40},
        {"context_length": 2**36},
        {"d_model": 2**30, "num_heads": 1},
        {"d_ff": 2**40},
        {"num_layers": 10**9},
        {"vocab_size": 10**400},
    ],
)
def test_a_config_nobody_can_allocate_is_refused_by_its_parameter_count(sizes):
    with pytest.raises(ValueError, match="this config asks for .* parameters, more than"):
        GPTConfig(**{**dataclasses.asdict(CONFIG), **sizes})


@pytest.mark.parametrize("position", gpt.POSITIONS)
@pytest.mark.parametrize("attention_only", [False, True])
@pytest.mark.parametrize(
    "sizes", [{}, {"num_layers": 1, "d_ff": 3}, {"vocab_size": 2, "num_heads": 4}]
)
def test_the_parameter_count_of_a_config_is_what_the_model_holds(attention_only, sizes, position):
    config = dataclasses.replace(CONFIG, attention_only=attention_only, position=position, **sizes)
    assert config.parameter_count() == sum(p.numel() for p in GPT(config).parameters())


def test_a_forward_pass_too_large_to_allocate_is_refused_by_its_size():
    model, ids = small_gpt(), prompt(1, 4).expand(10**9, -1)  # a view: nothing allocated yet
    with pytest.raises(ValueError, match="ids: 1,000,000,000 rows x 4 positions would make"):
        model(ids)
    with pytest.raises(ValueError, match="ids: 1,000,000,000 rows x 4 positions would make"):
        generate(model, ids, 2)
    rows = prompt(1, 1).expand(10**6, -1)  # one forward pass fits, the last step without cache not
    with pytest.raises(ValueError, match="ids: 1,000,000 rows x 16 positions would make"):
        generate(model, rows, 15, use_cache=False)
    assert model(prompt(1, 4).expand(8, -1)).shape == (8, 4, CONFIG.vocab_size)


def test_sampling_too_large_to_hold_is_refused_before_any_work():
    """10,000 rows of one token at top-p 0.9 from a vocabulary of 8,001 passed the forward
    pass's size check and took 3.45 GB: the sampling step's full-vocabulary float64 tensors."""
    model = small_gpt(vocab_size=8001)
    most = gpt.LARGEST_ACTIVATION // (gpt.SAMPLING_COPIES * 2 * model.config.vocab_size)
    gpt.check_sampling_size(model.config, most, 1.0)
    rows = prompt(1, 1).expand(most + 1, -1)  # a view: nothing allocated yet
    hook = model.register_forward_pre_hook(lambda *_: pytest.fail("the model was run"))
    message = f"ids: sampling {most + 1:,} rows from a vocabulary of 8,001 holds"
    with pytest.raises(ValueError, match=message):
        generate(model, rows, 1, 1.0, top_p=0.9, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=f"sample at most {most:,} rows at a time") as caught:
        gpt.check_sampling_size(model.config, most + 1, 0.5, "ids")
    needed = (most + 1) * gpt.SAMPLING_COPIES * 2 * model.config.vocab_size * 4
    assert f"{needed:,} bytes, more than 1 GiB = {2**30:,} bytes" in str(caught.value)
    hook.remove()
    assert generate(model, rows, 1, temperature=0).shape == (most + 1, 2)  # greedy: an argmax
    assert generate(model, rows, 0, 1.0).shape == (most + 1, 1)  # nothing drawn


def test_generate_says_where_its_draws_come_from_without_a_generator():
    assert "torch's global generator" in generate.__doc__


@pytest.mark.parametrize(
    ("logits", "message"),
    [
        (LOGITS.to("meta"), "logits must be an ordinary dense tensor, got one on the meta"),
        (LOGITS.to_sparse(), "logits must be an ordinary dense tensor, got one torch.sparse"),
    ],
)
def test_next_token_probabilities_refuses_a_tensor_without_numbers(logits, message):
    with pytest.raises(ValueError, match=message):
        next_token_probabilities(logits)


def full_sort_top_p(logits: torch.Tensor, top_p: float) -> torch.Tensor:
    """Top-p written with one sort of the whole vocabulary: the reference for the helper,
    which orders only the most likely tokens."""
    probabilities = (logits.double() - logits.double().amax(-1, keepdim=True)).softmax(-1)
    ordered, order = probabilities.sort(dim=-1, descending=True)
    keep = torch.zeros_like(ordered, dtype=torch.bool).scatter(
        -1, order, ordered.cumsum(-1) - ordered < top_p
    )
    kept = probabilities.masked_fill(~keep, 0.0)
    return (kept / kept.sum(-1, keepdim=True)).to(logits.dtype)


@pytest.mark.parametrize("kind", ["random", "ties", "uniform", "-inf", "float16", "wide"])
def test_top_p_equals_a_full_sort_bit_for_bit(kind):
    """Ordering only the likeliest tokens keeps the same tokens as sorting them all, ties at
    the nucleus's edge included (where sort's order decides)."""
    generator = torch.Generator().manual_seed(5)
    for trial in range(60):
        shape = (3, 900 if kind == "wide" else 1 + trial * 7)
        logits = torch.randn(shape, generator=generator, dtype=torch.float64) * 4
        if kind == "ties":
            logits = logits.round()
        elif kind == "uniform":
            logits = torch.zeros(shape, dtype=torch.float64)
        elif kind == "-inf":
            logits[:, 1:][logits[:, 1:] < 0] = float("-inf")
        elif kind == "float16":
            logits = logits.half()
        for top_p in (0.05, 0.25, 0.5, 0.75, 0.9, 0.999):
            expected = full_sort_top_p(logits, top_p)
            assert torch.equal(next_token_probabilities(logits, top_p=top_p), expected)


@pytest.mark.parametrize(
    "sampling", [{"temperature": 0}, {"temperature": 1.3, "top_p": 0.8}, {"top_k": 3}]
)
def test_writing_from_a_prompt_read_before_gives_the_same_tokens(sampling):
    model, ids = small_gpt(), prompt(4, 3)
    read = read_prompt(model, ids)
    kept = [(cache.keys, cache.values) for cache in read.caches]
    for seed in range(3):
        plain = generate(model, ids, 6, generator=torch.Generator().manual_seed(seed), **sampling)
        again = generate(
            model, ids, 6, generator=torch.Generator().manual_seed(seed), read=read, **sampling
        )
        assert torch.equal(plain, again)
    assert [(cache.keys, cache.values) for cache in read.caches] == kept  # left as it was


@pytest.mark.parametrize(
    ("make", "options", "message"),
    [
        (lambda m, ids: "read", {}, "read must be what read_prompt made, got str"),
        (lambda m, ids: read_prompt(m, ids[:, :2]), {}, r"read is the reading of other ids"),
        (lambda m, ids: read_prompt(m, ids.flip(0)), {}, r"read is the reading of other ids"),
        (lambda m, ids: read_prompt(m, ids), {"use_cache": False}, "needs use_cache=True"),
        (
            lambda m, ids: read_prompt(small_gpt(d_model=32), ids),
            {},
            "read is another model's reading",
        ),
    ],
)
def test_a_read_prompt_that_is_not_this_prompts_is_refused(make, options, message):
    model, ids = small_gpt(), prompt(3, 4)
    with pytest.raises((TypeError, ValueError), match=message):
        generate(model, ids, 2, read=make(model, ids), **options)


HUGE = 10**5000  # more digits than Python writes out (4,300): a message must not try


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: GPTConfig(HUGE, 10, 8, 2, 2, 16), "asks for about 10\\^5000 parameters"),
        (lambda: GPTConfig(12, 10, 8, 2, 2, 16, dropout=HUGE), "dropout must be a probability"),
        (lambda: generate(small_gpt(), prompt(), HUGE), "about 10\\^5000 new ones do not fit"),
        (
            lambda: generate(small_gpt(), prompt(), 2, stop_id=HUGE),
            "stop_id an int too large to print",
        ),
        (lambda: small_gpt().check_ids(prompt(), HUGE), "about 10\\^5000 positions do not fit"),
    ],
)
def test_a_number_too_long_to_print_is_named_not_a_python_digit_limit(call, message):
    with pytest.raises(ValueError, match=message) as raised:
        call()
    assert "Exceeds the limit" not in str(raised.value)


def test_a_reading_by_another_model_of_the_same_config_is_refused():
    """Its caches fit this model's layers, so generate wrote from another model's reading."""
    model, other, ids = small_gpt(), small_gpt(), prompt(3, 4)
    with pytest.raises(ValueError, match="read is another model's reading of these ids"):
        generate(model, ids, 2, read=read_prompt(other, ids))


# --- the size guard's own arguments, and a pass that would need gigabytes -------------------


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((CONFIG, -5, 10**9, 1), ValueError, "rows must be a whole number >= 0, got -5"),
        ((CONFIG, 1.5, 4, 4), ValueError, "rows must be a whole number >= 0, got 1.5"),
        ((CONFIG, "a", 4, 4), ValueError, "rows must be a whole number >= 0, got 'a'"),
        ((CONFIG, None, 4, 4), ValueError, "rows must be a whole number >= 0, got None"),
        ((CONFIG, 1, -1, 4), ValueError, "positions must be a whole number >= 0, got -1"),
        ((CONFIG, 1, 4, 2.0), ValueError, "keys must be a whole number >= 0, got 2.0"),
        (("x", 1, 1, 1), TypeError, "config must be a GPTConfig, got str"),
        ((CONFIG, 1, 1, 1, 5), TypeError, "name must be a str"),
        ((CONFIG, 1, 1, 1, "ids", 5), TypeError, "keys_name must be a str or None, got 5"),
    ],
)
def test_check_forward_size_names_an_argument_that_is_not_a_size(arguments, error, message):
    """-5 rows passed (a negative count of numbers), 'x' was an AttributeError and 'a' or
    None a TypeError from Python's arithmetic."""
    with pytest.raises(error, match=message):
        gpt.check_forward_size(*arguments)


@pytest.mark.parametrize("number", [float("nan"), None, "x", -1, 2.5])
def test_shown_count_names_what_is_not_a_count(number):
    with pytest.raises(ValueError, match="number .* must be a whole number >= 0"):
        gpt.shown_count(number)


@pytest.mark.parametrize("digits", [16, 17, 40, 300, 5000])
def test_shown_count_gives_the_power_of_ten_of_the_leading_digit(digits):
    """10^16 - 1 was shown as 'about 10^16': math.log10 of it rounds up to 16.0."""
    below, at = 10**digits - 1, 10**digits
    assert gpt.shown_count(below) == f"about 10^{digits - 1}"
    assert gpt.shown_count(at) == gpt.shown_count(at + 1) == f"about 10^{digits}"
    assert gpt.shown_count(2 * at) == f"about 10^{digits}"


def test_a_forward_pass_whose_intermediates_need_gigabytes_is_refused():
    """10^6 rows of 16 positions passed the per-tensor bound of 2^31 numbers, then made several
    tensors of 2-4 GB (the attention weights, the feed-forward's hidden layer)."""
    model = GPT(GPTConfig(50, 16, 32, 4, 2, 64))
    ids = torch.zeros(1, 16, dtype=torch.long).expand(10**6, -1)  # a view: nothing allocated
    with pytest.raises(ValueError, match="1,000,000 rows x 16 positions .* more than 2\\^28"):
        model(ids)
    assert gpt.LARGEST_ACTIVATION * 4 <= 2**30  # the limit stated: 1 GiB of float32


def test_a_forward_size_message_reads_one_row_and_one_position_and_no_doubled_word():
    """It said '1 rows x ...' and 'the the feed-forward's hidden layer'."""
    config = GPTConfig(50, 16, 32, 4, 2, 64)  # d_ff, the widest of a pass's tensors
    many = gpt.LARGEST_ACTIVATION // config.d_ff + 1
    with pytest.raises(ValueError, match=f"ids: 1 row x {many:,} positions would") as caught:
        gpt.check_forward_size(config, 1, many, 1)
    assert "(x 64: the feed-forward's hidden layer, d_ff 64)" in str(caught.value)
    with pytest.raises(ValueError, match=f"ids: {many:,} rows x 1 position would"):
        gpt.check_forward_size(config, many, 1, 1)


def test_a_block_names_a_config_that_is_not_one():
    with pytest.raises(TypeError, match="config must be a GPTConfig, got NoneType"):
        gpt.GPTBlock(None)


# Positions: a learned table, fixed sinusoids, or RoPE


@pytest.mark.parametrize("position", gpt.POSITIONS)
def test_decoding_with_the_cache_gives_the_logits_of_one_full_pass(position):
    model = small_gpt(position=position).double()
    ids = prompt(3, 12)
    caches = model.new_caches()
    stepped = torch.cat(
        [model(ids[:, :5], caches)] + [model(ids[:, t : t + 1], caches) for t in range(5, 12)], 1
    )
    torch.testing.assert_close(stepped, model(ids), rtol=0, atol=1e-12)


def test_sinusoidal_positions_add_chapter_05s_encoding_and_are_no_weight():
    model, ids, seen = small_gpt(position="sinusoidal"), prompt(2, 7), []
    model.blocks[0].register_forward_pre_hook(lambda block, inputs: seen.append(inputs[0]))
    with torch.no_grad():
        model(ids)
        expected = model.tokens(ids) + sinusoidal_encoding(CONFIG.context_length, 16)[:7].double()
    torch.testing.assert_close(seen[0], expected, rtol=0, atol=0)  # what the first block reads
    assert "sinusoids" not in model.state_dict() and model.positions is None


def test_rope_turns_queries_and_keys_so_a_score_depends_on_the_offset_only():
    model = small_gpt(position="rope", num_layers=1).eval()
    log_weights = {}
    for length in (6, 9):  # one token repeated: the last query's scores differ by offset only
        with torch.no_grad():
            model(torch.full((1, length), 3))
        last = model.attention_maps()[0][0, 0, length - 1].log()  # (length,), keys 0..length-1
        log_weights[length] = last.flip(0)[:6] - last[-1]  # offsets 0..5, relative to offset 0
    torch.testing.assert_close(log_weights[6], log_weights[9], rtol=0, atol=1e-9)
    assert model.positions is None and "positions.weight" not in model.state_dict()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"position": "alibi"}, "position must be one of learned, sinusoidal, rope, got 'alibi'"),
        ({"position": None}, "position must be one of learned, sinusoidal, rope, got None"),
        (
            {"position": "rope", "d_model": 18, "num_heads": 6},
            "rope turns pairs of dimensions: each head's size, d_model / num_heads = 3",
        ),
    ],
)
def test_a_position_a_gpt_cannot_use_is_refused_by_its_config(changes, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        dataclasses.replace(CONFIG, **changes)


def test_rope_attention_refuses_queries_and_keys_of_different_lengths():
    attention = MultiHeadAttention(8, 2, rope=True)
    with pytest.raises(ValueError, match="rope is for self-attention, .* 3 queries and 5 keys"):
        attention(torch.zeros(1, 3, 8), torch.zeros(1, 5, 8), torch.zeros(1, 5, 8))


# --- a sixth hostile pass: a block's own input, check_room, a refused pass's caches ---------

HOSTILE = GPTConfig(50, 16, 32, 4, 2, 64)
BLOCK_INPUT = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.zeros(2, 5, 31), r"x must be \(B, n, d_model\) = \(B, n, 32\).* got .*\(2, 5, 31\)"),
        (BLOCK_INPUT.long(), r"torch.float32 on cpu as the block's weights, got torch.int64"),
        (BLOCK_INPUT.double(), r"torch.float32 on cpu as the block's weights, got torch.float64"),
        (BLOCK_INPUT[None], r"x must be \(B, n, d_model\).* got .*\(1, 2, 5, 32\)"),
        (BLOCK_INPUT[:, :0], r"B and n >= 1, .* got .*\(2, 0, 32\)"),
        (BLOCK_INPUT.numpy(), "x must be a torch.Tensor .* got a numpy array"),
        (None, "x must be a torch.Tensor .* got NoneType"),
        (BLOCK_INPUT.to("meta"), "x must be an ordinary dense tensor, got one on the meta"),
        (torch.full((2, 5, 32), float("nan")), "x holds NaN or inf"),
        (BLOCK_INPUT.index_fill(1, torch.tensor([3]), float("inf")), "x holds NaN or inf"),
    ],
    ids=[
        "width 31",
        "int",
        "float64",
        "4-d",
        "no positions",
        "numpy",
        "None",
        "meta",
        "nan",
        "inf",
    ],
)
def test_a_block_names_an_input_it_cannot_read(x, message):
    """torch's LayerNorm said 'mixed dtype (CPU)' or 'expected input with shape [*, 32]', a meta
    x took 18 s to fail on another device, and an all-NaN x came back as NaN."""
    block = gpt.GPTBlock(HOSTILE).eval()
    with pytest.raises(ValueError, match=message):
        block(x, None)


def test_a_block_reads_a_right_input_and_a_gpt_skips_the_blocks_own_check(monkeypatch):
    """The check is at the block's door: GPT's own pass, whose ids were checked, never pays it
    (and its blocks' hooks still run)."""
    torch.manual_seed(0)
    model = GPT(HOSTILE).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    block, mask = model.blocks[0], causal_mask(5)
    x = model.tokens(ids) + model.positions(torch.arange(5))
    torch.testing.assert_close(block(x, mask), block(x, mask, check_input=False), rtol=0, atol=0)
    expected = model(ids)

    def refuse(*args):
        raise AssertionError("GPT's pass checked a block's input")

    monkeypatch.setattr(gpt.GPTBlock, "_check_input", refuse)
    torch.testing.assert_close(model(ids), expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((HOSTILE, 4, -5), ValueError, "max_new_tokens must be a whole number >= 0, got -5"),
        ((HOSTILE, -20, 30), ValueError, "prompt_length must be a whole number >= 0, got -20"),
        ((HOSTILE, 1, 1.5), ValueError, r"max_new_tokens must be a whole number >= 0, got 1\.5"),
        ((HOSTILE, float("nan"), 1), ValueError, "prompt_length must be .* got nan"),
        ((HOSTILE, 1, True), ValueError, "max_new_tokens must be .* got True"),
        ((HOSTILE, "4", 1), ValueError, "prompt_length must be .* got '4'"),
        ((HOSTILE, 1, None), ValueError, "max_new_tokens must be .* got None"),
        ((None, 1, 1), TypeError, "config must be a GPTConfig, got NoneType"),
        (({"context_length": 16}, 1, 1), TypeError, "config must be a GPTConfig, got dict"),
        ((HOSTILE, 10, 7), ValueError, "10 prompt tokens \\+ 7 new ones do not fit .* of 16"),
    ],
)
def test_check_room_names_what_is_not_a_count_or_does_not_fit(arguments, error, message):
    """It checked nothing: negative, fractional, NaN and True counts passed as room to write."""
    with pytest.raises(error, match=message):
        gpt.check_room(*arguments)
    gpt.check_room(HOSTILE, 10, 6)  # exactly the context


def test_a_pass_refused_for_its_logits_leaves_the_caches_as_they_were_and_names_the_weight():
    """The refused pass grew the caches by its 4 positions, and the next pass blamed them:
    'caches[0].keys hold NaN or inf, which no layer makes', though layer 0's NaN W_k made them."""
    torch.manual_seed(0)
    model = GPT(HOSTILE).eval()
    ids = torch.tensor([[1, 2, 3, 4]])
    caches = model.new_caches()
    model(ids[:, :2], caches)
    held = [(cache.keys, cache.values) for cache in caches]
    with torch.no_grad():
        model.blocks[0].attention.W_k.weight.fill_(float("nan"))
    named = r"the model's weights make them \(blocks\.0\.attention\.W_k\.weight holds NaN"
    for newest in (ids[:, 2:], ids[:, 3:]):
        with pytest.raises(ValueError, match=named):
            model(newest, caches)
        assert all(
            cache.keys is keys and cache.values is values
            for cache, (keys, values) in zip(caches, held, strict=True)
        )
    empty = model.new_caches()
    with pytest.raises(ValueError, match=named):
        model(ids, empty)
    assert all(len(cache) == 0 and cache.keys is None for cache in empty)


# After a sixth hostile pass over chapter 12.


def test_a_numpy_string_position_is_kept_as_a_str_a_checkpoint_can_hold():
    """np.str_('learned') was kept, and saving the model's config then failed in torch."""
    import numpy as np

    config = GPTConfig(30, 24, 8, 2, 2, 16, position=np.str_("rope"))
    assert type(config.position) is str and config.position == "rope"


def test_a_sinusoid_table_too_large_to_build_is_refused_by_the_config():
    """GPT() built the (2^26, 32) table in float64, 8 GiB, for a config of 5,000 parameters."""
    sizes = {"context_length": 2**26, "d_model": 32, "num_heads": 4, "position": "sinusoidal"}
    with pytest.raises(
        ValueError, match=r"a sinusoid table of 2,147,483,648 numbers \(each counted as 4"
    ):
        GPTConfig(**{**dataclasses.asdict(CONFIG), **sizes})
    assert dataclasses.replace(CONFIG, position="sinusoidal").sinusoid_count() == 16 * 16
    assert CONFIG.sinusoid_count() == 0


def test_an_odd_width_with_sinusoidal_positions_is_refused_by_the_config():
    """The config took d_model 33; GPT() refused it later, in helpers.positional."""
    with pytest.raises(ValueError, match="sin/cos pairs: d_model must be even, got 33"):
        dataclasses.replace(CONFIG, d_model=33, num_heads=3, position="sinusoidal")


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_ids_are_named_before_their_shape_is_read():
    """GPT(nested ids) reached torch's 'NestedTensorImpl doesn't support sizes'."""
    ids = torch.nested.nested_tensor([torch.zeros(3, dtype=torch.long), torch.zeros(2).long()])
    with pytest.raises(ValueError, match="ids must be an ordinary dense tensor, got one nested"):
        small_gpt()(ids)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (([1.0],), r"logits must be a floating-point tensor, got \[1.0\]"),
        ((torch.zeros(1, 1, 11, dtype=torch.long),), "logits must be a floating-point tensor"),
        ((torch.zeros(1, 1, 11), "x"), "caches must be the list of caches the pass read"),
    ],
)
def test_check_finite_logits_names_what_is_not_logits_or_caches(arguments, message):
    """A list of logits and caches 'x' raised AttributeError."""
    with pytest.raises(TypeError, match=message):
        small_gpt().check_finite_logits(*arguments)


def test_nan_logits_of_a_model_of_small_weights_are_not_blamed_on_their_size():
    """The message said 'the weights being too large for it (up to 0.0757)'."""
    torch.manual_seed(0)
    model = GPT(CONFIG)
    assert max(weight.abs().max() for weight in model.state_dict().values()) <= 1
    with pytest.raises(ValueError, match="finite and small .* another model") as caught:
        model.check_finite_logits(torch.full((1, 1, 11), float("nan")))
    assert "too large" not in str(caught.value)


@pytest.mark.parametrize("check_input", ["", "False", 0, None])
def test_a_blocks_check_input_must_be_a_flag(check_input):
    """'' skipped the checks (falsy), and a NaN input passed through unnamed."""
    block = gpt.GPTBlock(CONFIG)
    with pytest.raises(ValueError, match="check_input must be True or False"):
        block(torch.full((1, 2, 16), float("nan")), None, None, check_input)


def test_a_reading_made_before_the_weights_changed_in_place_is_refused():
    """generate(..., read=...) wrote from the old weights' caches and logits without a word."""
    model, ids = small_gpt(), prompt(1, 3)
    read = read_prompt(model, ids)
    assert torch.equal(generate(model, ids, 5, 0, read=read), generate(model, ids, 5, 0))
    with torch.no_grad():
        model.tokens.weight.mul_(0.5)
    with pytest.raises(ValueError, match="before it was changed"):
        generate(model, ids, 5, 0, read=read)
    assert torch.equal(
        generate(model, ids, 5, 0, read=read_prompt(model, ids)), generate(model, ids, 5, 0)
    )


# After a seventh hostile pass over chapter 12.


def replace_parameters(model: GPT) -> None:
    model.load_state_dict(GPT(CONFIG).double().state_dict(), assign=True)


def replace_query_projection(model: GPT) -> None:
    model.blocks[0].attention.W_q = torch.nn.Linear(16, 16).double()


CHANGES_TORCH_DOES_NOT_COUNT = {
    "edit through .data": lambda m: m.tokens.weight.data.mul_(-3),
    "sign flip through .data": lambda m: m.norm.weight.data.mul_(-1),
    "new .data": lambda m: setattr(m.tokens.weight, "data", m.tokens.weight.data * 0.5),
    "load_state_dict(assign=True)": replace_parameters,
    "a hook added": lambda m: m.blocks[0].register_forward_hook(lambda mod, i, out: out * 0),
    "a pre-hook added": lambda m: m.norm.register_forward_pre_hook(lambda mod, i: None),
    "a round trip through float32": lambda m: m.float().double(),
    "a module replaced": replace_query_projection,
}


@pytest.mark.parametrize(
    "change", CHANGES_TORCH_DOES_NOT_COUNT.values(), ids=list(CHANGES_TORCH_DOES_NOT_COUNT)
)
def test_a_reading_made_before_a_change_no_version_counts_is_refused(change):
    """generate(..., read=...) compared the weights' versions only, which none of these
    changes: it wrote from the old model's caches and logits."""
    model, ids = small_gpt(), prompt(1, 3)
    read = read_prompt(model, ids)
    change(model)
    assert gpt.is_current(read, model) is False
    with pytest.raises(ValueError, match="before it was changed .* read them again"):
        generate(model, ids, 5, 0, read=read)
    assert torch.equal(
        generate(model, ids, 5, 0, read=read_prompt(model, ids)), generate(model, ids, 5, 0)
    )


def test_a_reading_made_under_a_hook_is_refused_once_the_hook_is_removed():
    model, ids = small_gpt(), prompt(1, 3)
    handle = model.blocks[0].register_forward_hook(lambda module, inputs, output: output * 0)
    read = read_prompt(model, ids)
    assert gpt.is_current(read, model)
    handle.remove()
    with pytest.raises(ValueError, match="before it was changed"):
        generate(model, ids, 5, 0, read=read)


def test_a_reading_made_before_a_global_hook_was_added_is_refused():
    model, ids = small_gpt(), prompt(1, 3)
    read = read_prompt(model, ids)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, i, o: None)
    try:
        assert not gpt.is_current(read, model)
    finally:
        handle.remove()
    assert gpt.is_current(read, model)


def test_a_reading_of_a_model_left_as_it_was_is_current_on_any_thread_count():
    model, ids = small_gpt(), prompt(2, 3)
    read = read_prompt(model, ids)
    threads = torch.get_num_threads()
    try:
        for count in (1, 3):
            torch.set_num_threads(count)
            assert gpt.is_current(read, model)
    finally:
        torch.set_num_threads(threads)
    with torch.no_grad():
        model.positions.weight[-1] = float("nan")  # a position these ids never reach
    read = read_prompt(model, ids)
    assert gpt.is_current(read, model)  # its sums are NaN: compared bit for bit, NaN is NaN
    assert torch.equal(generate(model, ids, 2, 0, read=read), generate(model, ids, 2, 0))


def mixed_modes(model: torch.nn.Module) -> list[bool]:
    model.train()
    model.blocks[0].eval()
    return [module.training for module in model.modules()]


@pytest.mark.parametrize(
    "call",
    [
        lambda m: generate(m, prompt(1, 3), 2, 0),
        lambda m: generate(m, prompt(1, 3), 2, 0, use_cache=False),
        lambda m: read_prompt(m, prompt(1, 3)),
    ],
    ids=["generate", "generate without cache", "read_prompt"],
)
def test_generate_and_read_prompt_leave_every_module_in_its_own_mode(call):
    """model.train(was_training) put every module in the model's mode: blocks[0], in eval
    mode inside a model in training mode, came back in training mode."""
    model = small_gpt()
    modes = mixed_modes(model)
    call(model)
    assert [module.training for module in model.modules()] == modes


def test_evaluating_restores_the_modes_when_the_block_raises():
    model = small_gpt()
    modes = mixed_modes(model)
    with pytest.raises(RuntimeError, match="inside"), gpt.evaluating(model):
        assert not any(module.training for module in model.modules())
        raise RuntimeError("inside")
    assert [module.training for module in model.modules()] == modes


NESTED = pytest.mark.filterwarnings(
    "ignore:The PyTorch API of nested tensors is in prototype stage"
)


def nested(*shapes: tuple[int, ...]) -> torch.Tensor:
    return torch.nested.nested_tensor([torch.zeros(shape) for shape in shapes])


@NESTED
@pytest.mark.parametrize(
    ("logits", "message"),
    [
        (torch.zeros(1, 3).to(torch.float8_e5m2), "logits must be a tensor torch computes with"),
        (torch.zeros(1, 3).to(torch.float8_e4m3fn), "got torch.float8_e4m3fn, a storage format"),
        (lambda: nested((3,), (2,)), "logits must be an ordinary dense tensor, got one nested"),
    ],
)
def test_next_token_probabilities_names_float8_and_nested_logits(logits, message):
    """They crashed inside torch: 'isposinf_cpu not implemented for Float8_e5m2' and
    'NestedTensorImpl doesn't support sizes'."""
    with pytest.raises(ValueError, match=message):
        next_token_probabilities(logits() if callable(logits) else logits)


@NESTED
@pytest.mark.parametrize(
    ("x", "message"),
    [
        (lambda: nested((2, 16), (3, 16)), "x must be an ordinary dense tensor, got one nested"),
        (lambda: torch.zeros(1, 2, 16).to(torch.float8_e4m3fn), "a storage format"),
    ],
)
def test_a_block_names_float8_and_nested_inputs(x, message):
    with pytest.raises(ValueError, match=message):
        gpt.GPTBlock(CONFIG)(x(), None)


@NESTED
@pytest.mark.parametrize(
    ("logits", "message"),
    [
        (lambda: torch.zeros(1, 1, 11).to(torch.float8_e5m2), "a storage format"),
        (lambda: nested((1, 11), (2, 11)), "logits must be an ordinary dense tensor, got one nest"),
        (lambda: torch.empty(1, 1, 11, device="meta"), "got one on the meta device"),
    ],
)
def test_check_finite_logits_names_logits_without_numbers_torch_reads(logits, message):
    """float8 and nested logits crashed inside torch; meta ones in .item()."""
    with pytest.raises(ValueError, match=message):
        small_gpt().check_finite_logits(logits())


@pytest.mark.parametrize(
    ("caches", "cached", "message"),
    [
        (lambda m: [1, 2], 1, "caches must be a list of 2 KeyValueCache"),
        (lambda m: m.new_caches(), 2, r"cached \(2\) .* but the caches hold 0 now"),
        (lambda m: None, 1, r"cached \(1\) .* but no caches were given"),
        (lambda m: [KeyValueCache()] * 2, 0, "one cache object serves several layers"),
    ],
)
def test_check_finite_logits_names_caches_that_cannot_be_the_passs(caches, cached, message):
    """[1, 2] was an AttributeError, empty caches with 2 positions cached a TypeError
    ('NoneType' object is not subscriptable)."""
    model = small_gpt()
    with pytest.raises(ValueError, match=message):
        model.check_finite_logits(torch.full((1, 1, 11), float("nan")), caches(model), cached)


def test_check_finite_logits_names_a_nan_cache_of_the_positions_held_before_the_pass():
    model, ids = small_gpt(), prompt(1, 3)
    caches = model.new_caches()
    model(ids, caches)
    caches[1].keys[:, :, 0] = float("nan")
    with pytest.raises(ValueError, match=r"caches\[1\]\.keys hold NaN or inf"):
        model.check_finite_logits(torch.full((1, 1, 11), float("nan")), caches, 2)


def test_a_block_refuses_a_residual_stream_too_large_for_its_layer_norm():
    """A finite x of 1e38 came back as NaN without a word: LayerNorm's squares overflow."""
    torch.manual_seed(0)
    block = gpt.GPTBlock(CONFIG).eval()
    cache = KeyValueCache()
    block(torch.ones(1, 2, 16), causal_mask(2), cache)
    held = (cache.keys, cache.values)
    with pytest.raises(ValueError, match=r"finite x into NaN or inf: x's numbers reach 1e\+38"):
        block(torch.full((1, 1, 16), 1e38), None, cache)
    assert (cache.keys, cache.values) == held  # left as it was
    with torch.no_grad():
        block.ffn.linear2.weight[0, 0] = float("inf")
    with pytest.raises(ValueError, match="its weight ffn.linear2.weight holds NaN or inf"):
        block(torch.ones(1, 2, 16), causal_mask(2))


@pytest.mark.parametrize(
    "change",
    [
        lambda m: setattr(m.norm, "eps", 10.0),
        lambda m: setattr(m.blocks[0].attention, "rope", not m.blocks[0].attention.rope),
        lambda m: setattr(m, "config", dataclasses.replace(m.config, position="rope")),
        lambda m: setattr(m.blocks[0], "forward", lambda x, mask, cache=None, check_input=True: x),
        lambda m: m.tokens.weight.data.copy_(m.tokens.weight.data.flip(0)),
    ],
    ids=["eps", "rope flag", "config", "forward", "weights permuted"],
)
def test_a_reading_is_stale_after_a_change_of_a_setting_or_a_permutation(change):
    """An eighth hostile pass: is_current said True after each, and generate wrote from the old
    caches."""
    from helpers.gpt import is_current, read_prompt

    torch.manual_seed(0)
    model = GPT(GPTConfig(11, 8, 8, 2, 2, 16)).eval()
    ids = torch.randint(0, 11, (2, 3))
    read = read_prompt(model, ids)
    model(ids)  # a pass in between keeps the reading current
    assert is_current(read, model)
    change(model)
    assert not is_current(read, model)


def test_bad_caches_logits_and_models_are_named_by_kind():
    from helpers.gpt import evaluating

    torch.manual_seed(0)
    model = GPT(GPTConfig(11, 8, 8, 2, 2, 16)).eval()
    ids = torch.randint(0, 11, (2, 3))
    with pytest.raises(ValueError, match="got a list of 1 KeyValueCache$"):
        model(ids, model.new_caches()[:1])
    with pytest.raises(ValueError, match="got a dict$"):
        model(ids, {0: None, 1: None})
    with pytest.raises(TypeError, match=r"got a torch.int64 tensor \(2, 3\)"):
        model.check_finite_logits(ids)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got int"):
        with evaluating(5):
            pass


# After an eighth hostile pass over chapter 12.


def filled(model: GPT, ids: torch.Tensor) -> list[KeyValueCache]:
    caches = model.new_caches()
    model(ids, caches)
    return caches


@pytest.mark.parametrize("values", [torch.Tensor.half, torch.Tensor.float])
def test_caches_whose_values_differ_from_their_keys_in_dtype_are_refused(values):
    """The values were taken and promoted by torch.cat without a word (float64 values failed
    deep inside attention)."""
    model, ids = small_gpt(), prompt()
    caches = filled(model, ids)
    caches[0].values = values(caches[0].values)
    message = r"caches\[0\] holds keys torch.float64 on cpu and values torch.float\w+ on cpu"
    with pytest.raises(ValueError, match=message):
        model(ids[:, :1], caches)
    cache = KeyValueCache()
    cache.keys = torch.randn(1, 2, 3, 4)
    cache.values = cache.keys.double()
    with pytest.raises(ValueError, match="keys torch.float32 on cpu and values torch.float64"):
        cache.extend(torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))


EDITS_OF_A_READING = {
    "logits in place": lambda read: read.logits.zero_(),
    "logits through .data": lambda read: read.logits.data.zero_(),
    "keys in place": lambda read: read.caches[0].keys.mul_(3),
    "values through .data": lambda read: read.caches[1].values.data.mul_(3),
    "keys replaced": lambda read: setattr(read.caches[0], "keys", read.caches[0].keys * 3),
    "ids in place": lambda read: read.ids.add_(1).remainder_(CONFIG.vocab_size),
}


@pytest.mark.parametrize("edit", EDITS_OF_A_READING.values(), ids=list(EDITS_OF_A_READING))
def test_a_reading_edited_since_read_prompt_made_it_is_refused(edit):
    """generate(..., read=...) wrote from the edited logits or caches without a word."""
    model, ids = small_gpt(), prompt(1, 3)
    read = read_prompt(model, ids)
    assert gpt.is_current(read, model)
    edit(read)
    assert not gpt.is_current(read, model)
    with pytest.raises(ValueError, match="read's ids, logits or caches were changed since"):
        generate(model, ids, 3, 0, read=read)


def test_a_data_edit_that_keeps_both_linear_sums_of_a_weight_is_seen():
    """.5, .5, .5 -> .75, 0, .75 keeps a weight's sum and its sum weighted by position: the
    reading made before it was taken as current."""
    model, ids = small_gpt(), prompt(1, 3)
    numbers = model.blocks[0].ffn.linear1.weight.data.view(-1)
    numbers[:3] = 0.5
    read = read_prompt(model, ids)
    numbers[:3] = torch.tensor([0.75, 0.0, 0.75])
    assert not gpt.is_current(read, model)
    with pytest.raises(ValueError, match="before it was changed"):
        generate(model, ids, 3, 0, read=read)


def test_logits_without_a_token_name_v_at_least_1():
    with pytest.raises(ValueError, match=r"logits must be floating \(B, V\), V >= 1, got"):
        next_token_probabilities(torch.randn(2, 0))


def test_check_ids_refuses_a_name_that_is_not_text():
    """check_ids(None, 0, 5) said '5 must be a torch.Tensor (B, T), got NoneType'."""
    with pytest.raises(TypeError, match="name must be a str .* got 5"):
        small_gpt().check_ids(None, 0, 5)


def test_a_cache_holding_values_too_large_for_their_dtype_is_named():
    """The overflow was blamed on the logits: 'the caches held only finite numbers ... made by
    another model?'."""
    model, ids = small_gpt().float(), prompt()
    caches = filled(model, ids)
    caches[1].values = caches[1].values.clone().fill_(1e30)
    message = r"caches\[1\]\.values reach 1e\+30, too large for torch.float32"
    with pytest.raises(ValueError, match=message):
        model(ids[:, :1], caches)


# After a twelfth hostile pass over chapter 12.


def test_a_prompt_read_under_inference_mode_is_read_and_used():
    """read_prompt read the version counter that inference tensors do not keep, and raised."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(50, 32, 32, 4, 2, 64)).eval()
    ids = torch.randint(0, 50, (2, 4))
    with torch.inference_mode():
        read = read_prompt(model, ids)
        assert torch.equal(generate(model, ids, 3, 0, read=read), generate(model, ids, 3, 0))
    with torch.inference_mode():
        built_there = GPT(GPTConfig(50, 32, 32, 4, 2, 64)).eval()
    assert read_prompt(built_there, ids).logits.shape == (2, 50)


def test_a_reading_used_under_another_autocast_setting_names_autocast():
    """The message spoke only of caches of another model or filled before a .to()."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(50, 32, 32, 4, 2, 64)).eval()
    ids = torch.randint(0, 50, (2, 4))
    read = read_prompt(model, ids)
    with torch.autocast("cpu", torch.bfloat16), pytest.raises(ValueError, match="autocast"):
        generate(model, ids, 3, 0, read=read)


# After a thirteenth hostile pass over chapter 12.


@pytest.mark.parametrize(
    "logits",
    [
        lambda: torch.zeros(2, 5, 49),
        lambda: torch.tensor(0.0),
        lambda: torch.zeros(7),
        lambda: torch.tensor(float("nan")),
    ],
)
def test_check_finite_logits_refuses_logits_of_another_shape(logits):
    """(2, 5, 49), a 0-d tensor and (7,) returned None; a 0-d NaN was asked whether another
    model made it, without a word on its shape."""
    model = GPT(GPTConfig(50, 16, 32, 4, 2, 64))
    found = re.escape(str(tuple(logits().shape)))
    with pytest.raises(ValueError, match=rf"\(\.\.\., vocab_size\) = \(\.\.\., 50\).*{found}"):
        model.check_finite_logits(logits())


def test_check_finite_logits_takes_the_scored_positions_training_loss_passes():
    model = GPT(GPTConfig(50, 16, 32, 4, 2, 64))
    model.check_finite_logits(torch.zeros(3, 50))
    with pytest.raises(ValueError, match="logits hold NaN"):
        model.check_finite_logits(torch.full((3, 50), float("nan")))


@pytest.mark.parametrize("guard", [gpt.check_logits, next_token_probabilities])
@pytest.mark.parametrize("rows", [10**5, 10**6])
def test_logits_too_many_to_read_are_refused_by_size_before_any_is_read(guard, rows):
    """An expand()ed view of 10^12 logits takes 4 bytes, but isnan() on it asked for 1 TB
    (10^10: a 10 GB temporary): its size is checked first."""
    logits = torch.zeros(1).expand(rows, rows)
    count = gpt.shown_count(rows * rows)
    message = f"logits hold {count} numbers ({rows:,} x {rows:,}), more than 2^28 = {2**28:,}"
    with pytest.raises(ValueError, match=re.escape(message)):
        guard(logits)
    with pytest.raises(ValueError, match="more than 2"):
        guard(torch.zeros(1).expand(1, gpt.LARGEST_ACTIVATION + 1))


def test_next_token_probabilities_refuses_rows_too_many_to_sample_as_generate_does():
    vocab_size = 8001
    most = gpt.LARGEST_ACTIVATION // (gpt.SAMPLING_COPIES * 2 * vocab_size)
    assert next_token_probabilities(torch.zeros(1).expand(2, vocab_size)).shape == (2, vocab_size)
    with pytest.raises(ValueError, match=f"logits: sampling {most + 1:,} rows from a vocabulary"):
        next_token_probabilities(torch.zeros(1).expand(most + 1, vocab_size))
