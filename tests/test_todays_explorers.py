"""Chapter 16's explorers show what the helpers compute: the cache bytes are
cache_bytes_per_token's times the context, the losses and first-position weights are
streaming_losses'; bad arguments are refused by name, and a redraw is the picture a full
redraw makes."""

import pytest
import torch
from traitlets import TraitError

from helpers.efficient import PUBLISHED_MODELS
from helpers.todays_attention import (
    ATTENTION_KINDS,
    FALCON_7B,
    PUBLISHED_LATENT_MODELS,
    cache_bytes_per_token,
)
from helpers.todays_models import TodayConfig, TodayGPT, streaming_losses
from helpers.widgets import CacheBytesExplorer, StreamingExplorer

SHAPES = (*PUBLISHED_MODELS, FALCON_7B, *PUBLISHED_LATENT_MODELS)
SMALL = {"vocab_size": 50, "d_model": 16, "num_heads": 4, "num_layers": 2, "d_ff": 32}


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    return {
        "softmax": TodayGPT(TodayConfig(**SMALL)),
        "sink": TodayGPT(TodayConfig(**SMALL, sink=True)),
    }


@pytest.fixture(scope="module")
def sequences():
    return torch.randint(50, (3, 41), generator=torch.Generator().manual_seed(2))


@pytest.fixture
def streaming(models, sequences):
    return StreamingExplorer(models=models, sequences=sequences)


@pytest.mark.parametrize("attention", ATTENTION_KINDS)
def test_the_bars_are_each_models_bytes_per_token_times_the_context(attention):
    explorer = CacheBytesExplorer(attention=attention, tokens=4096)
    expected = [4096 * cache_bytes_per_token(shape, attention) for shape in SHAPES]
    assert explorer.state["bytes"] == expected
    assert explorer.state["published bytes"] == [
        4096 * cache_bytes_per_token(shape) for shape in SHAPES
    ]
    explorer.controls["tokens"].value = 131072
    assert explorer.state["bytes"] == [32 * value for value in expected]


def test_published_attention_is_each_models_own_cache():
    explorer = CacheBytesExplorer(attention="as published", tokens=2048)
    by_name = dict(zip([s.name for s in SHAPES], explorer.state["bytes"], strict=True))
    assert by_name["Llama 2 7B"] == 2048 * 2 * 32 * 32 * 128 * 2
    assert by_name["Falcon-7B"] == 2048 * 2 * 32 * 1 * 64 * 2
    assert by_name["DeepSeek-V3"] == 2048 * 61 * 576 * 2


def test_the_streaming_view_is_streaming_losses_of_the_models(streaming, models, sequences):
    for model in ("softmax", "sink"):
        for window, keep in ((8, 0), (8, 4), ("all", 0), (16, 2)):
            streaming.controls["model"].value = model
            streaming.controls["window"].value = window
            streaming.controls["keep"].value = keep
            expected = streaming_losses(
                models[model], sequences, None if window == "all" else window, keep
            )
            assert torch.equal(streaming.state["loss"], expected["loss"])
            assert torch.equal(streaming.state["first"], expected["first"])
            full = streaming_losses(models[model], sequences)["loss"]
            assert torch.equal(streaming.state["full loss"], full)
            start = 0 if window == "all" else window
            assert streaming.state["mean loss after the window fills"] == pytest.approx(
                float(expected["loss"][start:].mean())
            )


def test_with_no_first_position_kept_it_gets_no_weight_once_the_window_passes(streaming):
    streaming.controls["window"].value = 8
    streaming.controls["keep"].value = 0
    assert torch.all(streaming.state["first"][:, 8:] == 0)
    streaming.controls["keep"].value = 1
    assert torch.all(streaming.state["first"][:, 8:] > 0)


def test_keep_is_unused_when_the_window_is_all(streaming):
    streaming.controls["window"].value = "all"
    assert streaming.unused(streaming.values()) == {"keep"}
    before = streaming.state["loss"]
    streaming.controls["keep"].value = 4
    assert torch.equal(streaming.state["loss"], before)


@pytest.mark.parametrize(
    ("explorer", "name", "value"),
    [
        ("cache", "attention", "MoE"),
        ("cache", "tokens", 1000),
        ("streaming", "window", 7),
        ("streaming", "keep", 3),
        ("streaming", "model", "latent"),
    ],
)
def test_a_control_set_to_what_it_does_not_offer_names_its_options(
    streaming, explorer, name, value
):
    chosen = CacheBytesExplorer() if explorer == "cache" else streaming
    with pytest.raises(TraitError, match="must be one of"):
        chosen.controls[name].value = value


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"attention": "MoE"}, "attention must be one of"),
        ({"tokens": 3}, "tokens must be one of"),
        ({"tokens": True}, "tokens must be one of"),
    ],
)
def test_bad_cache_explorer_arguments_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        CacheBytesExplorer(**arguments)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"window": 5}, ValueError, "window must be one of"),
        ({"keep": -1}, ValueError, "keep must be one of"),
        ({"model": "plain"}, ValueError, "model must be one of"),
        ({"models": {"softmax": None}}, ValueError, "models must be a dict"),
        ({"models": "models"}, ValueError, "models must be a dict"),
    ],
)
def test_bad_streaming_explorer_arguments_are_named(models, sequences, arguments, error, message):
    with pytest.raises(error, match=message):
        StreamingExplorer(**{"models": models, "sequences": sequences, **arguments})


def test_a_latent_model_or_ids_past_the_vocabulary_are_refused(models, sequences):
    latent = TodayGPT(TodayConfig(**SMALL, attention="latent", d_latent=6, d_rope=4))
    with pytest.raises(TypeError, match="multi-head or grouped-query"):
        StreamingExplorer(models={**models, "sink": latent}, sequences=sequences)
    with pytest.raises(ValueError):
        StreamingExplorer(models=models, sequences=sequences + 100)


def test_each_redraw_is_the_picture_a_full_redraw_makes(streaming):
    for name, value in (("window", 16), ("keep", 2), ("model", "sink"), ("window", "all")):
        streaming.controls[name].value = value
        shown = bytes(streaming.image.value)
        streaming.redraw_background()
        assert streaming.render_png() == shown, (name, value)
    cache = CacheBytesExplorer()
    for name, value in (("attention", "MHA"), ("tokens", 1024)):
        cache.controls[name].value = value
        shown = bytes(cache.image.value)
        cache.redraw_background()
        assert cache.render_png() == shown, (name, value)


def test_the_explorer_does_not_see_a_model_changed_later(models, sequences):
    explorer = StreamingExplorer(models=models, sequences=sequences)
    before = explorer.state["loss"].clone()
    with torch.no_grad():
        models["softmax"].tokens.weight.add_(1.0)
    try:
        explorer.controls["window"].value = 16
        explorer.controls["window"].value = 32
        assert torch.equal(explorer.state["loss"], before)
    finally:
        with torch.no_grad():
            models["softmax"].tokens.weight.sub_(1.0)


def test_a_published_shape_with_bad_sizes_or_a_bad_attention_is_named():
    import dataclasses

    for field, value in (("num_layers", "ab"), ("num_layers", -1), ("head_size", 2.5)):
        with pytest.raises((TypeError, ValueError), match=f"shape.{field}"):
            cache_bytes_per_token(dataclasses.replace(SHAPES[0], **{field: value}))
    with pytest.raises(ValueError, match="must divide"):
        cache_bytes_per_token(dataclasses.replace(SHAPES[0], num_kv_heads=5))
    with pytest.raises(ValueError, match="attention must be one of"):
        cache_bytes_per_token(SHAPES[0], ["MHA"])


def test_a_window_covering_the_whole_text_is_said_in_the_figure(models):
    short = torch.randint(50, (2, 17), generator=torch.Generator().manual_seed(3))
    explorer = StreamingExplorer(models=models, sequences=short)
    explorer.controls["window"].value = 16
    assert "covers all 17 pieces" in explorer.state["error"]
    explorer.controls["window"].value = 8
    assert "loss" in explorer.state


def test_models_of_different_depths_floats_for_choices_and_one_piece_are_refused(models, sequences):
    deeper = TodayGPT(TodayConfig(**{**SMALL, "num_layers": 3}, sink=True))
    with pytest.raises(ValueError, match="one number of layers"):
        StreamingExplorer(models={**models, "sink": deeper}, sequences=sequences)
    with pytest.raises(ValueError, match="window must be one of"):
        StreamingExplorer(models=models, sequences=sequences, window=8.0)
    with pytest.raises(ValueError, match="tokens must be one of"):
        CacheBytesExplorer(tokens=1024.0)
    with pytest.raises(ValueError, match="L >= 2"):
        StreamingExplorer(models=models, sequences=sequences[:, :1])
    with pytest.raises(ValueError, match="model must be one of"):
        StreamingExplorer(models=models, sequences=sequences).reading("bogus", 8, 0)
