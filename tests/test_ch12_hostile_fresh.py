"""A fresh hostile pass over chapter 12's code: each test is one of its calls, which returned
a wrong result without a word (changed the caller's random numbers, read uint8 rows as a
mask, let torch.cat promote a cache's dtype) or failed with torch's or Python's own error."""

import dataclasses

import pytest
import torch

from helpers import decoder_only as D
from helpers.attention import KeyValueCache
from helpers.checkpoints import CheckpointError, checksum_path, sha256
from helpers.gpt import GPT, GPTConfig
from helpers.translation import BOS_ID, EOS_ID
from helpers.widgets import DecoderOnlyExplorer

HISTORY = {
    "loss": [1.0],
    "valid_bleu": [1.0],
    "seconds": 1.0,
    "device": "cpu",
    "loss_over": "answer",
}

HUGE = 10**5000  # more digits than Python writes out (4,300)


def repr_short(value: object) -> str:
    """A test id: HUGE is more digits than str() writes."""
    return "HUGE" if value is HUGE else repr(value)


SMALL = dict(vocab_size=11, context_length=8, d_model=8, num_heads=2, num_layers=2, d_ff=16)


@pytest.fixture(scope="module")
def translator():
    return D.load_translator()[0]


@pytest.fixture(scope="module")
def separator():
    return D.load_tokenizer_with_separator()[1]


@pytest.fixture
def state(translator, separator):
    return translator.start_state(
        torch.tensor([[BOS_ID, 100, separator], [BOS_ID, 200, separator]])
    )


def small_translator(vocab_size: int, separator_id: int) -> D.DecoderOnlyTranslator:
    config = GPTConfig(**{**SMALL, "vocab_size": vocab_size})
    torch.manual_seed(0)
    return D.DecoderOnlyTranslator(config, separator_id).eval()


@pytest.fixture(scope="module")
def explorer(separator):
    vocabulary = separator + 1
    models = {task: small_translator(vocabulary, separator) for task in ("translate", "continue")}
    return DecoderOnlyExplorer(models=models)


DRAW = dict(prompt="Tom has a blue car.", task="translate", temperature=1.0, top_k="off")


# --- silent -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["decoder-only", "decoder-only-lm"])
def test_loading_a_translator_leaves_the_callers_random_numbers_alone(name):
    """The model's initialisers ran on the global generator before the weights replaced them."""
    before = torch.get_rng_state()
    D.load_translator(name)
    assert torch.equal(before, torch.get_rng_state())


def test_loading_from_a_path_leaves_the_callers_random_numbers_alone(tmp_path):
    path = tmp_path / "small.pt"
    D.save_translator(path, small_translator(11, 5), HISTORY)
    before = torch.get_rng_state()
    D.load_translator("decoder-only", path)
    assert torch.equal(before, torch.get_rng_state())


def test_the_explorer_and_its_lazy_second_model_leave_the_random_numbers_alone():
    before = torch.get_rng_state()
    explorer = DecoderOnlyExplorer()
    assert torch.equal(before, torch.get_rng_state())
    explorer.controls["task"].value = "continue"  # loads data/decoder-only-lm.pt
    assert "error" not in explorer.state
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize("rows", [[1, 1], [0, 1], [1]])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16])
def test_select_refuses_rows_torch_would_read_as_a_mask_or_cannot_index_with(
    translator, state, rows, dtype
):
    """uint8 [1, 1] chose rows 0 and 1 (a mask), [0, 1] one row; int8 was an IndexError."""
    with pytest.raises(ValueError, match=r"beam rows 0\.\.1 of the state by int64 or int32"):
        translator.select(state, torch.tensor(rows, dtype=dtype))


def test_select_takes_int32_rows_as_int64_ones(translator, state):
    ours = translator.select(state, torch.tensor([1, 1, 0], dtype=torch.int32))
    theirs = translator.select(state, torch.tensor([1, 1, 0]))
    assert torch.equal(ours["last"], theirs["last"])
    for a, b in zip(ours["caches"], theirs["caches"], strict=True):
        assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_selected_caches_stay_the_models_that_filled_them():
    """select() built new caches that no model owned, so a translator of the same sizes
    decoded from another one's keys without a word."""
    model, other = small_translator(11, 5), small_translator(11, 5)
    start, first = torch.tensor([[BOS_ID, 3, 5]]), torch.tensor([0])
    with pytest.raises(ValueError, match=r"caches\[0\] was made or filled by another model"):
        other.decode_step(model.select(model.start_state(start), first), first)
    chosen = model.decode_step(model.select(model.start_state(start), first), first)[0]
    torch.testing.assert_close(chosen, model.decode_step(model.start_state(start), first)[0])


def filled_cache(dtype=torch.float32) -> KeyValueCache:
    cache = KeyValueCache()
    cache.extend(torch.zeros(1, 2, 3, 4, dtype=dtype), torch.zeros(1, 2, 3, 4, dtype=dtype))
    return cache


@pytest.mark.parametrize(
    ("cache", "keys", "values", "message"),
    [
        (
            KeyValueCache(),
            torch.zeros(1, 2, 1, 4),
            torch.zeros(1, 2, 1, 4, dtype=torch.float64),
            "must have one dtype and one device",
        ),
        (
            filled_cache(),
            torch.zeros(1, 2, 1, 4, dtype=torch.float64),
            torch.zeros(1, 2, 1, 4, dtype=torch.float64),
            "do not extend a cache of torch.float32",
        ),
        (
            KeyValueCache(),
            torch.zeros(1, 2, 1, 4, dtype=torch.long),
            torch.zeros(1, 2, 1, 4, dtype=torch.long),
            "ordinary floating-point tensor",
        ),
        (
            KeyValueCache(),
            torch.zeros(1, 2, 1, 4, device="meta"),
            torch.zeros(1, 2, 1, 4, device="meta"),
            "got one on the meta device",
        ),
    ],
)
def test_a_cache_refuses_keys_and_values_that_torch_cat_would_promote_or_that_hold_no_numbers(
    cache, keys, values, message
):
    held = None if cache.keys is None else (cache.keys, cache.values)
    with pytest.raises(ValueError, match=message):
        cache.extend(keys, values)
    assert (cache.keys is None) if held is None else (cache.keys is held[0])


def test_select_refuses_one_cache_serving_several_layers(translator, state):
    shared = {**state, "caches": [state["caches"][0]] * len(state["caches"])}
    with pytest.raises(ValueError, match="one cache object serves several layers"):
        translator.select(shared, torch.tensor([0]))


def test_select_refuses_last_ids_that_are_not_ids(translator, state):
    with pytest.raises(TypeError, match="state must be the dict start_state made"):
        translator.select({**state, "last": state["last"].float()}, torch.tensor([0]))


def test_a_full_size_checkpoint_whose_separator_is_not_the_tokenizers_is_refused(
    tmp_path, separator
):
    path = tmp_path / "decoder-only.pt"
    history = HISTORY
    wrong = f"separator_id is {separator - 1}, but"
    with pytest.raises(CheckpointError, match=f"cannot save {path}: .*{wrong}"):
        D.save_translator(path, small_translator(separator + 1, separator - 1), history)
    D.save_translator(path, small_translator(separator + 1, separator), history)
    contents = torch.load(path, weights_only=True)  # the file written again by hand
    torch.save({**contents, "separator_id": separator - 1}, path)
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(CheckpointError, match=f"its separator_id does not fit .*{wrong}"):
        D.load_translator("decoder-only", path)
    D.save_translator(path, small_translator(separator + 1, separator), history)
    assert D.load_translator("decoder-only", path)[0].separator_id == separator


@pytest.mark.parametrize(
    "top_p", [1.5, float("inf"), float("nan"), HUGE, 0, -0.5, None, "0.5"], ids=repr_short
)
def test_the_explorer_shows_a_top_p_outside_0_to_1_instead_of_turning_it_off(explorer, top_p):
    explorer.draw(**DRAW, top_p=top_p, seed=0, layer=1, head=1)
    assert "top_p must be a number in (0, 1]" in explorer.state["error"]


def test_the_explorer_still_takes_top_p_1_as_off(explorer):
    explorer.draw(**DRAW, top_p=1, seed=0, layer=1, head=1)
    assert explorer.state["kept"] == explorer.tokenizer.get_vocab_size()


@pytest.mark.parametrize("part", ["keys", "values"])
def test_a_pass_with_caches_refuses_nan_that_a_cache_was_given(part):
    model = GPT(GPTConfig(**SMALL)).eval()
    caches = model.new_caches()
    model(torch.tensor([[1, 2, 3]]), caches)
    setattr(caches[1], part, torch.full_like(getattr(caches[1], part), float("nan")))
    with pytest.raises(ValueError, match=rf"logits hold NaN or \+inf .* caches\[1\]\.{part}"):
        model(torch.tensor([[4]]), caches)


def test_a_pass_with_caches_names_weights_that_make_nan():
    model = GPT(GPTConfig(**SMALL)).eval()
    with torch.no_grad():
        model.norm.bias.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"the model's weights make them \(norm\.bias holds NaN"):
        model(torch.tensor([[1, 2]]), model.new_caches())


def test_a_pass_with_caches_says_the_caches_held_finite_numbers_when_weights_overflow():
    model = GPT(GPTConfig(**SMALL)).eval()
    with torch.no_grad():
        model.tokens.weight.fill_(3e38)
    with pytest.raises(ValueError, match="caches held only finite numbers: .* overflow to inf"):
        model(torch.tensor([[1, 2]]), model.new_caches())


# --- poor errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sizes",
    [
        dict(num_heads=HUGE),
        dict(d_model=HUGE, num_heads=3),
        dict(d_model=HUGE + 1, num_heads=2),
    ],
)
def test_a_config_names_sizes_too_long_to_print(sizes):
    with pytest.raises(ValueError, match="must be divisible by num_heads"):
        GPTConfig(**{**SMALL, **sizes})
    with pytest.raises(ValueError, match="must be divisible by num_heads"):
        dataclasses.replace(D.RECIPE, **sizes)


@pytest.mark.parametrize("size", [2**40, 2**62, HUGE], ids=repr_short)
def test_prefix_lm_mask_bounds_its_size_even_for_no_rows(size):
    with pytest.raises(ValueError, match="bytes, more than 16,777,216"):
        D.prefix_lm_mask(torch.zeros(0, dtype=torch.long), size)


def test_a_beam_size_too_long_to_print_is_named(translator):
    source = torch.tensor([[100, 200, EOS_ID]])
    with pytest.raises(ValueError, match="beam_size must be at most"):
        translator.translate_ids(source, beam_size=HUGE)


def test_select_names_caches_that_are_not_caches(translator, state):
    with pytest.raises(ValueError, match="caches must be a list of 7 KeyValueCache"):
        translator.select({**state, "caches": [1, 2]}, torch.tensor([0]))


def test_the_explorer_writes_a_top_k_too_long_to_print(explorer):
    explorer.draw(**{**DRAW, "top_k": HUGE}, top_p=0.9, seed=0, layer=1, head=1)
    assert "error" not in explorer.state
    assert explorer.state["samples"] == explorer.samples(
        "translate", DRAW["prompt"], 1.0, None, 0.9, 0
    )


@pytest.mark.parametrize("view", [dict(layer=HUGE, head=1), dict(layer=1, head=HUGE)])
def test_the_explorer_names_a_layer_or_head_too_long_to_print(explorer, view):
    with pytest.raises(ValueError, match=r"must be one of 1\.\.2, got"):
        explorer.draw(**DRAW, top_p=0.9, seed=0, **view)


def test_a_length_penalty_too_large_to_print_is_named():
    from helpers.translation import check_length_penalty

    with pytest.raises(
        ValueError, match=r"length_penalty must be a number in \[0, 2\], got an int"
    ):
        check_length_penalty(10**5000)


# After a seventh hostile pass.


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: torch.zeros(1, 1, 1, 2).to(torch.float8_e4m3fn), "a storage format"),
        (
            lambda: torch.nested.nested_tensor([torch.zeros(1, 1, 2), torch.zeros(1, 2, 2)]),
            "keys must be an ordinary dense tensor, got one nested",
        ),
    ],
    ids=["float8", "nested"],
)
def test_a_cache_names_float8_and_nested_keys(make, message):
    """float8 keys were taken without a word (torch's kernels cannot read them), nested ones
    crashed inside torch."""
    cache = KeyValueCache()
    with pytest.raises(ValueError, match=message):
        cache.extend(make(), make())
    assert cache.keys is None and cache.values is None
