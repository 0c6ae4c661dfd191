"""One training step of chapter 12's GPT against the same model built from torch's own layers
(``make bench``): how much this series' readable attention costs.

torch's model is GPT's architecture from ``nn.TransformerEncoderLayer(norm_first=True)``
under a causal mask: token and learned position embeddings, the pre-norm layers, a last
LayerNorm, an output layer tied to the token embedding, the same parameters one for one.
A step is a forward pass, cross-entropy over every position, backward and an AdamW step,
on a batch of chapter 12's median shape. After a warm-up the two steps are timed in turn
(GPT, torch, GPT, torch, ...), so drift in the machine's speed hits both alike; the script
prints each median and the ratio GPT / torch, in float32 and under bfloat16 autocast (as
chapter 12 trains). The goal is a ratio of at most 1.2.

Not a test: times depend on the machine and its load. Run it on an otherwise idle machine.
"""

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validation
from helpers.decoder_only import (
    RECIPE,
    build_sequences,
    build_translator,
    load_tokenizer_with_separator,
)
from helpers.gpt import GPT, GPTConfig
from helpers.translation import EOS_ID, load_pairs, token_batches

WARMUP = 3
STEPS = 20
GOAL = 1.2


class TorchGPT(nn.Module):
    """GPT's architecture from torch's layers: forward(ids (B, T)) -> logits (B, T, V)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        if config.attention_only:
            raise ValueError("torch's encoder layer always has a feed-forward block")
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.context_length, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        layer = nn.TransformerEncoderLayer(
            config.d_model,
            config.num_heads,
            config.d_ff,
            config.dropout,
            activation="relu",  # helpers.transformer.PositionWiseFFN's
            batch_first=True,
            norm_first=True,
        )
        self.encoder = nn.TransformerEncoder(
            layer,
            config.num_layers,
            norm=nn.LayerNorm(config.d_model),
            enable_nested_tensor=False,  # no nested tensors with norm_first (torch warns)
        )
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.output.weight = self.tokens.weight
        causal = nn.Transformer.generate_square_subsequent_mask(config.context_length)
        self.register_buffer("causal", causal, persistent=False)  # -inf above the diagonal

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        steps = ids.shape[1]
        where = torch.arange(steps, device=ids.device)
        x = self.dropout(self.tokens(ids) + self.positions(where))  # (B, T, d_model)
        x = self.encoder(x, mask=self.causal[:steps, :steps], is_causal=True)
        return self.output(x)  # (B, T, vocab_size)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # a tied matrix once


def copy_gpt_weights(gpt: GPT, torch_gpt: TorchGPT) -> None:
    """Give torch_gpt gpt's weights, so both compute the same function."""
    with torch.no_grad():
        for name in ("tokens", "positions"):
            getattr(torch_gpt, name).weight.copy_(getattr(gpt, name).weight)
        for block, layer in zip(gpt.blocks, torch_gpt.encoder.layers, strict=True):
            attention = block.attention
            projections = (attention.W_q, attention.W_k, attention.W_v)
            layer.self_attn.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
            layer.self_attn.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
            pairs = (
                (layer.self_attn.out_proj, attention.W_o),
                (layer.norm1, block.attention_residual.norm),
                (layer.linear1, block.ffn.linear1),
                (layer.linear2, block.ffn.linear2),
                (layer.norm2, block.ffn_residual.norm),
            )
            for theirs, ours in pairs:
                theirs.load_state_dict(ours.state_dict())
        torch_gpt.encoder.norm.load_state_dict(gpt.norm.state_dict())


def build_models(config: GPTConfig, seed: int = 0) -> tuple[GPT, TorchGPT]:
    """GPT(config) and TorchGPT(config) with the same weights and parameter count."""
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
    torch.manual_seed(validation.seed(seed))
    gpt, torch_gpt = GPT(config), TorchGPT(config)
    if parameter_count(gpt) != parameter_count(torch_gpt):
        raise AssertionError(
            f"GPT has {parameter_count(gpt):,} parameters, torch's model "
            f"{parameter_count(torch_gpt):,}: they are not the same configuration"
        )
    copy_gpt_weights(gpt, torch_gpt)
    return gpt, torch_gpt


def median_batch_shape(
    pairs: list[tuple[str, str]], tokenizer, separator_id: int, max_tokens: int
) -> tuple[int, int]:
    """(B, T) the model reads in chapter 12's batches, as train_decoder_only builds them,
    for the batch with the median number of positions B * T."""
    shapes = []
    for source, target in token_batches(pairs, tokenizer, max_tokens):
        english = [row[: row.index(EOS_ID)] for row in source.tolist()]
        french = [row[1 : row.index(EOS_ID)] for row in target.tolist()]
        sequences = build_sequences(english, french, separator_id)
        shapes.append((len(sequences), sequences.shape[1] - 1))  # it reads all but the last
    shapes.sort(key=lambda shape: shape[0] * shape[1])
    return shapes[len(shapes) // 2]


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor, bfloat16: bool
) -> Callable[[], float]:
    """A step with no arguments, for timing: forward, cross-entropy over every position,
    backward, AdamW step. It returns the loss."""
    targets = ids.roll(-1, dims=1)  # which tokens they are does not change the time

    def step() -> float:
        with torch.autocast("cpu", torch.bfloat16, enabled=bfloat16):
            logits = model(ids)  # (B, T, V)
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def interleaved_medians(
    steps: dict[str, Callable[[], object]], repeats: int, warmup: int = WARMUP
) -> dict[str, float]:
    """Seconds per call of each function: after `warmup` calls of each, `repeats` rounds
    that call each once in turn; the median of each function's times."""
    repeats = validation.whole_number(repeats, "repeats")
    warmup = validation.whole_number(warmup, "warmup", minimum=0)
    for _ in range(warmup):
        for step in steps.values():
            step()
    times = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def compare(
    config: GPTConfig,
    shape: tuple[int, int],
    bfloat16: bool,
    repeats: int,
    warmup: int = WARMUP,
    seed: int = 0,
) -> dict[str, float]:
    """Median seconds of a training step of "GPT" and of "torch" (fresh models, AdamW as
    chapter 12's recipe) on random ids of the given (B, T)."""
    batch = validation.whole_number(shape[0], "batch")
    length = validation.whole_number(shape[1], "length")
    if length > config.context_length:
        raise ValueError(f"length {length} is longer than the context {config.context_length}")
    models = dict(zip(("GPT", "torch"), build_models(config, seed), strict=True))
    ids = torch.randint(config.vocab_size, (batch, length))
    steps = {}
    for name, model in models.items():
        model.train()
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=RECIPE.learning_rate, weight_decay=RECIPE.weight_decay
        )
        steps[name] = training_step(model, optimizer, ids, bfloat16)
    return interleaved_medians(steps, repeats, warmup)


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text}")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=STEPS, help="timed steps each")
    parser.add_argument("--threads", type=positive_int, help="torch threads (default: torch's)")
    parser.add_argument("--batch", type=positive_int, help="sequences a batch (default: median)")
    parser.add_argument("--length", type=positive_int, help="tokens a sequence (default: median)")
    arguments = parser.parse_args()
    if arguments.threads is not None:
        torch.set_num_threads(arguments.threads)
    tokenizer, separator_id = load_tokenizer_with_separator()
    config = build_translator(tokenizer.get_vocab_size(), separator_id).config
    batch, length = arguments.batch, arguments.length
    if batch is None or length is None:
        median = median_batch_shape(load_pairs("train"), tokenizer, separator_id, RECIPE.max_tokens)
        batch, length = batch or median[0], length or median[1]
    print(f"{cpu_name()}, torch {torch.__version__} with {torch.get_num_threads()} threads")
    print(
        f"chapter 12's GPT: {config.num_layers} layers, d_model {config.d_model}, "
        f"{config.num_heads} heads, d_ff {config.d_ff}, vocabulary {config.vocab_size:,}, "
        f"dropout {config.dropout}; {parameter_count(GPT(config)):,} parameters in each model"
    )
    print(f"a batch of {batch} x {length} tokens; median of {arguments.steps} steps each")
    print(f"{'precision':10} {'GPT ms':>8} {'torch ms':>9} {'GPT / torch':>12}")
    for precision, bfloat16 in (("float32", False), ("bfloat16", True)):
        medians = compare(config, (batch, length), bfloat16, arguments.steps)
        ratio = medians["GPT"] / medians["torch"]
        verdict = "within" if ratio <= GOAL else "OVER"
        print(
            f"{precision:10} {1000 * medians['GPT']:8.1f} {1000 * medians['torch']:9.1f} "
            f"{ratio:11.2f}x  ({verdict} the goal of {GOAL}x)"
        )


if __name__ == "__main__":
    main()
