"""Chapter 16's small decoder: every attention variant writes the same tokens with its caches
as without them, greedily and with seeded sampling."""

import dataclasses

import pytest
import torch

from helpers.checkpoints import CheckpointError, save_checkpoint
from helpers.todays_attention import RollingCache
from helpers.todays_models import (
    QK_NORM_RECIPE,
    QK_NORM_WINDOW_LENGTH,
    RECIPE,
    SAVED_MODELS,
    SAVED_QK_NORM,
    SAVED_SINKS,
    TodayConfig,
    TodayGPT,
    TodayRecipe,
    generate,
    held_out_loss,
    load_variants,
    packed_windows,
    recomputed_losses,
    save_variants,
    stream_sequences,
    streaming_losses,
    train,
    weight_on_first,
)
from helpers.todays_models import VARIANTS as VARIANT_FIELDS
from helpers.translation import BOS_ID, EOS_ID

SMALL = {"vocab_size": 50, "d_model": 16, "num_heads": 4, "num_layers": 2, "d_ff": 32}
VARIANTS = {
    "multi-head": {},
    "grouped-query": {"attention": "grouped-query", "num_kv_heads": 2},
    "multi-query": {"attention": "grouped-query", "num_kv_heads": 1},
    "latent": {"attention": "latent", "d_latent": 6, "d_rope": 4},
    "latent, absorbed": {"attention": "latent", "d_latent": 6, "d_rope": 4, "absorbed": True},
    "QK-norm and sinks": {"qk_norm": True, "sink": True},
    "window 4, first 2 kept": {"window": 4, "keep": 2},
}


def model_of(seed=0, **options):
    torch.manual_seed(seed)
    model = TodayGPT(TodayConfig(**SMALL, **options)).double().eval()
    for block in model.blocks:
        if getattr(block.attention, "sink_logits", None) is not None:
            with torch.no_grad():
                block.attention.sink_logits.normal_()
    return model


def prompts(batch=3, length=5, seed=1):
    return torch.randint(50, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("options", VARIANTS.values(), ids=list(VARIANTS))
def test_the_caches_change_no_logit_and_no_token(options):
    model = model_of(**options)
    ids = prompts(length=12)
    full = model(ids)
    caches = model.new_caches()
    pieces = [model(ids[:, :5], caches)] + [model(ids[:, t : t + 1], caches) for t in range(5, 12)]
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-10)
    for sampling in ({}, {"temperature": 1.0, "top_k": 10}):
        written = [
            generate(
                model,
                prompts(),
                9,
                generator=torch.Generator().manual_seed(3),
                use_cache=use,
                **sampling,
            )
            for use in (True, False)
        ]
        assert written[0].shape == (3, 14) and torch.equal(written[0], written[1])


def test_the_absorbed_form_writes_what_the_plain_form_writes():
    plain = model_of(**VARIANTS["latent"])
    absorbed = TodayGPT(dataclasses.replace(plain.config, absorbed=True)).double().eval()
    absorbed.load_state_dict(plain.state_dict())
    assert torch.allclose(plain(prompts()), absorbed(prompts()), atol=1e-10)
    assert torch.equal(generate(plain, prompts(), 6), generate(absorbed, prompts(), 6))


def test_what_each_variant_caches():
    ids = prompts(batch=2, length=10)
    held = {}
    for name, options in VARIANTS.items():
        model = model_of(**options)
        caches = model.new_caches()
        model(ids, caches)
        held[name] = model.cache_bytes(caches)
    per_layer = 2 * 10 * 8  # batch x positions x bytes of a float64
    assert held["multi-head"] == 2 * per_layer * 2 * 16  # keys and values, 4 heads of 4
    assert held["grouped-query"] == 2 * per_layer * 2 * 8  # 2 key/value heads
    assert held["multi-query"] == 2 * per_layer * 2 * 4
    assert held["latent"] == held["latent, absorbed"] == 2 * per_layer * (6 + 4)
    assert held["window 4, first 2 kept"] == 2 * (2 * 6 * 8) * 2 * 16  # 6 of the 10 positions


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attention": "sparse"}, "attention must be one of"),
        ({"attention": "latent", "sink": True}, "not of latent attention"),
        ({"absorbed": True}, "absorbed is a form of latent attention"),
    ],
)
def test_bad_configs_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        TodayConfig(**SMALL, **options)


def test_bad_ids_and_caches_are_named():
    model = model_of()
    with pytest.raises(ValueError, match="ids"):
        model(torch.tensor([[0, 50]]))
    with pytest.raises(ValueError, match="caches must be a list of 2 RollingCaches"):
        model(prompts(), [])
    with pytest.raises(TypeError, match="model must be a TodayGPT"):
        generate(object(), prompts(), 2)


def test_windows_are_the_pairs_end_to_end_in_a_seeded_order():
    windows = packed_windows("test", 64)
    assert windows.shape[1] == 64 and windows.dtype == torch.long
    assert torch.equal(windows, packed_windows("test", 64))
    assert not torch.equal(windows, packed_windows("test", 64, seed=1))
    assert (windows == EOS_ID).sum() >= 2 * (windows.numel() // 64 // 4)  # short sentences


def test_training_is_seeded_and_lowers_the_loss():
    windows = torch.randint(50, (40, 9), generator=torch.Generator().manual_seed(0))
    windows[:, 1::2] = windows[:, 0::2][:, :4]  # each piece repeated: something to learn
    recipe = TodayRecipe(steps=30, batch_size=8, learning_rate=3e-3, warmup_steps=3, log_every=10)
    first = train(TodayConfig(**SMALL), windows, recipe, progress=False)
    again = train(TodayConfig(**SMALL), windows, recipe, progress=False)
    assert first["log"] == again["log"] and first["log"]["step"] == [10, 20, 30]
    assert first["log"]["loss"][-1] < first["log"]["loss"][0]


def test_the_log_follows_the_largest_score_and_the_attention_entropy():
    windows = torch.randint(50, (20, 9), generator=torch.Generator().manual_seed(0))
    recipe = TodayRecipe(steps=4, batch_size=4, warmup_steps=1, log_every=2)
    log = train(TodayConfig(**SMALL, qk_norm=True), windows, recipe, progress=False)["log"]
    assert len(log["largest score"]) == len(log["entropy"]) == 2
    assert all(0 < score <= 2.5 for score in log["largest score"])  # normed: |q.k|/sqrt(4) <= 2
    assert all(0 < entropy <= torch.log(torch.tensor(8.0)) for entropy in log["entropy"])
    latent = train(TodayConfig(**SMALL, **VARIANTS["latent"]), windows, recipe, progress=False)
    assert latent["log"]["largest score"] == [None, None]


@pytest.mark.parametrize("options", VARIANTS.values(), ids=list(VARIANTS))
def test_prompts_of_different_lengths_write_what_each_writes_alone(options):
    model = model_of(**options)
    alone = [prompts(1, length, seed) for seed, length in enumerate((6, 2, 4))]
    pads = torch.tensor([0, 4, 2])
    batch = torch.cat([torch.nn.functional.pad(p, (6 - p.shape[1], 0), value=7) for p in alone])
    for use_cache in (True, False):  # greedy: each row writes what it writes alone
        written = generate(model, batch, 5, use_cache=use_cache, pads=pads)
        for row, prompt in enumerate(alone):
            own = generate(model, prompt, 5, use_cache=use_cache)
            assert torch.equal(written[row, -5:], own[0, -5:]), (row, use_cache)
    drawn = [  # sampled: one draw per row and step, the same with the caches as without
        generate(
            model,
            batch,
            5,
            1.0,
            generator=torch.Generator().manual_seed(4),
            use_cache=use,
            pads=pads,
        )
        for use in (True, False)
    ]
    assert torch.equal(*drawn)


def test_the_weight_on_the_first_position_against_an_even_head():
    model = model_of()
    windows = torch.randint(50, (4, 12), generator=torch.Generator().manual_seed(0))
    found = weight_on_first(model, windows, from_position=4)
    assert found["first"].shape == (2, 4) and found["first"].dtype == torch.float64
    assert found["even"] == pytest.approx(sum(1 / (p + 1) for p in range(4, 12)) / 8)
    with torch.no_grad():  # queries of zero: every head spreads its weight evenly
        for block in model.blocks:
            block.attention.W_q.weight.zero_()
    flat = weight_on_first(model, windows, from_position=4)["first"]
    assert torch.allclose(flat, torch.full_like(flat, found["even"]))
    with pytest.raises(ValueError, match="from_position \\(12\\) must be a position"):
        weight_on_first(model, windows, from_position=12)


# After a hostile pass (1,622 inputs, 18 findings): the inputs that crashed deep in torch, came
# back NaN or were taken for something else


def test_a_trained_models_first_position_weights_can_be_read():
    windows = torch.randint(50, (20, 9), generator=torch.Generator().manual_seed(0))
    recipe = TodayRecipe(steps=2, batch_size=4, warmup_steps=1, log_every=1)
    trained = train(TodayConfig(**SMALL), windows, recipe, progress=False)["model"]
    assert weight_on_first(trained, windows, 2)["first"].shape == (2, 4)


def test_caches_shared_by_two_layers_or_of_other_lengths_are_refused_before_any_layer_runs():
    model = model_of()
    one = model.new_caches()[0]
    with pytest.raises(ValueError, match="each its own"):
        model(prompts(), [one, one])
    uneven = model.new_caches()
    model.blocks[0].attention(torch.zeros(3, 2, 16, dtype=torch.float64), uneven[0])
    with pytest.raises(ValueError, match="read the same positions"):
        model(prompts(), uneven)
    windowed = model_of(window=3)
    wrong = [windowed.new_caches()[0], RollingCache()]
    with pytest.raises(ValueError, match="make it with layer.new_cache"):
        windowed(prompts(), wrong)
    assert len(wrong[0]) == 0  # no layer extended its cache


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"log_every": 0}, "log_every must be a whole number >= 1"),
        ({"steps": 2.5}, "steps must be a whole number"),
        ({"learning_rate": 1e6}, "learning_rate"),
        ({"seed": "0"}, "seed"),
    ],
)
def test_bad_recipes_are_named(fields, message):
    with pytest.raises(ValueError, match=message):
        TodayRecipe(**fields)


def test_bad_training_windows_lengths_and_budgets_are_named():
    with pytest.raises(ValueError, match="must fit the test split"):
        packed_windows("test", 10**8)
    with pytest.raises(ValueError, match="windows must be int64"):
        train(TodayConfig(**SMALL), torch.zeros(4, 1, dtype=torch.long), progress=False)
    with pytest.raises(ValueError, match="max_new_tokens must be at most"):
        generate(model_of(), prompts(), 10**9)
    with pytest.raises(ValueError, match="num_layers must be at most"):
        TodayConfig(**(SMALL | {"num_layers": 10**6}))
    with pytest.raises(ValueError, match="keep are options"):
        TodayConfig(**SMALL, attention="latent", keep=3)
    with pytest.raises(ValueError, match="absorbed must be"):
        TodayConfig(**SMALL, attention="latent", absorbed="False")


def test_each_layers_checks_run_once_a_pass_at_the_models_door(monkeypatch):
    from helpers import todays_models

    model = model_of()
    calls = []
    check = todays_models._check_attention_input
    monkeypatch.setattr(
        todays_models,
        "_check_attention_input",
        lambda layer, *args: calls.append(layer) or check(layer, *args),
    )
    model(prompts(), model.new_caches())
    assert calls == [block.attention for block in model.blocks]


# Streaming, held-out loss, and the saved models


def _decoded_losses(model, windows, window, keep):
    """The next-piece losses of decoding one piece at a time through RollingCaches."""
    windowed = TodayGPT(dataclasses.replace(model.config, window=window, keep=keep)).double()
    windowed.load_state_dict(model.state_dict())
    caches = windowed.new_caches()
    losses = []
    with torch.no_grad():
        for t in range(windows.shape[1] - 1):
            logits = windowed(windows[:, t : t + 1], caches)[:, -1]
            losses.append(
                torch.nn.functional.cross_entropy(logits, windows[:, t + 1], reduction="none")
            )
            assert max(len(cache) for cache in caches) <= window + keep
    return torch.stack(losses, dim=1).mean(0)


@pytest.mark.parametrize(("window", "keep"), [(4, 0), (4, 2), (1, 0), (30, 3)])
@pytest.mark.parametrize(
    "options", [{}, {"sink": True}, {"attention": "grouped-query", "num_kv_heads": 2}]
)
def test_streaming_losses_are_what_a_rolling_cache_decodes(window, keep, options):
    model = model_of(**options)
    windows = prompts(batch=2, length=20, seed=3)
    found = streaming_losses(model, windows, window, keep)
    assert found["loss"].shape == (19,) and found["loss"].dtype == torch.float64
    assert torch.allclose(found["loss"], _decoded_losses(model, windows, window, keep), atol=1e-10)
    assert found["first"].shape == (2, 20)
    if keep == 0 and window < 20:
        assert torch.all(found["first"][:, window:] == 0)  # position 0 has left the window
    assert torch.allclose(found["first"][:, 0], torch.ones(2, dtype=torch.float64)) or options


def test_streaming_without_a_window_is_the_full_pass_and_leaves_the_model_alone():
    model = model_of()
    before = {k: t.clone() for k, t in model.state_dict().items()}
    windows = prompts(batch=3, length=9)
    found = streaming_losses(model, windows)
    logits = model.double()(windows)
    expected = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2), windows[:, 1:], reduction="none"
    ).mean(0)
    assert torch.allclose(found["loss"], expected, atol=1e-12)
    assert all(torch.equal(before[k], t) for k, t in model.state_dict().items())
    assert model.blocks[0].attention.window is None


def test_recomputed_losses_are_fresh_passes_over_the_last_window():
    model = model_of()
    windows = prompts(batch=2, length=16, seed=4)
    positions = torch.tensor([3, 7, 14])
    found = recomputed_losses(model, windows, 4, positions)
    for value, t in zip(found, positions.tolist(), strict=True):
        span = windows[:, t - 3 : t + 1]
        logits = model.double()(span)[:, -1]
        assert torch.isclose(value, torch.nn.functional.cross_entropy(logits, windows[:, t + 1]))
    full = streaming_losses(model, windows)["loss"]
    assert torch.isclose(found[0], full[3])  # the first full window is the start of the text


def test_the_held_out_loss_is_the_mean_over_every_position_in_any_pass_size():
    model = model_of(attention="latent", d_latent=6, d_rope=4)
    windows = prompts(batch=5, length=7)
    logits = model.double()(windows[:, :-1])
    expected = torch.nn.functional.cross_entropy(logits.transpose(1, 2), windows[:, 1:])
    for rows in (1, 2, 16, 2**70):
        assert held_out_loss(model, windows, rows) == pytest.approx(
            float(expected.detach()), abs=1e-12
        )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m, w: streaming_losses(m, w, 0), "window"),
        (lambda m, w: streaming_losses(m, w[:, :1]), "at least 2"),
        (lambda m, w: streaming_losses("model", w), "TodayGPT"),
        (lambda m, w: recomputed_losses(m, w, 4, torch.tensor([2])), "window - 1"),
        (
            lambda m, w: recomputed_losses(m, w, 4, torch.tensor([4]), keep=2),
            r"keep \+ window - 1 = 5",
        ),
        (lambda m, w: recomputed_losses(m, w, None, torch.tensor([4])), "None"),
        (lambda m, w: recomputed_losses(m, w, 4, torch.tensor([9])), "positions"),
        (lambda m, w: recomputed_losses(m, w, 4, torch.tensor([4.0])), "integers"),
        (lambda m, w: recomputed_losses(m, w, 4, torch.tensor([], dtype=torch.long)), "at least"),
        (lambda m, w: held_out_loss(m, w, 0), "rows_per_pass"),
        (lambda m, w: held_out_loss(m, w[:, :1]), "at least 2"),
    ],
)
def test_bad_streaming_arguments_are_named(call, message):
    with pytest.raises((TypeError, ValueError), match=message):
        call(model_of(), prompts(batch=2, length=10))


def test_latent_attention_has_no_window_to_stream_through():
    with pytest.raises(ValueError, match="latent"):
        streaming_losses(model_of(attention="latent", d_latent=6, d_rope=4), prompts(), 2)


def test_saved_variants_load_as_they_were_trained(tmp_path):
    results = {
        name: {"model": model_of(seed=i, **options).float(), "log": {"step": [1], "loss": [2.0]}}
        for i, (name, options) in enumerate(
            [("a", {}), ("b", {"attention": "latent", "d_latent": 6, "d_rope": 4})]
        )
    }
    path = tmp_path / "variants.pt"
    save_variants(path, results, TodayRecipe(steps=3), 9)
    loaded = load_variants(path)
    assert loaded["window_length"] == 9 and loaded["recipe"] == TodayRecipe(steps=3)
    assert loaded["logs"]["a"] == {"step": [1], "loss": [2.0]}
    ids = prompts()
    for name, result in results.items():
        model = loaded["models"][name]
        assert model.config == result["model"].config and not model.training
        assert model.output.weight is model.tokens.weight
        assert torch.allclose(model(ids), result["model"].half().float()(ids), atol=1e-5)


def test_a_damaged_or_foreign_file_is_named_with_its_remake(tmp_path):
    path = tmp_path / "variants.pt"
    save_checkpoint(
        path,
        {
            "configs": {"a": {"d_model": "wide"}},
            "recipe": {},
            "window_length": 3,
            "weights": {},
            "logs": {},
        },
    )
    with pytest.raises(CheckpointError, match="make todays-models"):
        load_variants(path)
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(CheckpointError, match="damaged"):
        load_variants(path)


def test_the_shipped_models_load_with_their_recipes():
    saved = load_variants(SAVED_MODELS)
    assert set(saved["models"]) == set(VARIANT_FIELDS) and saved["recipe"] == RECIPE
    counts = [sum(p.numel() for p in m.parameters()) for m in saved["models"].values()]
    assert max(counts) / min(counts) < 1.0002
    sinks = load_variants(SAVED_SINKS)
    assert sinks["bos"] and not saved["bos"] and set(sinks["models"]) == {"softmax", "sink"}
    assert sinks["models"]["sink"].config.sink and sinks["recipe"] == RECIPE
    qk = load_variants(SAVED_QK_NORM)
    assert qk["models"]["qk-norm"].config.qk_norm and not qk["models"]["plain"].config.qk_norm
    assert qk["recipe"] == QK_NORM_RECIPE and qk["window_length"] == QK_NORM_WINDOW_LENGTH


def test_the_stream_is_held_out_text_three_times_the_trained_window():
    stream = stream_sequences(3)
    assert stream.shape == (3, 385) and torch.equal(stream, packed_windows("test", 385)[:3])
    with pytest.raises(ValueError, match="at most"):
        stream_sequences(10**6)


def test_recomputed_losses_can_keep_the_first_pieces_in_each_fresh_pass():
    model = model_of()
    windows = prompts(batch=2, length=16, seed=5)
    found = recomputed_losses(model, windows, 3, torch.tensor([3, 9]), keep=1)
    for value, t in zip(found, (3, 9), strict=True):
        span = torch.cat([windows[:, :1], windows[:, t - 2 : t + 1]], dim=1)
        logits = model.double()(span)[:, -1]
        assert torch.isclose(value, torch.nn.functional.cross_entropy(logits, windows[:, t + 1]))


def test_windows_with_bos_begin_with_it_and_read_the_same_stream():
    plain = packed_windows("valid", 9)
    with_bos = packed_windows("valid", 9, bos=True)
    assert torch.all(with_bos[:, 0] == BOS_ID)
    assert torch.equal(with_bos[:, 1:].flatten()[:64], plain.flatten()[:64])
    assert torch.all(stream_sequences(2, bos=True)[:, 0] == BOS_ID)
    with pytest.raises(ValueError, match="bos must be True or False"):
        packed_windows("valid", 9, bos="yes")


# What a hostile pass found


def test_int32_windows_read_as_int64():
    model, windows = model_of(), prompts(batch=2, length=12)
    assert held_out_loss(model, windows.int()) == held_out_loss(model, windows)
    assert torch.equal(
        streaming_losses(model, windows.int(), 4)["loss"],
        streaming_losses(model, windows, 4)["loss"],
    )
    positions = torch.tensor([5, 9])
    assert torch.equal(
        recomputed_losses(model, windows.int(), 4, positions),
        recomputed_losses(model, windows, 4, positions),
    )


@pytest.mark.parametrize("damage", ["nan", "meta"])
def test_a_model_without_finite_weights_is_named(damage):
    model = model_of()
    if damage == "nan":
        with torch.no_grad():
            model.blocks[0].ffn[0].weight[0, 0] = float("nan")
    else:
        model = model.to("meta")
    for call in (held_out_loss, streaming_losses):
        with pytest.raises(ValueError, match="model's weight"):
            call(model, prompts())


def test_passes_too_large_for_memory_are_refused_at_the_door():
    torch.manual_seed(0)
    model = TodayGPT(TodayConfig(**{**SMALL, "vocab_size": 8000})).eval()
    with pytest.raises(ValueError, match="1 GiB"):
        streaming_losses(model, torch.randint(8000, (2**14, 2)))
    with pytest.raises(ValueError, match="rows_per_pass"):
        held_out_loss(model, torch.randint(8000, (2**14, 2)), rows_per_pass=2**14)
    with pytest.raises(ValueError, match="positions"):
        recomputed_losses(model, torch.randint(8000, (4, 64)), 8, torch.full((2**16,), 30))


def test_recomputing_reads_each_span_whole_whatever_window_the_model_has():
    windows, positions = prompts(batch=2, length=20), torch.tensor([12])
    assert torch.equal(
        recomputed_losses(model_of(window=2), windows, 8, positions),
        recomputed_losses(model_of(), windows, 8, positions),
    )


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"results": None}, TypeError, "results must be a dict"),
        ({"results": {}}, TypeError, "at least one model"),
        ({"results": {"a": {"model": "m", "log": {}}}}, TypeError, "TodayGPT"),
        ({"results": {"a": {"model": None}}}, TypeError, "TodayGPT"),
        ({"log": 5}, TypeError, "dict of lists"),
        ({"log": {"step": [1]}}, ValueError, "training log"),
        ({"log": {"step": [1, 2], "loss": [1.0]}}, ValueError, "as long as its steps"),
        ({"recipe": {}}, TypeError, "TodayRecipe"),
        ({"window_length": "41"}, ValueError, "window_length"),
        ({"window_length": 1}, ValueError, "window_length"),
        ({"bos": "yes"}, ValueError, "bos"),
    ],
)
def test_save_variants_refuses_what_load_variants_could_not_read(
    tmp_path, arguments, error, message
):
    good = {"step": [1], "loss": [2.0]}
    results = {"a": {"model": model_of(), "log": arguments.pop("log", good)}}
    call = {"results": results, "recipe": TodayRecipe(), "window_length": 9, **arguments}
    with pytest.raises(error, match=message):
        save_variants(tmp_path / "v.pt", **call)
    assert not (tmp_path / "v.pt").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"configs": {"a": {**SMALL, "d_model": 16384, "d_ff": 16384, "num_layers": 64}}},
            "parameters",
        ),
        ({"configs": {}}, "at least one"),
        ({"logs": {"a": 5}}, "training log"),
        ({"logs": {"a": {"step": [1], "loss": ["x"]}}}, "numbers"),
        ({"logs": {}}, "KeyError"),
    ],
)
def test_a_file_of_the_right_checksum_but_wrong_contents_is_named(tmp_path, change, message):
    path = tmp_path / "v.pt"
    save_variants(
        path, {"a": {"model": model_of(), "log": {"step": [1], "loss": [2.0]}}}, TodayRecipe(), 9
    )
    contents = torch.load(path, weights_only=True)
    save_checkpoint(path, {**contents, **change})
    with pytest.raises(CheckpointError, match=message):
        load_variants(path)


def test_an_empty_path_is_named():
    with pytest.raises(CheckpointError, match="empty"):
        load_variants("")
