"""What the twenty-first hostile pass over chapters 12-14 found (outside chapter 14's models,
which tests/test_hostile_pass_21_ch14.py holds), each held: torch settings an answer leaves
changed that the checkers did not watch, a storage swapped under the caller's tensor, mistakes
named for another mistake's symptom, and messages that blamed the wrong thing."""

import dataclasses
import shutil
import sys

import pytest
import torch

from helpers import decoder_only, induction
from helpers.checkpoints import CheckpointError, checksum_path
from helpers.exercises import (
    check_answer_loss,
    check_induction_score,
    check_patchify,
    check_prefix_lm_mask,
    check_previous_token_score,
    check_top_p_filter,
)
from helpers.gpt import GPT, GPTConfig

SMALL = GPTConfig(vocab_size=16, context_length=8, d_model=16, num_heads=2, num_layers=1, d_ff=32)


def previous_token_score(weights):
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(-1)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda: torch.set_autocast_enabled("cpu", True), "cpu autocast switched on"),
        (
            lambda: torch.set_autocast_dtype("cpu", torch.float16),
            "cpu autocast dtype torch.float16",
        ),
        (lambda: torch.set_default_device("meta"), "default device meta"),
        (lambda: torch.set_default_device("cuda"), "default device cuda"),
        (
            lambda: torch.set_float32_matmul_precision("medium"),
            "matrix products 'bf16' (it was 'ieee')",
        ),
        (lambda: torch.set_flush_denormal(True), "flushing of denormal numbers on"),
    ],
)
def test_an_answer_that_leaves_a_rarer_torch_setting_changed_is_refused(change, words, run_checker):
    def answer(weights):
        change()
        return previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, answer)
    assert not verdict and words in out, out
    assert (
        not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    )
    assert torch.get_default_device() == torch.device("cpu")
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.tensor([1e-40]).mul(2).item() != 0  # denormals kept


def test_an_answer_that_swaps_the_storage_of_its_input_is_refused(run_checker):
    def patchify(images, p):
        images.data = images.data.clone()  # the same numbers, in memory the caller never gave
        B, C, H, W = images.shape
        patches = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
        return patches.reshape(B, -1, C * p * p)

    verdict, out = run_checker(check_patchify, patchify)
    assert not verdict and "replaces the storage of its input `images`" in out, out


def test_a_nan_loss_is_not_blamed_on_a_fixed_separator(run_checker):
    def overflowing(logits, sequences, separator_id):
        targets = sequences[:, 1:]
        scored = ((sequences == separator_id).cumsum(1)[:, :-1] > 0) & (targets != 0)
        e = logits.exp()
        p = e / e.sum(-1, keepdim=True)
        return -p.gather(-1, targets[..., None])[..., 0][scored].log().mean()

    verdict, out = run_checker(check_answer_loss, overflowing)
    assert not verdict and "fixed id" not in out and "exp(logits) overflows" in out, out


def test_a_loss_that_scores_eight_answer_tokens_at_most_is_not_called_right(run_checker):
    def first_eight(logits, sequences, separator_id):
        targets = sequences[:, 1:]
        after = (sequences == separator_id).cumsum(1)[:, :-1] > 0
        scored = after & (targets != 0) & (after.cumsum(1) <= 8)
        return torch.nn.functional.cross_entropy(logits[scored], targets[scored])

    verdict, _ = run_checker(check_answer_loss, first_eight)
    assert not verdict


def test_a_prefix_mask_of_a_typed_in_size_is_not_called_right(run_checker):
    def twelve(prompt_lengths, size):
        i = torch.arange(12)[:size]
        prompt = i[None] < prompt_lengths[:, None]
        return (i[None] <= i[:, None])[None] | (prompt[:, :, None] & prompt[:, None, :])

    verdict, _ = run_checker(check_prefix_lm_mask, twelve)
    assert not verdict


def test_a_prefix_mask_with_the_batch_last_is_told_so(run_checker):
    def batch_last(prompt_lengths, size):
        i = torch.arange(size)
        prompt = i[None] < prompt_lengths[:, None]
        mask = (i[None] <= i[:, None])[None] | (prompt[:, :, None] & prompt[:, None, :])
        return mask.permute(1, 2, 0)

    verdict, out = run_checker(check_prefix_lm_mask, batch_last)
    assert not verdict and "one mask for the whole batch" not in out, out
    assert out.count("the batch axis is last") == out.count("\n  - "), out


def test_a_batch_softmax_sorted_per_row_is_named(run_checker):
    def top_p_filter(logits, top_p):
        if top_p >= 1:
            return logits.clone()
        p = logits.flatten().softmax(0).view_as(logits)
        ps, order = p.sort(-1, descending=True)
        keep = (ps.cumsum(-1) - ps) < top_p
        kept = torch.zeros_like(keep).scatter(-1, order, keep)
        return logits.masked_fill(~kept, float("-inf"))

    verdict, out = run_checker(check_top_p_filter, top_p_filter)
    assert not verdict and "nothing is cut" not in out and "one softmax over the whole" in out


def test_the_private_nucleus_of_gpt_is_forbidden(run_checker):
    from helpers import gpt

    def top_p_filter(logits, top_p):
        if top_p >= 1:
            return logits.clone()
        kept = gpt._nucleus(logits.softmax(-1), top_p)
        return logits.masked_fill(~kept, float("-inf"))

    verdict, out = run_checker(check_top_p_filter, top_p_filter)
    assert not verdict and "calls helpers.gpt._nucleus" in out, out


@pytest.mark.parametrize("exercise", ["previous token", "induction"])
def test_the_notebooks_one_matrix_loop_is_told_to_index_the_last_two_axes(exercise, run_checker):
    def previous(weights):
        n = weights.shape[-1]
        return sum(weights[t, t - 1] for t in range(1, n)) / (n - 1)

    def induction_of(weights, length):
        return sum(weights[t, t - length + 1] for t in range(length, 2 * length)) / length

    checker, answer, key = {
        "previous token": (check_previous_token_score, previous, "t, t - 1"),
        "induction": (check_induction_score, induction_of, "t, t - length + 1"),
    }[exercise]
    verdict, out = run_checker(checker, answer)
    failures = out.splitlines()[1:]
    assert not verdict and failures, out
    assert all(f"weights[..., {key}]" in line for line in failures), out


def test_a_block_without_a_mask_for_several_positions_is_refused():
    block = GPT(SMALL).blocks[0]
    with pytest.raises(ValueError, match="mask is None for 4 positions"):
        block(torch.randn(1, 4, 16), None)
    assert block(torch.randn(1, 1, 16), None).shape == (1, 1, 16)


def test_caches_past_the_context_are_told_that_a_cache_cannot_be_cut():
    model = GPT(SMALL).eval()
    caches = model.new_caches()
    model(torch.full((1, 8), 5), caches)
    with pytest.raises(ValueError, match="the caches hold 8 positions already") as refused:
        model(torch.tensor([[5]]), caches)
    assert "keep the last" not in str(refused.value)


def test_the_size_guard_leaves_out_the_feed_forward_of_an_attention_only_model():
    config = dataclasses.replace(SMALL, attention_only=True, d_ff=2**20)
    from helpers.gpt import check_forward_size

    check_forward_size(config, 64, 8, 8)  # the d_ff of a layer that is never built
    with pytest.raises(ValueError, match="feed-forward"):
        check_forward_size(dataclasses.replace(config, attention_only=False), 64, 8, 8)


def test_the_default_placement_lengths_say_what_context_they_need():
    model = GPT(dataclasses.replace(SMALL, context_length=16, attention_only=True)).eval()
    with pytest.raises(ValueError, match="need a context of at least 48") as refused:
        induction.placement_map(model, rows=4)
    assert "lengths=" in str(refused.value)
    assert induction.placement_map(model, lengths=[2, 4], rows=2)["lengths"] == [2, 4]


def test_a_translator_config_with_an_unknown_key_names_it(tmp_path):
    from helpers.checkpoints import load_checkpoint, save_checkpoint

    keys = ("config", "separator_id", "weights", "history")
    saved = load_checkpoint(decoder_only.model_path("decoder-only"), keys, "")
    saved["config"] = {**saved["config"], "rotary_embedding_base_frequency": 10000}
    save_checkpoint(tmp_path / "f.pt", saved)
    with pytest.raises(CheckpointError, match="'rotary_embedding_base_frequency', which"):
        decoder_only.load_translator(path=tmp_path / "f.pt")


def test_a_checksum_file_that_is_a_folder_is_called_one(tmp_path):
    source = decoder_only.model_path("decoder-only")
    shutil.copy(source, tmp_path / "f.pt")
    checksum_path(tmp_path / "f.pt").mkdir()
    with pytest.raises(CheckpointError, match="f.pt.sha256 is a folder, not its checksum file"):
        decoder_only.load_translator(path=tmp_path / "f.pt")


# What the twenty-second pass found in these fixes and around them


def test_the_time_limit_never_stops_an_import_halfway(run_checker, monkeypatch, tmp_path):
    from helpers.exercises import framework

    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.6)\nREADY = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(framework, "ANSWER_TIME_LIMIT_SECONDS", 0.1)

    def answer(weights):
        import slow_to_import  # noqa: F401

        return previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, answer)
    imported = sys.modules.get("slow_to_import")  # not imported anew here
    assert imported is not None and imported.READY  # whole, though the limit passed during it
    assert not verdict and "did not return within" in out, out


def test_a_right_answer_passes_under_the_callers_inference_mode_or_autocast(run_checker):
    for mode in (torch.inference_mode(), torch.autocast("cpu")):
        with mode:
            verdict, out = run_checker(check_previous_token_score, previous_token_score)
        assert verdict, out


def test_setting_the_default_device_to_the_cpu_it_was_is_no_change(run_checker):
    def answer(weights):
        torch.set_default_device("cpu")
        return previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, answer)
    assert verdict, out
    assert getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None


def test_a_vision_model_with_a_forward_of_its_own_is_refused():
    from helpers.vision_models import load_vision_models, vit_attention_entropy

    vit = load_vision_models()["vit"]
    vit.head.forward = lambda x: torch.zeros(len(x), 10)
    with pytest.raises(ValueError, match="forward is replaced on head"):
        vit_attention_entropy(vit, torch.zeros(1, 1, 28, 28))
    del vit.head.forward


# What the twenty-third pass found


def test_a_dispatch_mode_left_entered_is_named_and_popped(run_checker):
    from torch.utils.flop_counter import FlopCounterMode

    def answer(weights):
        FlopCounterMode(display=False).__enter__()
        return previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, answer)
    assert not verdict and "FlopCounterMode entered" in out, out
    assert torch._C._len_torch_dispatch_stack() == 0


@pytest.mark.parametrize(
    "change",
    [
        lambda: torch.set_float32_matmul_precision("highest"),
        lambda: setattr(torch.backends.mkldnn.matmul, "fp32_precision", "ieee"),
        lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", False),
    ],
)
def test_a_precision_setting_that_changes_nothing_on_the_cpu_passes(change, run_checker):
    def answer(weights):
        change()
        return previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, answer)
    assert verdict, out
    assert torch.backends.mkldnn.matmul.fp32_precision == "none"


@pytest.mark.parametrize("backend", ["mkldnn"])
def test_a_backend_switched_off_is_refused_and_switched_back_on(backend, run_checker):
    def answer(weights):
        getattr(torch.backends, backend).enabled = False
        return previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, answer)
    assert not verdict and f"torch.backends.{backend}.enabled False" in out, out
    assert getattr(torch.backends, backend).enabled


def test_the_checker_keeps_the_callers_default_device_whatever_the_answer_sets(run_checker):
    torch.set_default_device("meta")
    try:

        def answer(weights):
            torch.set_default_device(None)
            return previous_token_score(weights)

        verdict, out = run_checker(check_previous_token_score, answer)
        assert verdict, out
        assert torch.zeros(1).device.type == "meta"
    finally:
        torch.set_default_device(None)


def test_a_checker_runs_under_cprofile(run_checker):
    import cProfile

    profile = cProfile.Profile()
    verdict = profile.runcall(check_previous_token_score, previous_token_score)
    assert verdict


def test_a_long_error_message_is_cut(run_checker):
    def answer(weights):
        raise ValueError("x" * 5000)

    verdict, out = run_checker(check_previous_token_score, answer)
    assert not verdict and "(5,000 characters)" in out and len(out) < 6 * 700, len(out)


def test_the_translator_loads_as_float32_on_the_cpu_whatever_the_caller_set():
    torch.set_default_dtype(torch.float64)
    try:
        model, _ = decoder_only.load_translator()
    finally:
        torch.set_default_dtype(torch.float32)
    assert next(model.parameters()).dtype == torch.float32


# What the twenty-fourth pass found


def test_a_checker_inside_the_callers_device_block_passes_a_right_answer(run_checker):
    with torch.device("meta"):
        verdict, out = run_checker(check_previous_token_score, previous_token_score)
        assert torch.empty(1).device.type == "meta"  # the caller's block, as it was
    assert verdict, out
    assert torch._C._len_torch_function_stack() == 0


def test_a_default_device_and_a_device_block_are_both_kept(run_checker):
    torch.set_default_device("meta")
    try:
        with torch.device("cpu"):
            verdict, out = run_checker(check_previous_token_score, previous_token_score)
            assert torch.empty(1).device.type == "cpu"
        assert torch.empty(1).device.type == "meta"
    finally:
        torch.set_default_device(None)
    assert verdict, out


def test_the_loaders_build_on_the_cpu_inside_a_device_block():
    with torch.device("meta"):
        model, _ = decoder_only.load_translator()
        models = induction.load_position_models()
    assert model.tokens.weight.device.type == "cpu"
    assert all(m.tokens.weight.device.type == "cpu" for m in models.values())
