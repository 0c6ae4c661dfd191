"""benchmarks/gpt_training_step.py: the model built from torch's layers is GPT's own
configuration (the same parameters, the same function once its weights are copied), the
batch shape is the median of chapter 12's batches, and one training step of each runs.
No timing is asserted."""

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.decoder_only import load_tokenizer_with_separator
from helpers.gpt import GPTConfig

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpt_training_step.py"
spec = importlib.util.spec_from_file_location("gpt_training_step", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)

TINY = GPTConfig(
    vocab_size=13, context_length=12, d_model=16, num_heads=2, num_layers=2, d_ff=24, dropout=0.1
)


def ids(batch: int = 3, length: int = 7) -> torch.Tensor:
    return torch.randint(
        TINY.vocab_size, (batch, length), generator=torch.Generator().manual_seed(1)
    )


def test_both_models_have_the_same_parameter_count():
    gpt, torch_gpt = bench.build_models(TINY)
    assert bench.parameter_count(gpt) == bench.parameter_count(torch_gpt)
    assert torch_gpt.output.weight is torch_gpt.tokens.weight  # tied, counted once


def test_with_gpts_weights_torchs_model_computes_the_same_logits_and_gradients():
    gpt, torch_gpt = (model.eval() for model in bench.build_models(TINY))
    tokens = ids()
    logits = {}
    for name, model in (("gpt", gpt), ("torch", torch_gpt)):
        logits[name] = model(tokens)
        F.cross_entropy(logits[name].flatten(0, 1), tokens.roll(-1, 1).flatten()).backward()
    torch.testing.assert_close(logits["torch"], logits["gpt"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(
        torch_gpt.tokens.weight.grad, gpt.tokens.weight.grad, rtol=1e-4, atol=1e-6
    )


def test_torchs_model_is_causal():
    _, torch_gpt = bench.build_models(TINY)
    torch_gpt.eval()
    tokens = ids()
    changed = tokens.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % TINY.vocab_size
    torch.testing.assert_close(torch_gpt(changed)[:, :4], torch_gpt(tokens)[:, :4])
    assert not torch.allclose(torch_gpt(changed)[:, 4:], torch_gpt(tokens)[:, 4:])


@pytest.mark.parametrize("bfloat16", [False, True])
def test_a_training_step_of_each_model_runs_and_changes_its_weights(bfloat16):
    for model in bench.build_models(TINY):
        before = [p.detach().clone() for p in model.parameters()]
        optimizer = torch.optim.AdamW(model.parameters())
        loss = bench.training_step(model, optimizer, ids(), bfloat16)()
        assert loss > 0 and torch.isfinite(torch.tensor(loss))
        assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def test_compare_times_both_models():
    medians = bench.compare(TINY, (2, 5), bfloat16=False, repeats=1, warmup=0)
    assert set(medians) == {"GPT", "torch"}
    assert all(seconds > 0 for seconds in medians.values())


def test_interleaved_medians_calls_each_step_in_turn():
    calls = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    medians = bench.interleaved_medians(steps, repeats=2, warmup=1)
    assert calls == ["a", "b"] * 3
    assert set(medians) == {"a", "b"}


def test_median_batch_shape_is_the_batch_in_the_middle():
    tokenizer, separator_id = load_tokenizer_with_separator()
    pairs = [("Go.", "Va !"), ("I am here.", "Je suis ici."), ("He is very tall.", "Il est grand.")]
    reads = []  # what the model reads: <bos> English <sep> French, without the closing <eos>
    for english, french in pairs:
        reads.append(2 + len(tokenizer.encode(english).ids) + len(tokenizer.encode(french).ids))
    # max_tokens 1: every pair is a batch of its own
    assert bench.median_batch_shape(pairs, tokenizer, separator_id, 1) == (1, sorted(reads)[1])


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="GPTConfig"):
        bench.TorchGPT({"d_model": 16})
    with pytest.raises(ValueError, match="feed-forward"):
        bench.TorchGPT(dataclasses.replace(TINY, attention_only=True))
    with pytest.raises(ValueError, match="longer than the context 12"):
        bench.compare(TINY, (2, 13), bfloat16=False, repeats=1)
    with pytest.raises(ValueError, match="repeats"):
        bench.interleaved_medians({"a": lambda: None}, repeats=0)
