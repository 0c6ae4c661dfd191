"""Induction heads (chapter 13): what attention learns to do on sequences whose second half
repeats the first. A block of random tokens cannot be predicted the first time; the second time
it can, by a head that finds the earlier occurrence of the current token and copies the token
that followed it. This module holds the task (repeated_sequences), the two scores that measure
a head's attention pattern (previous_token_score, induction_score) and the ablation that
silences heads (zeroed_heads, logits_with_heads_zeroed).
"""

import argparse
import contextlib
import io
import itertools
import math
import numbers
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from helpers import validation
from helpers.checkpoints import (
    MAX_CHECKPOINT_PARAMETERS,
    CheckpointError,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
    weights_misfit,
)
from helpers.contexts import (
    evaluating,
    keeping_random_state,
    one_torch_thread,
    plainly,
    trainable_float32,
)
from helpers.gpt import GPT, POSITIONS, GPTConfig, check_forward_size

# The task

LARGEST_ID = 2**63 - 1  # int64
MOST_BYTES = 2**31  # 2 GiB at the peak of one call: chapter 13's largest, measure of chapter
# 12's language model on 64 sequences, counts 0.95 GiB (_measure_bytes); more is a mistake in a
# size, not a batch


def repeated_sequences(
    batch: int, length: int, vocab_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, 2 * length) int64 ids: a block of `length` ids drawn uniformly from
    0..vocab_size - 1, followed by its exact copy."""
    batch, length, vocab_size = _checked_repeat(batch, length, vocab_size, generator)
    device = None if generator is None else generator.device
    block = torch.randint(vocab_size, (batch, length), generator=generator, device=device)
    return torch.cat([block, block], dim=1)  # (batch, 2 * length)


def _repeat_bytes(batch: int, length: int) -> int:
    """The bytes repeated_sequences holds at its peak: the block, then it and its copy (int64)."""
    return 8 * batch * length + 8 * batch * 2 * length


def distinct_ids(
    batch: int, n: int, vocab_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, n) int64 ids, each row n different tokens drawn uniformly from 0..vocab_size - 1
    (the first n of a random order of the vocabulary, whose time grows with the vocabulary:
    vocab_size at most MOST_VOCAB, batch x vocab_size at most MOST_SHUFFLED)."""
    batch, n, vocab_size = _check_distinct("distinct_ids", batch, n, vocab_size)
    _check_generator(generator)
    return _distinct(batch, n, vocab_size, generator)


def _distinct(
    batch: int, n: int, vocab_size: int, generator: torch.Generator | None
) -> torch.Tensor:
    device = None if generator is None else generator.device
    order = torch.rand(
        batch, vocab_size, generator=generator, device=device, dtype=torch.float32
    ).argsort(-1)  # float32 whatever the default dtype: the same draw in every session
    return order[:, :n]  # (batch, n)


MOST_VOCAB = 2**20  # tokens distinct_ids puts in a random order for one row, its vocabulary: a
# tenth of a second on one core; the chapter's models and recipes have 512
MOST_SHUFFLED = 2**23  # tokens in one call, batch x vocab_size: about a second on one core;
# chapter 13's most, 256 rows of 512, is 2^17


def placed_repeats(
    batch: int,
    n: int,
    start: int,
    length: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """(batch, n) int64 ids: n different tokens (distinct_ids), then the block at start..start +
    length - 1 copied over the `length` positions right after it. The copy is the only repeat."""
    batch, n, start, length, vocab_size = _checked_placement(
        batch, n, start, length, vocab_size, generator
    )
    return _placed_repeats(batch, n, start, length, vocab_size, generator)


def _placed_repeats(batch, n, start, length, vocab_size, generator) -> torch.Tensor:
    ids = _distinct(batch, n, vocab_size, generator)
    ids[:, start + length : start + 2 * length] = ids[:, start : start + length]
    return ids


# The scores of an attention pattern

MOST_WEIGHTS = 2**26  # numbers of the weights a score checks, each one (half a second on one
# core): measure's maps hold at most 2^31 / 48 (its byte cap: 48 bytes per number of a map)


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """weights (..., n, n), n >= 2 -> (...): the mean over the queries t = 1..n-1 of the weight
    on key t - 1, the previous token. An exact previous-token head scores 1."""
    _check_previous_token(weights)
    return _previous_token_score(weights)


def _previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    below = torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1)  # (..., n - 1): (t, t - 1)
    return below.mean(-1)


def induction_score(weights: torch.Tensor, length: int, start: int | None = None) -> torch.Tensor:
    """weights (..., n, n) on a block of `length` tokens and its copy, n = 2 * length -> (...):
    the mean over the queries of the copy, t = length..2*length-1, of the weight on key
    t - length + 1, the token after the earlier occurrence of the current token. An exact
    induction head scores 1. With start, the block starts there and its copy follows it at once
    anywhere in the n positions: the queries are t = start + length..start + 2*length - 1."""
    length, start = _checked_induction(weights, length, start)
    return _induction_score(weights, length, start)


def _induction_score(weights: torch.Tensor, length: int, start: int) -> torch.Tensor:
    stripe = torch.diagonal(weights, offset=1 - length, dim1=-2, dim2=-1)  # (t, t - length + 1)
    return stripe[..., start + 1 : start + length + 1].mean(-1)  # t = start + length ..


# Ablation: silence heads


def _head_pairs(model: GPT, heads: object) -> list[tuple[int, int]]:
    """heads as a list of (layer, head) pairs of whole numbers inside the model."""
    zero_dim = isinstance(heads, torch.Tensor | np.ndarray) and heads.ndim == 0
    if isinstance(heads, str | bytes) or not isinstance(heads, Iterable) or zero_dim:
        raise TypeError(
            f"heads must be an iterable of (layer, head) pairs such as [(0, 1)], got {heads!r:.80}"
        )
    config, pairs = model.config, []
    for pair in heads:  # an endless iterator repeats a pair, or names one out of range, soon
        if isinstance(pair, torch.Tensor | np.ndarray) and pair.ndim == 1:
            pair = tuple(pair)  # a row of a tensor or array of pairs
        if isinstance(pair, str | bytes) or not isinstance(pair, tuple | list) or len(pair) != 2:
            one_pair = " (for one head write [(layer, head)])" if isinstance(pair, int) else ""
            raise ValueError(
                f"heads must be (layer, head) pairs such as [(0, 1)], got the item {pair!r:.80}"
                f"{one_pair}"
            )
        layer = validation.whole_number(pair[0], "layer", minimum=0)
        head = validation.whole_number(pair[1], "head", minimum=0)
        if layer >= config.num_layers:
            raise ValueError(
                f"layer {validation.shown(layer)} is out of range: the model has "
                f"{config.num_layers} layer{'' if config.num_layers == 1 else 's'}, "
                f"0..{config.num_layers - 1}"
            )
        if head >= config.num_heads:
            raise ValueError(
                f"head {validation.shown(head)} is out of range: each layer has "
                f"{config.num_heads} head{'' if config.num_heads == 1 else 's'}, "
                f"0..{config.num_heads - 1}"
            )
        if (layer, head) in pairs:
            raise ValueError(
                f"heads names ({layer}, {head}) twice: name each (layer, head) at most once"
            )
        pairs.append((layer, head))
    return pairs


def _zeroing_hook(zeroed_columns: torch.Tensor):
    """A forward pre-hook for W_o: its input, the merged heads (B, n, d_model), with the
    zeroed columns set to 0 (one new tensor; the caller's stays as it was). The hook carries
    its columns, by which measure recognises it."""

    def hook(module, inputs):
        (merged, *rest) = inputs
        return (merged.masked_fill(zeroed_columns, 0.0), *rest)

    hook.zeroed_columns = zeroed_columns
    return hook


def zeroed_heads(model: GPT, heads: Iterable[tuple[int, int]]) -> contextlib.AbstractContextManager:
    """A context manager: while open, the output of each (layer, head) in `heads` is zero. W_o
    of that layer reads zeros in the head's columns head*d_head:(head+1)*d_head of the merged
    heads (laid out head after head, see helpers.attention.merge_heads); W_o's bias stays. No
    heads: no change. The arguments are checked here, at the call; the hooks are registered on
    entering and removed on leaving, also when the body raises."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    _check_modules(model, "zeroed_heads silences heads in the W_o of a GPT of its config")
    return _ZeroedHeads(model, _head_pairs(model, heads))


class _ZeroedHeads(contextlib.AbstractContextManager):
    """What zeroed_heads returns: it can be entered again after it was left."""

    def __init__(self, model: GPT, pairs: list[tuple[int, int]]):
        self.model, self.pairs, self._open = model, pairs, []

    def __enter__(self) -> GPT:
        zeroing = _zeroing(self.model, self.pairs)
        entered = zeroing.__enter__()
        self._open.append(zeroing)
        return entered

    def __exit__(self, *raised) -> bool | None:
        if not self._open:
            raise RuntimeError(
                "zeroed_heads was left without being entered: use it as `with zeroed_heads(model, "
                "heads):`, or call __enter__ before __exit__"
            )
        return self._open.pop().__exit__(*raised)


@contextlib.contextmanager
def _zeroing(model: GPT, pairs: list[tuple[int, int]]) -> Iterator[GPT]:
    d_head = model.config.d_model // model.config.num_heads
    by_layer: dict[int, set[int]] = {}
    for layer, head in pairs:
        by_layer.setdefault(layer, set()).add(head)
    handles = []
    try:
        for layer, layer_heads in by_layer.items():
            W_o = model.blocks[layer].attention.W_o
            zeroed = torch.zeros(model.config.d_model, dtype=torch.bool, device=W_o.weight.device)
            for head in layer_heads:
                zeroed[head * d_head : (head + 1) * d_head] = True
            handles.append(W_o.register_forward_pre_hook(_zeroing_hook(zeroed)))
        yield model
    finally:
        for handle in handles:
            handle.remove()


def logits_with_heads_zeroed(
    model: GPT, ids: torch.Tensor, heads: Iterable[tuple[int, int]]
) -> torch.Tensor:
    """model(ids) (B, T, vocab) with the given (layer, head) pairs' outputs zeroed, without
    gradients, in eval mode (each module's mode is restored afterwards)."""
    _check_model_and_ids(model, ids)
    with zeroed_heads(model, heads), evaluating(model), torch.no_grad():
        return model(ids)  # GPT refuses logits that overflow


# Measuring a model on repeated sequences


@torch.no_grad()
def measure(
    model: GPT,
    ids: torch.Tensor,
    length: int,
    heads_zeroed: Iterable[tuple[int, int]] = (),
    start: int | None = None,
) -> dict:
    """On repeated sequences ids (B, 2 * length): the mean loss of predicting the first copy's
    tokens 1 .. length - 1 and the second copy's tokens length + 1 .. 2 * length - 1 (each from
    the tokens before it), the second copy's top-1 accuracy, and every head's induction and
    previous-token scores, (layers, heads), averaged over the batch; with heads_zeroed, (layer,
    head) pairs, those heads' outputs are zeroed (zeroed_heads). With start, ids are (B, n) with
    the block at start and its copy right after it, other tokens around them. Computed in
    float64 on a copy of the model, so the numbers do not depend on the thread count."""
    model, ids, length, start = _check_repeated(model, ids, length, start)
    pairs = _head_pairs(model, heads_zeroed)
    _check_plain(model)
    batch, positions = ids.shape
    _check_bytes(
        "measure", _measure_bytes(model.config, batch, positions), rows=batch, positions=positions
    )
    return _measured(_float64_copy(model), ids, length, start, pairs)


def _measured(
    exact: GPT, ids: torch.Tensor, length: int, start: int, pairs: list[tuple[int, int]] = ()
) -> dict:
    """measure's numbers on exact, a float64 copy, for ids and arguments already checked."""
    with _zeroing(exact, pairs):
        measured = _copy_measured(exact, ids, length, start)
    maps = exact.attention_maps()  # each (B, heads, n, n)
    return {
        **measured,
        "induction": torch.stack([_induction_score(w, length, start).mean(0) for w in maps]),
        "previous_token": torch.stack([_previous_token_score(w).mean(0) for w in maps]),
    }


def _copy_measured(exact: GPT, ids: torch.Tensor, length: int, start: int) -> dict:
    """The losses on the block and on its copy, and the copy's accuracy, the logits made only
    at the positions that predict them (the rest would be most of the work)."""
    read = slice(start, start + 2 * length - 1)  # the positions predicting start + 1 .. on
    features = exact._features(ids, None, 0)  # (B, n, d_model): ids checked at the door
    logits = exact.output(features[:, read])  # (B, 2 * length - 1, vocab)
    exact.check_finite_logits(logits)
    targets = ids[:, start + 1 : start + 2 * length].long()  # cross_entropy reads int64 only
    losses = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    # losses[:, t] is the loss of predicting ids[:, start + t + 1]: (B, 2 * length - 1)
    copy = slice(length, 2 * length - 1)  # predicting copy tokens 1 .. length - 1
    return {
        "first_copy_loss": losses[:, : length - 1].mean().item(),
        "second_copy_loss": losses[:, copy].mean().item(),
        "second_copy_accuracy": (logits[:, copy].argmax(-1) == targets[:, copy])
        .double()
        .mean()
        .item(),
    }


PLACEMENT_LENGTHS = (2, 3, 4, 6, 8, 12, 16, 20, 24)  # block lengths the placement map shows
MOST_PLACEMENT_BYTES = 2**37  # placement_map's rows' bytes in all: 5 times the notebook's call
# on the recipe's models (a minute on one core)


def placement_map(
    model: GPT, lengths: Iterable[int] = PLACEMENT_LENGTHS, rows: int = 64, seed: int = 0
) -> dict:
    """Where in its context a model predicts a copy. For each block length and each start at
    which the block and its copy fit in the model's context, measure() on `rows` placed_repeats
    (the copy right after the block, every other token different). Returns {"lengths": [...],
    "starts": [0, 1, ...], and "first_copy_loss", "second_copy_loss", "second_copy_accuracy":
    (lengths, starts) float64 tensors, NaN where the block and its copy do not fit}."""
    _check_model_and_ids(model, torch.zeros(1, 1, dtype=torch.long))
    n = model.config.context_length
    if n < 4:
        raise ValueError(
            f"the model's context ({n}) is too short for a block of 2 and its copy, the shortest "
            f"placement_map measures"
        )
    if model.config.vocab_size < n:
        raise ValueError(
            f"the model's vocabulary ({model.config.vocab_size} tokens) is smaller than its "
            f"context ({n}): a placed repeat needs every other token different"
        )
    if lengths is PLACEMENT_LENGTHS and 2 * PLACEMENT_LENGTHS[-1] > n:
        raise ValueError(
            f"the default lengths, PLACEMENT_LENGTHS {PLACEMENT_LENGTHS}, need a context of at "
            f"least {2 * PLACEMENT_LENGTHS[-1]}, and this model's is {n}: pass lengths= with "
            f"block lengths that fit twice in it, 2 to {n // 2}"
        )
    lengths = _check_lengths(lengths, n)
    rows = validation.whole_number(rows, "rows")
    _check_bytes("placement_map", _measure_bytes(model.config, rows, n), rows=rows, positions=n)
    _check_shuffled("placement_map", rows, model.config.vocab_size, "rows")
    _check_placement_work(model.config, lengths, rows)
    _check_plain(model)
    generator = _seeded(validation.seed(seed))
    exact = _float64_copy(model)  # once, for every cell
    starts = list(range(n - 2 * min(lengths) + 1))
    found = {
        key: torch.full((len(lengths), len(starts)), math.nan, dtype=torch.float64)
        for key in ("first_copy_loss", "second_copy_loss", "second_copy_accuracy")
    }
    for i, length in enumerate(lengths):
        for start in range(n - 2 * length + 1):
            ids = _placed_repeats(rows, n, start, length, model.config.vocab_size, generator)
            measured = _copy_measured(exact, ids, length, start)
            for key, table in found.items():
                table[i, start] = measured[key]
    return {"lengths": lengths, "starts": starts, **found}


def _float64_copy(model: GPT) -> GPT:
    """A plain GPT of the model's config holding its weights in float64, in eval mode, or a
    ValueError naming a layer of another type (its forward would not run) or the weights that
    do not fit one (a layer replaced, a weight added)."""
    _check_modules(
        model, "measure computes on a float64 copy of its weights in a plain GPT of its config"
    )
    exact = blank_model(model.config).to(model.tokens.weight.device, torch.float64).eval()
    misfit = weights_misfit(exact, model.state_dict())
    if misfit:
        raise ValueError(
            f"measure computes on a float64 copy of the model in a plain GPT of its config: "
            f"{misfit}"
        )
    exact.load_state_dict(model.state_dict())
    return exact


MODULE_SIZES = (  # the attributes that size a GPT's modules: each must be as its config says
    "d_model",
    "num_heads",
    "num_kv_heads",
    "rope",
    "in_features",
    "out_features",
    "num_embeddings",
    "embedding_dim",
    "normalized_shape",
)


def _measure_bytes(config: GPTConfig, batch: int, n: int) -> int:
    """An upper bound of the bytes measure holds at its peak on ids (batch, n), all float64:
    the copy of the weights; every layer's attention maps (B, heads, n, n), which the copy
    keeps, and in the last layer five more of that shape (the scores, two masked fills, the
    softmax, the weights) and two boolean masks; the logits, their log-softmax, a copy and the
    boolean checks (B, n, vocab), about four of them; ten tensors of the residual stream (B, n,
    d_model) and two of the feed-forward layer (B, n, d_ff). Measured: the peak is 0.5 to 0.9
    of it (chapter 12's language model on 64 sequences of 48: 687 MiB of 0.95 GiB)."""
    maps = config.num_heads * n * n
    feed_forward = 0 if config.attention_only else 2 * config.d_ff
    per_row = (
        8 * (config.num_layers + 5) * maps
        + 2 * maps
        + 8 * n * (4 * config.vocab_size + 10 * config.d_model + feed_forward)
    )
    return 8 * config.parameter_count() + batch * per_row


def blank_model(config: GPTConfig) -> GPT:
    """A float32 GPT of this config to load weights into (the dtype the models are trained and
    measured in, whatever the caller's default), built without drawing from torch's global
    generator: its initial weights are overwritten, and the caller's random numbers stay theirs."""
    with keeping_random_state():
        return GPT(config).float()


# Training: a block repeated after a gap, the two models, the saved file


MOST_LOGITS = 2**31  # in one batch: 8 GiB of float32, more is a mistake in a size
MOST_STEPS = 100_000  # 40 times the recipe's 2,500, which train the two-layer model in about a
# minute on one core: more would train for hours
LARGEST_LEARNING_RATE = 1.0  # AdamW moves each weight by about the learning rate a step: 1 is
# already 50 times the 0.02 the weights start at
MOST_FILE_BYTES = 16 * 2**20  # what one file in data/ may hold


def _check_shuffled(call: str, batch: int, vocab_size: int, batch_name: str = "batch") -> None:
    """A ValueError naming the call, the batch and vocab_size, if the call would put more than
    MOST_VOCAB tokens in a random order for a row or more than MOST_SHUFFLED in all: its time
    grows with the vocabulary, whatever n."""
    if vocab_size > MOST_VOCAB or batch * vocab_size > MOST_SHUFFLED:
        raise ValueError(
            f"{call} draws each row's different tokens from a random order of the whole "
            f"vocabulary, at most 2^{MOST_VOCAB.bit_length() - 1} = {MOST_VOCAB:,} tokens "
            f"(vocab_size) and 2^{MOST_SHUFFLED.bit_length() - 1} = {MOST_SHUFFLED:,} in one "
            f"call ({batch_name} x vocab_size), got {batch_name} {validation.shown(batch)}, "
            f"vocab_size {validation.shown(vocab_size)}"
        )


def _check_bytes(call: str, peak: int, **sizes: int) -> None:
    """A ValueError naming the call and the sizes asked for, if the call would hold more than
    MOST_BYTES at its peak."""
    if peak > MOST_BYTES:
        asked = ", ".join(f"{name} {validation.shown(size)}" for name, size in sizes.items())
        raise ValueError(
            f"{call} would allocate {validation.shown(peak)} bytes at its peak, more than "
            f"2^{MOST_BYTES.bit_length() - 1} ({MOST_BYTES // 2**30} GiB): {asked}"
        )


@dataclass(frozen=True)
class Recipe:
    """How chapter 13's two models are trained; each default says why."""

    vocab_size: int = 512  # room for 48 different tokens; ln 512 = 6.24: a token not predicted
    context_length: int = 48
    d_model: int = 128  # at 64, a block of 4 copied late in the context was predicted with a
    # second-copy loss 0.6 to 0.9 times the first copy's; at 128, at most 0.41 times
    num_heads: int = 2  # per layer: room for a previous-token head and one more
    position: str = "rope"  # learned and sinusoidal positions learned the circuit for some
    # placements only (second-copy accuracy 0.00 at others); RoPE scores by offset alone
    shortest_block: int = 2
    longest_block: int = 20  # blocks of every length, so no fixed offset predicts the copy
    batch_size: int = 64
    steps: int = 4000  # the phase change comes at about 950; the rest sharpens the circuit
    learning_rate: float = 1e-3  # at 3e-3 the layer-0 heads settled on a shifted circuit
    weight_decay: float = 0.0  # 0.1 kept short copies late in the context less sure
    log_every: int = 25  # steps between two rows of the log
    snapshot_every: int = 200  # steps between two copies of the weights kept in float16 (the
    # explorer replays them): more would not fit in the 16 MB a file in data/ may hold
    eval_batch: int = 256
    eval_length: int = 24  # held-out sequences: a block of 24, then its copy
    seed: int = 0

    def __post_init__(self):
        kinds = {field.name: validation.recipe_size for field in fields(self)}  # in their order
        kinds.update(
            learning_rate=validation.positive_number,
            weight_decay=validation.at_least_zero,
            seed=validation.seed,
            position=validation.one_of(POSITIONS),
        )
        validation.coerce_fields(self, kinds)
        if self.steps > MOST_STEPS:
            raise ValueError(
                f"steps must be at most {MOST_STEPS:,} (the recipe's {Recipe.steps:,} take about "
                f"a minute): got {validation.shown(self.steps)}"
            )
        if self.learning_rate > LARGEST_LEARNING_RATE:
            raise ValueError(
                f"learning_rate must be at most {LARGEST_LEARNING_RATE:g}: AdamW moves each "
                f"weight by about the learning rate a step (the recipe's is "
                f"{Recipe.learning_rate:g}), got {self.learning_rate:g}"
            )
        if self.learning_rate * self.weight_decay >= 1:
            raise ValueError(
                f"learning_rate x weight_decay must be below 1, got {self.learning_rate:g} x "
                f"{self.weight_decay:g}: AdamW multiplies every weight by 1 - learning_rate x "
                f"weight_decay each step, which would zero it or flip its sign (the recipe's "
                f"weight_decay is {Recipe.weight_decay:g})"
            )
        validation.head_size(self.d_model, self.num_heads)
        if self.vocab_size < self.context_length:
            raise ValueError(
                f"vocab_size ({self.vocab_size}) must be at least context_length "
                f"({self.context_length}): a training sequence's tokens all differ but the copy's"
            )
        if self.eval_length < 2:
            raise ValueError(
                f"eval_length must be >= 2 (a block of one token has no token after its first "
                f"occurrence in the block), got {self.eval_length}"
            )
        if not 2 <= self.shortest_block <= self.longest_block <= self.context_length // 2:
            raise ValueError(
                f"blocks must satisfy 2 <= shortest_block ({self.shortest_block}) <= "
                f"longest_block ({self.longest_block}) <= context_length / 2 "
                f"({self.context_length // 2})"
            )
        if 2 * self.eval_length > self.context_length:
            raise ValueError(
                f"eval_length {self.eval_length} and its copy do not fit in the context of "
                f"{self.context_length}"
            )
        for batch in ("batch_size", "eval_batch"):
            logits = getattr(self, batch) * self.context_length * self.vocab_size
            if logits > MOST_LOGITS:
                raise ValueError(
                    f"{batch} * context_length * vocab_size = {logits:,} logits in one batch, "
                    f"more than {MOST_LOGITS:,} (8 GiB of float32): {batch} "
                    f"{getattr(self, batch)}, context_length {self.context_length}, "
                    f"vocab_size {self.vocab_size}"
                )
        _check_shuffled("training_batch", self.batch_size, self.vocab_size, "batch_size")
        _check_bytes(
            "the held-out repeated_sequences",
            _repeat_bytes(self.eval_batch, self.eval_length),
            eval_batch=self.eval_batch,
            eval_length=self.eval_length,
        )


MODEL_LAYERS = {"one-layer": 1, "two-layer": 2}
SAVED_MODELS = Path(__file__).parents[1] / "data" / "induction_models.pt"
REMAKE = "make induction-models"


def model_config(recipe: Recipe, num_layers: int) -> GPTConfig:
    """An attention-only GPT of the recipe's sizes, refused by its number of parameters, counted
    before any model is built, when a checkpoint could not hold it."""
    _check_recipe(recipe)
    num_layers = validation.layer_count(num_layers, "num_layers")
    config = GPTConfig(
        vocab_size=recipe.vocab_size,
        context_length=recipe.context_length,
        d_model=recipe.d_model,
        num_heads=recipe.num_heads,
        num_layers=num_layers,
        d_ff=4 * recipe.d_model,  # unused: attention_only drops the feed-forward blocks
        attention_only=True,
        position=recipe.position,
    )
    parameters = _parameter_count(config)
    if parameters > MAX_CHECKPOINT_PARAMETERS:
        raise ValueError(
            f"a {num_layers}-layer model of this recipe would have {parameters:,} parameters, "
            f"more than a checkpoint of at most 16 MB in float16 can hold "
            f"({MAX_CHECKPOINT_PARAMETERS:,}): vocab_size {recipe.vocab_size}, context_length "
            f"{recipe.context_length}, d_model {recipe.d_model}"
        )
    return config


def _parameter_count(config: GPTConfig) -> int:
    """A GPT's parameters, counted on the meta device (nothing is allocated, however large the
    config): the blocks are alike, so one block's count times the layers, plus the rest."""
    with torch.device("meta"):
        one, two = (
            sum(p.numel() for p in GPT(replace(config, num_layers=layers)).parameters())
            for layers in (1, 2)
        )
    return one + (config.num_layers - 1) * (two - one)


def training_batch(recipe: Recipe, generator: torch.Generator) -> torch.Tensor:
    """(batch_size, context_length) ids, all different but for one block of a random length
    copied after a random gap: (start, gap) drawn uniformly from every pair that fits, so a
    copy can sit anywhere. The only way to predict the copy is to find the earlier occurrence
    of the current token and read the token after it, and nothing else repeats to mislead."""
    _check_recipe(recipe)
    _check_generator(generator, optional=False)  # never torch's global one
    batch, n = recipe.batch_size, recipe.context_length
    ids = _distinct(batch, n, recipe.vocab_size, generator)  # (batch, n)
    lengths = torch.randint(
        recipe.shortest_block, recipe.longest_block + 1, (batch, 1), generator=generator
    )
    slots = n - 2 * lengths + 2  # (batch, 1): start + gap <= n - 2 length is two cuts of slots
    first = (torch.rand(batch, 1, generator=generator, dtype=torch.float32) * slots).long()
    second = (torch.rand(batch, 1, generator=generator, dtype=torch.float32) * (slots - 1)).long()
    second = second + (second >= first)  # another slot than the first, every pair alike
    starts = torch.minimum(first, second)  # (batch, 1)
    gaps = torch.maximum(first, second) - starts - 1  # (batch, 1)
    positions = torch.arange(n)  # (n,)
    copy_starts = starts + lengths + gaps  # (batch, 1)
    in_copy = (positions >= copy_starts) & (positions < copy_starts + lengths)  # (batch, n)
    sources = (positions - lengths - gaps).clamp(min=0)  # (batch, n): where each copy reads
    return torch.where(in_copy, ids.gather(1, sources), ids)


def train_model(num_layers: int, recipe: Recipe = Recipe(), progress: bool = False) -> dict:
    """Train one attention-only GPT; returns {"model", "log", "snapshots", "seconds"}. The log
    holds, every recipe.log_every steps, measure() on held-out repeated sequences: "step",
    "first_copy_loss", "second_copy_loss", "second_copy_accuracy" (lists) and "induction",
    "previous_token" ((rows, layers, heads) tensors). snapshots: the weights every
    recipe.snapshot_every steps in float16, {step: state_dict}. Runs on one thread, so a rerun is
    bit-identical on the same machine."""
    _check_trainable(recipe, [num_layers])  # before the minutes of training
    return _train_model(num_layers, recipe, validation.flag(progress, "progress"))


def _train_model(num_layers: int, recipe: Recipe, progress: bool) -> dict:
    """train_model for a recipe _check_trainable has taken with these layers."""
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        return _train(num_layers, recipe, progress)


def _step_bytes(config: GPTConfig, batch: int) -> int:
    """An estimate of the bytes one training step holds at its peak, all float32: the weights,
    their gradients and AdamW's two moments; in every layer six attention maps (B, heads, n, n)
    (the scores, their masked fill, the softmax kept for the backward pass, and the gradients
    of each) and ten tensors of the residual stream (B, n, d_model) and two of the feed-forward
    layer (B, n, d_ff); the logits, their log-softmax and the gradients of both (B, n, vocab).
    Measured: the memory two steps add is 0.8 of it (two layers, context 1024, vocabulary 2048,
    batch 4: 412 of 523 MiB)."""
    n = config.context_length
    feed_forward = 0 if config.attention_only else 2 * config.d_ff
    per_layer = 6 * config.num_heads * n * n + n * (10 * config.d_model + feed_forward)
    per_row = config.num_layers * per_layer + 4 * n * config.vocab_size
    return 4 * (4 * config.parameter_count() + batch * per_row)


def _saved_bytes(recipe: Recipe, configs: list[GPTConfig]) -> int:
    """The bytes of the file train_and_save writes for models of these configs, counted before
    training: the file written with blank models' weights, logs of the recipe's rows and one
    snapshot each, and what one more snapshot each adds to it (float16 weights, as training
    keeps them) for every further snapshot."""
    steps = list(range(0, recipe.steps + 1, recipe.log_every))
    kept = list(range(0, recipe.steps + 1, recipe.snapshot_every))
    models = {config.num_layers: blank_model(config) for config in configs}
    logs = {
        config.num_layers: {
            "step": steps,
            **{key: [float(row) for row in range(len(steps))] for key in LOG_RANGES},
            **{
                key: torch.zeros(len(steps), config.num_layers, config.num_heads)
                for key in LOG_SCORES
            },
        }
        for config in configs
    }

    def written(snapshots: int) -> int:  # each state_dict() names its weights anew, as in _train
        kept_weights = {
            layers: {step: _half_weights(model) for step in kept[:snapshots]}
            for layers, model in models.items()
        }
        weights = {layers: model.state_dict() for layers, model in models.items()}
        contents = {"recipe": asdict(recipe), "weights": weights, "logs": logs}
        return _written_bytes({**contents, "snapshots": kept_weights})

    one = written(1)
    return one + (len(kept) - 1) * (written(2) - one)


def _half_weights(model: GPT) -> dict[str, torch.Tensor]:
    """A copy of the model's state_dict in float16, a weight the model ties under two names (the
    token embedding and the output layer) still one tensor: saved once, not twice."""
    halves = {}  # by where a weight's numbers lie: a tied weight's two names share them
    for key, value in model.state_dict().items():
        where = (value.untyped_storage().data_ptr(), value.storage_offset(), value.shape)
        if where not in halves:
            half = value.to(torch.float16, copy=True)
            if not half.isfinite().all():  # check_snapshots would refuse the saved file
                raise ValueError(
                    f"the weight {key} holds a value beyond float16's range (65,504) or NaN, "
                    f"which a snapshot cannot keep"
                )
            halves[where] = half
    return {
        key: halves[(value.untyped_storage().data_ptr(), value.storage_offset(), value.shape)]
        for key, value in model.state_dict().items()
    }


def _written_bytes(contents: object) -> int:
    """The bytes torch.save writes for contents."""
    written = io.BytesIO()
    torch.save(contents, written)
    return written.tell()


def _seeded(seed: int) -> torch.Generator:
    """A generator seeded with seed, wrapped into 0..2^32 - 1 (the bits torch's cpu generator
    reads)."""
    return torch.Generator().manual_seed(seed % 2**32)


def _train(num_layers: int, recipe: Recipe, progress: bool) -> dict:
    torch.manual_seed(recipe.seed)
    model = GPT(model_config(recipe, num_layers))
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay
    )
    generator = _seeded(recipe.seed + 1)
    held_out = repeated_sequences(
        recipe.eval_batch, recipe.eval_length, recipe.vocab_size, _seeded(recipe.seed + 2)
    )
    rows, snapshots, start = [], {}, time.perf_counter()
    bar = tqdm(range(recipe.steps + 1), desc=f"{num_layers} layer(s)", disable=not progress)
    for step in bar:
        if step % recipe.log_every == 0:
            rows.append({"step": step, **measure(model, held_out, recipe.eval_length)})
            bar.set_postfix(second_copy_loss=f"{rows[-1]['second_copy_loss']:.2f}")
        if step % recipe.snapshot_every == 0:
            try:
                snapshots[step] = _half_weights(model)
            except ValueError as problem:  # weights beyond float16's range: they grew unbounded
                raise ValueError(
                    f"training diverged at step {step}: {problem}; the learning rate "
                    f"{recipe.learning_rate:g} is too large (the recipe's default is "
                    f"{Recipe.learning_rate:g})"
                ) from None
        if step == recipe.steps:
            break
        ids = training_batch(recipe, generator)  # (batch, n)
        try:
            logits = model(ids)  # (batch, n, vocab)
        except ValueError:  # GPT refuses logits that overflow: the weights grew without bound
            raise _diverged(step, recipe) from None
        loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        _check_not_diverged(model, loss, step, recipe)
    model.eval()
    log = {key: [row[key] for row in rows] for key in rows[0]}
    for key in ("induction", "previous_token"):
        log[key] = torch.stack(log[key])  # (rows, layers, heads)
    return {
        "model": model,
        "log": log,
        "snapshots": snapshots,
        "seconds": time.perf_counter() - start,
    }


def _diverged(step: int, recipe: Recipe) -> ValueError:
    return ValueError(
        f"training diverged at step {step}: the loss, the logits or the weights hold NaN or "
        f"inf; the learning rate {recipe.learning_rate:g} is too large (the recipe's default is "
        f"{Recipe.learning_rate:g})"
    )


def train_and_save(path: str | Path = SAVED_MODELS, recipe: Recipe = Recipe()) -> dict:
    """Train the one-layer and the two-layer model with one recipe and save both, their logs
    and their snapshots in one checksummed file. Returns {name: seconds of training}."""
    path = savable_path(path)
    _check_trainable(recipe, MODEL_LAYERS.values())  # both, before the first one trains
    results = {name: _train_model(layers, recipe, True) for name, layers in MODEL_LAYERS.items()}
    save_checkpoint(
        path,
        {
            "recipe": asdict(recipe),
            "weights": {name: result["model"].state_dict() for name, result in results.items()},
            "logs": {name: result["log"] for name, result in results.items()},
            "snapshots": {name: result["snapshots"] for name, result in results.items()},
        },  # no timings: a rerun on the same machine writes the same bytes
    )
    return {name: result["seconds"] for name, result in results.items()}


SAVED_POSITION_MODELS = SAVED_MODELS.with_name("induction_positions.pt")


def train_and_save_positions(
    path: str | Path = SAVED_POSITION_MODELS, recipe: Recipe = Recipe()
) -> dict:
    """Train the two-layer model as the recipe says, once with each of the other ways of giving
    positions (chapter 11's: the recipe's own is the shipped two-layer model), and save their
    final weights in one checksummed file: the comparison behind the recipe's choice. Returns
    {position: seconds of training}."""
    path = savable_path(path)
    _check_recipe(recipe)
    recipes = {
        position: replace(
            recipe, position=position, log_every=recipe.steps, snapshot_every=recipe.steps
        )
        for position in POSITIONS
        if position != recipe.position
    }
    for other in recipes.values():
        _check_trainable(other, [2])
    results = {position: _train_model(2, other, True) for position, other in recipes.items()}
    weights = {position: result["model"].state_dict() for position, result in results.items()}
    save_checkpoint(path, {"recipe": asdict(recipe), "weights": weights})
    return {position: result["seconds"] for position, result in results.items()}


@plainly
def load_position_models(path: str | Path = SAVED_POSITION_MODELS) -> dict[str, GPT]:
    """The two-layer models train_and_save_positions saved, by the way they give positions
    ("learned", "sinusoidal"), in eval mode (checksum verified, weights_only=True)."""
    saved = load_checkpoint(path, ("recipe", "weights"), REMAKE)
    recipe = _saved_recipe(path, saved["recipe"])
    expected = sorted(position for position in POSITIONS if position != recipe.position)
    weights = saved["weights"]
    if not isinstance(weights, dict) or sorted(weights, key=str) != expected:
        found = sorted(weights, key=str) if isinstance(weights, dict) else type(weights).__name__
        raise CheckpointError(f"{path}: its weights should name {expected}, found {found}")
    models = {}
    for position in expected:
        try:
            config = model_config(replace(recipe, position=position), 2)
        except ValueError as error:
            raise CheckpointError(
                f"{path}: its recipe builds no loadable model ({error})"
            ) from None
        where = f"{path} ({position})"
        models[position] = blank_model(config)
        load_weights(models[position], float_weights(weights[position], where), where)
        models[position].eval()
    return models


@plainly
def load_training(path: str | Path = SAVED_MODELS) -> dict:
    """Everything the saved file holds (checksum verified, weights_only=True): {"recipe":
    Recipe, "models": {name: GPT in eval mode}, "logs", "snapshots"}."""
    saved = load_checkpoint(path, ("recipe", "weights", "logs", "snapshots"), REMAKE)
    recipe = _saved_recipe(path, saved["recipe"])
    for key in ("weights", "logs", "snapshots"):
        if not isinstance(saved[key], dict) or set(saved[key]) != set(MODEL_LAYERS):
            found = (
                sorted(saved[key], key=str)
                if isinstance(saved[key], dict)
                else type(saved[key]).__name__
            )
            raise CheckpointError(
                f"{path}: its {key} should name {sorted(MODEL_LAYERS)}, found {found}"
            )
    models = {}
    for name, layers in MODEL_LAYERS.items():
        try:
            config = model_config(recipe, layers)  # sizes checked before a model is built
        except ValueError as error:
            raise CheckpointError(
                f"{path}: its recipe builds no loadable model ({error})"
            ) from None
        models[name] = blank_model(config)
        where = f"{path} ({name})"
        load_weights(models[name], float_weights(saved["weights"][name], where), where)
        models[name].eval()
        check_log(where, saved["logs"][name], recipe, layers)
        check_snapshots(where, saved["snapshots"][name], recipe, layers)
        _check_final_snapshot(where, models[name], saved["snapshots"][name], recipe)
    return {
        "recipe": recipe,
        "models": models,
        **{k: saved[k] for k in ("logs", "snapshots")},
    }


@plainly
def load_models(path: str | Path = SAVED_MODELS) -> dict[str, GPT]:
    """The shipped attention-only GPTs by name, "one-layer" and "two-layer", in eval mode."""
    return load_training(path)["models"]


def _saved_recipe(path: Path, found: object) -> Recipe:
    expected = {field.name for field in fields(Recipe)}
    if not isinstance(found, dict) or set(found) != expected:
        got = sorted(found, key=str) if isinstance(found, dict) else type(found).__name__
        raise CheckpointError(f"{path}: its recipe should hold {sorted(expected)}, found {got}")
    try:
        return Recipe(**found)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: its recipe is not a valid one ({error})") from None


LOG_LISTS = ("step", "first_copy_loss", "second_copy_loss", "second_copy_accuracy")
LOG_SCORES = ("induction", "previous_token")
LOG_RANGES = {  # what each logged number can be
    "first_copy_loss": (0.0, math.inf),  # a cross-entropy
    "second_copy_loss": (0.0, math.inf),
    "second_copy_accuracy": (0.0, 1.0),  # a share
}


def check_log(where: str, log: object, recipe: Recipe, num_layers: int) -> None:
    """A log as train_model writes it with this recipe for a model of num_layers, or a
    CheckpointError naming `where` it came from: the steps in increasing order, exactly those
    train_model logs (every log_every up to steps, so both models' logs share them), for each
    one a loss >= 0 and an accuracy in 0..1, and the scores as (rows, layers, heads) tensors
    of weights in 0..1."""
    config = model_config(recipe, num_layers)
    if not isinstance(log, dict) or set(log) != {*LOG_LISTS, *LOG_SCORES}:
        found = sorted(log, key=str) if isinstance(log, dict) else type(log).__name__
        raise CheckpointError(
            f"{where}: its log should hold {[*LOG_LISTS, *LOG_SCORES]}, found {found}"
        )
    steps = log["step"]
    if isinstance(steps, list):
        _refuse_other_numbers(where, "step", steps, "Python ints")
    if (
        not isinstance(steps, list)
        or not steps
        or not all(type(step) is int and step >= 0 for step in steps)
        or steps != sorted(set(steps))
    ):
        raise CheckpointError(
            f"{where}: its log's step should be a list of training steps, whole numbers >= 0 "
            f"in increasing order, found {validation.shown(steps)}"
        )
    _check_steps(f"{where}: its log's steps", steps, recipe, "log_every")
    for key, (low, high) in LOG_RANGES.items():
        column = log[key]
        if not isinstance(column, list) or len(column) != len(steps):
            found = (
                f"a list of {len(column)}" if isinstance(column, list) else type(column).__name__
            )
            raise CheckpointError(
                f"{where}: its log's {key} should be a list of one number per logged step "
                f"({len(steps)} steps), found {found}"
            )
        _refuse_other_numbers(where, key, column, "Python ints or floats")
        refused = [x for x in column if not validation.number_in(x, low, high)]
        if refused:
            raise CheckpointError(
                f"{where}: its log's {key} should hold finite numbers only, each in "
                f"{low:g}..{high:g}, found {validation.shown(refused[0])}"
            )
    expected = (len(steps), config.num_layers, config.num_heads)
    for key in LOG_SCORES:
        scores = log[key]
        if isinstance(scores, torch.Tensor):  # nested: no shape; meta, sparse, float8: no values
            try:
                validation.dense_tensor(scores, f"its log's {key}", "(rows, layers, heads)")
            except ValueError as problem:
                raise CheckpointError(f"{where}: {problem}") from None
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != expected:
            found = (
                tuple(scores.shape) if isinstance(scores, torch.Tensor) else type(scores).__name__
            )
            raise CheckpointError(
                f"{where}: its log's {key} should be a (rows, layers, heads) = {expected} tensor, "
                f"found {found}"
            )
        if not scores.is_floating_point():
            raise CheckpointError(
                f"{where}: its log's {key} should be an ordinary dense floating-point tensor, "
                f"found one {scores.dtype}"
            )
        outside = ~((scores >= 0) & (scores <= 1))
        if outside.any():
            index = tuple(outside.nonzero()[0].tolist())
            raise CheckpointError(
                f"{where}: its log's {key} scores should be means of attention weights, each in "
                f"0..1, found {scores[index].item()!r} at {index}"
            )


def _other_number(value: object) -> bool:
    """Whether value is a number of a type other than int, float and bool: numpy's, or a
    tensor."""
    return isinstance(value, numbers.Number | torch.Tensor) and type(value) not in (
        int,
        float,
        bool,
    )


def _refuse_other_numbers(where: str, key: str, values: list, kinds: str) -> None:
    """A CheckpointError naming the first of values that is a number of another type than
    Python's (numpy's, a tensor), which would pass for one in a message."""
    other = [value for value in values if _other_number(value)]
    if other:
        raise CheckpointError(
            f"{where}: its log's {key} should hold {kinds}, found {validation.shown(other[0])} "
            f"({type(other[0]).__module__}.{type(other[0]).__name__})"
        )


def check_snapshots(where: str, snapshots: object, recipe: Recipe, num_layers: int) -> None:
    """Snapshots as train_model keeps them with this recipe for a model of num_layers, or a
    CheckpointError naming `where` they came from: {step: weights}, exactly the steps
    train_model keeps (every snapshot_every up to steps), the weights finite in float32 and
    fitting the model (checked by loading them into a scratch one)."""
    config = model_config(recipe, num_layers)
    if not isinstance(snapshots, dict) or not snapshots:
        found = "an empty dict" if isinstance(snapshots, dict) else type(snapshots).__name__
        raise CheckpointError(f"{where}: its snapshots should be {{step: weights}}, found {found}")
    _check_steps(f"{where}: its snapshots' steps", list(snapshots), recipe, "snapshot_every")
    model = blank_model(config)
    for step, weights in snapshots.items():
        snapshot = f"{where} snapshot {step}"
        load_weights(model, float_weights(weights, snapshot), snapshot)


def main() -> None:
    """python -m helpers.induction: retrain chapter 13's models (the one-layer and two-layer
    models with their logs and snapshots, then the two-layer model with each other way of
    giving positions) and save them."""
    argparse.ArgumentParser(
        description="Retrain chapter 13's models and store them in data/."
    ).parse_args()
    print({name: f"{s:.1f} s" for name, s in train_and_save().items()})
    print({name: f"{s:.1f} s" for name, s in train_and_save_positions().items()})


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_generator(generator: object, optional: bool = True) -> None:
    if not isinstance(generator, torch.Generator) and not (optional and generator is None):
        accepted = "a torch.Generator or None" if optional else "a torch.Generator"
        raise TypeError(f"generator must be {accepted}, got {validation.shown(generator)}")


def _check_distinct(call: str, batch: object, n: object, vocab_size: object) -> tuple[int, ...]:
    """batch, n and vocab_size as whole numbers for which n different tokens exist and `call`
    shuffles the rows' whole vocabularies in reasonable time (_check_shuffled)."""
    batch = validation.whole_number(batch, "batch")
    n = validation.whole_number(n, "n")
    vocab_size = validation.whole_number(vocab_size, "vocab_size")
    if n > vocab_size:
        raise ValueError(
            f"n must be at most vocab_size: a row of n different tokens needs a vocabulary of at "
            f"least n, got n {validation.shown(n)}, vocab_size {validation.shown(vocab_size)}"
        )
    _check_shuffled(call, batch, vocab_size)
    return batch, n, vocab_size


def _check_weights(weights: object) -> torch.Tensor:
    """Attention weights (..., n, n): square in their last two dims, each row (a query's weights
    over the keys) in 0..1 and summing to 1, at most MOST_WEIGHTS numbers. Raw scores, or weights
    scaled or shifted, would give a score that means nothing (5.0 for raw scores of 5)."""
    validation.dense_tensor(weights, "weights", "(..., n, n)")
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(
            f"weights must be (..., n, n), one row of key weights per query, got shape "
            f"{tuple(weights.shape)}"
        )
    if weights.numel() > MOST_WEIGHTS:
        raise ValueError(
            f"weights hold {weights.numel():,} numbers (shape {tuple(weights.shape)}), more than "
            f"the 2^{MOST_WEIGHTS.bit_length() - 1} = {MOST_WEIGHTS:,} a score checks one by "
            f"one, also in a view that repeats fewer (one head of at most "
            f"{math.isqrt(MOST_WEIGHTS)} positions): score a batch in parts"
        )
    return validation.attention_weights(weights, "weights", "(..., n, n)")


def _check_start(start: object, length: int, n: int) -> int:
    """start as a whole number at which a block of length and its copy fit in n positions."""
    start = validation.whole_number(start, "start", minimum=0)
    if start + 2 * length > n:
        raise ValueError(
            f"a block of {validation.shown(length)} at start {validation.shown(start)} and its "
            f"copy end at position {validation.shown(start + 2 * length - 1)}, beyond the {n} "
            f"positions"
        )
    return start


def _check_model_and_ids(model: object, ids: object) -> None:
    """A GPT with finite weights (NaN in a weight would come out as NaN logits) and ids it
    reads."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    for name, weight in model.state_dict().items():
        if weight.is_meta:
            raise ValueError(
                f"the model is on the meta device: its weights ({name}) have no values; build "
                f"or load it on the cpu"
            )
        if weight.is_floating_point() and not weight.isfinite().all():
            raise ValueError(
                f"the model's weight {name} holds NaN or inf: every output would be NaN"
            )
    if isinstance(ids, torch.Tensor) and ids.is_meta:
        raise ValueError("ids are on the meta device (no values): make them on the cpu")
    model.check_ids(ids)


def _check_repeated(
    model: object, ids: object, length: object, start: object
) -> tuple[GPT, torch.Tensor, int, int]:
    _check_model_and_ids(model, ids)
    length = validation.whole_number(length, "length", minimum=2)
    if start is None and ids.shape[1] != 2 * length:
        raise ValueError(
            f"ids must be (B, 2 * length) = (B, {validation.shown(2 * length)}), a block and "
            f"its copy, got {tuple(ids.shape)}"
        )
    start = _check_start(0 if start is None else start, length, ids.shape[1])
    block = ids[:, start : start + length]  # (B, length)
    differ = (block != ids[:, start + length : start + 2 * length]).any(1)  # (B,)
    if differ.any():
        row = int(differ.nonzero()[0, 0])
        where = (
            "ids[:, :length] == ids[:, length:]"
            if start == 0
            else (
                f"ids[:, {start}:{start + length}] == ids[:, {start + length}:{start + 2 * length}]"
            )
        )
        raise ValueError(
            f"ids must hold a block followed by its exact copy, {where}, but row {row} is not "
            f"({int(differ.sum())} of {ids.shape[0]} rows are not)"
        )
    return model, ids, length, start


def _check_placement_work(config: GPTConfig, lengths: list[int], rows: int) -> None:
    """A ValueError if placement_map's measures would hold more than MOST_PLACEMENT_BYTES in
    all (each placement's rows as _measure_bytes counts them, without the weights): a measure
    of its time, which grows with the placements, the rows and the context squared."""
    n = config.context_length
    placements = sum(n - 2 * length + 1 for length in lengths)
    per_row = _measure_bytes(config, 1, n) - _measure_bytes(config, 0, n)
    work = placements * rows * per_row
    if work > MOST_PLACEMENT_BYTES:
        raise ValueError(
            f"placement_map would measure {placements:,} placements of {rows:,} rows, each row "
            f"holding {per_row:,} bytes: {work:,} in all, more than 2^"
            f"{MOST_PLACEMENT_BYTES.bit_length() - 1} (hours of work); ask for fewer or "
            f"shorter lengths (each start of each length is a placement), or fewer rows"
        )


def _check_lengths(lengths: object, n: int) -> list[int]:
    """lengths as a list of whole numbers, at most n // 2 of them (the lengths that fit)."""
    zero_d = isinstance(lengths, torch.Tensor | np.ndarray) and lengths.ndim == 0
    if isinstance(lengths, str | bytes) or not isinstance(lengths, Iterable) or zero_d:
        raise TypeError(f"lengths must be a list of block lengths, got {validation.shown(lengths)}")
    read = list(itertools.islice(lengths, n // 2 + 1))  # an endless iterator stops here
    if len(read) > n // 2:
        raise ValueError(
            f"lengths must be at most {n // 2} block lengths (2 to {n // 2} fit twice in the "
            f"context of {n}), got more"
        )
    lengths = [validation.whole_number(length, "a block length", minimum=2) for length in read]
    if not lengths or lengths != sorted(set(lengths)) or 2 * lengths[-1] > n:
        raise ValueError(
            f"lengths must be block lengths in increasing order, each >= 2 and fitting twice in "
            f"the context of {n}, got {validation.shown(lengths)}"
        )
    return lengths


def _check_modules(model: GPT, why: str) -> None:
    """The model's modules are those a GPT of its config has, no more, each of the same type and
    sizes (a layer replaced, removed or added, or a config edited after building, is named in a
    ValueError that ends with why the caller needs them)."""
    with torch.device("meta"):  # types and sizes only: no weights made, nothing drawn
        plain = dict(GPT(model.config).named_modules())
    found = dict(model.named_modules())
    for name, expected in plain.items():
        module = found.get(name)
        if module is None:
            raise ValueError(
                f"the model has no {name}, which a GPT of its config (num_layers="
                f"{model.config.num_layers}) has: {why}"
            )
        if name and type(module) is not type(expected):  # (the top may be a subclass)
            raise ValueError(
                f"the model's {name} is a {type(module).__qualname__}, where a GPT has a "
                f"{type(expected).__qualname__}: {why}"
            )
        for size in MODULE_SIZES:
            if hasattr(expected, size) and getattr(module, size, None) != getattr(expected, size):
                raise ValueError(
                    f"the model's {name} has {size} {validation.shown(getattr(module, size, None))}"
                    f", where its config makes {validation.shown(getattr(expected, size))}: {why}"
                )
    extra = next((name for name in found if name not in plain), None)
    if extra is not None:  # a config edited to fewer layers: the forward would run them all
        raise ValueError(
            f"the model has {extra}, which a GPT of its config (num_layers="
            f"{model.config.num_layers}) lacks (was its config edited?): {why}"
        )


def _check_plain(model: GPT) -> None:
    """A GPT that computes as GPT's own code does (a subclass may add methods, as chapter 12's
    translator does, but not replace one), without forward hooks: measure's float64 copy is a
    plain GPT, which would run neither a replaced method nor the hooks."""
    replaced = [
        name
        for name, method in vars(GPT).items()
        if callable(method)
        and not name.startswith("__")  # (its own __init__ builds, the copy is built apart)
        and getattr(type(model), name) is not method
    ] + [name for name in ("forward", "_features") if name in vars(model)]
    if replaced:
        raise ValueError(
            f"the model, a {type(model).__qualname__}, replaces GPT's {replaced[0]}: measure "
            f"computes on a float64 copy of its weights in a plain GPT, which would not run "
            f"that code; pass a GPT, or a subclass that only adds methods"
        )
    for name, module in model.named_modules():
        hooks = [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]
        if any(hasattr(hook, "zeroed_columns") for hook in hooks):
            raise ValueError(
                "the model has heads zeroed by an open zeroed_heads block: measure computes on "
                "a float64 copy of its weights, which the block does not reach; pass the heads "
                "as measure(model, ids, length, heads_zeroed=[(layer, head), ...]) instead"
            )
        if hooks:
            raise ValueError(
                f"the model's {name or 'top module'} has forward hooks: measure computes on a "
                f"float64 copy of its weights, where they would not run; remove them first"
            )


def _check_recipe(recipe: object) -> Recipe:
    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a Recipe, got {type(recipe).__name__}")
    return recipe


def _check_trainable(recipe: Recipe, layer_counts: Iterable[int]) -> None:
    """Refuse, before anything is trained, a recipe whose training would fail or whose file
    would not fit in data/: for each number of layers, its model (model_config), a training
    batch through it (helpers.gpt's size guard, which training would meet at its first step)
    and measure on the held-out sequences; then the file train_and_save writes for them all."""
    configs = [model_config(recipe, layers) for layers in layer_counts]
    for config in configs:
        check_forward_size(
            config, recipe.batch_size, recipe.context_length, recipe.context_length, "a batch"
        )
        _check_bytes(
            "a training step",
            _step_bytes(config, recipe.batch_size),
            batch_size=recipe.batch_size,
            context_length=recipe.context_length,
            vocab_size=recipe.vocab_size,
            d_model=recipe.d_model,
        )
        _check_bytes(
            "measure on the held-out sequences",
            _measure_bytes(config, recipe.eval_batch, 2 * recipe.eval_length),
            eval_batch=recipe.eval_batch,
            eval_length=recipe.eval_length,
        )
    saved = _saved_bytes(recipe, configs)
    if saved > MOST_FILE_BYTES:
        snapshots = recipe.steps // recipe.snapshot_every + 1
        raise ValueError(
            f"this recipe's models, logs and {snapshots:,} snapshots of each would take "
            f"{saved:,} bytes, more than the {MOST_FILE_BYTES:,} (16 MB) a file in data/ may "
            f"hold: fewer steps or a larger snapshot_every (the recipe's is "
            f"{Recipe.snapshot_every}), or a smaller model"
        )


def _check_not_diverged(model: GPT, loss: torch.Tensor, step: int, recipe: Recipe) -> None:
    """A NaN or inf in the loss or the weights would fill the rest of the log with NaN."""
    if loss.isfinite() and all(weight.isfinite().all() for weight in model.parameters()):
        return
    raise _diverged(step, recipe)


def _check_final_snapshot(where: str, model: GPT, snapshots: dict, recipe: Recipe) -> None:
    """The snapshot at the recipe's last step, where it keeps one, holds the final weights
    rounded to float16, as train_model keeps them; else a CheckpointError naming the weight."""
    if recipe.steps not in snapshots:
        return
    kept = snapshots[recipe.steps]
    for key, weight in model.state_dict().items():
        if not torch.equal(kept[key].to(torch.float16), weight.to(torch.float16)):
            raise CheckpointError(
                f"{where}: its snapshot {recipe.steps}, at the recipe's last step, should hold "
                f"the final weights in float16, but its {key} differs from the saved weight"
            )


def _check_steps(what: str, found: list, recipe: Recipe, every: str) -> None:
    """A CheckpointError unless found, steps without repeats, holds exactly those train_model
    writes with the recipe: every recipe.<every> from 0 up to recipe.steps. It names them, and
    the first step found that is not one of them or else the first one missing."""
    expected = range(0, recipe.steps + 1, getattr(recipe, every))
    other = [step for step in found if type(step) is not int or step not in expected]
    kept = set(found)
    missing = [] if other else [step for step in expected if step not in kept]
    if not other and not missing:
        return
    if other:
        problem = f"found {validation.shown(other[0])}"
    else:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        problem = f"step {missing[0]}{more} missing"
    listed = expected if len(expected) <= 4 else [expected[0], expected[1], "...", expected[-1]]
    raise CheckpointError(
        f"{what} should be the {len(expected)} steps train_model writes, every multiple of the "
        f"recipe's {every} ({getattr(recipe, every)}) up to its steps ({recipe.steps}): "
        f"{', '.join(map(str, listed))}; {problem}"
    )


def _checked_repeat(batch: object, length: object, vocab_size: object, generator: object) -> tuple:
    """repeated_sequences' sizes as ints, if its ids fit in int64 and its peak in MOST_BYTES."""
    batch = validation.whole_number(batch, "batch")
    length = validation.whole_number(length, "length")
    vocab_size = validation.whole_number(vocab_size, "vocab_size")
    if vocab_size > LARGEST_ID:
        raise ValueError(
            f"vocab_size must be at most 2^63 - 1 (int64 ids), got {validation.shown(vocab_size)}"
        )
    _check_bytes("repeated_sequences", _repeat_bytes(batch, length), batch=batch, length=length)
    _check_generator(generator)
    return batch, length, vocab_size


def _checked_placement(batch, n, start, length, vocab_size, generator) -> tuple:
    """placed_repeats' sizes as ints, if a block and its copy fit in n different tokens."""
    length = validation.whole_number(length, "length", minimum=2)
    n = validation.whole_number(n, "n")
    start = _check_start(start, length, n)
    batch, n, vocab_size = _check_distinct("placed_repeats", batch, n, vocab_size)
    _check_generator(generator)
    return batch, n, start, length, vocab_size


def _check_previous_token(weights: object) -> None:
    """Attention weights (_check_weights) over n >= 2 positions."""
    _check_weights(weights)
    if weights.shape[-1] < 2:
        raise ValueError(
            f"weights must cover n >= 2 positions (the first has no previous token), got n = "
            f"{weights.shape[-1]}"
        )


def _checked_induction(weights: object, length: object, start: object) -> tuple[int, int]:
    """(length, start) as ints, for attention weights (_check_weights) that hold a block of
    length >= 2 at start (0 if None: then n must be 2 * length) and its copy."""
    _check_weights(weights)
    length = validation.whole_number(length, "length", minimum=2)  # 1: the stripe is the diagonal
    n = weights.shape[-1]
    if start is None and n != 2 * length:
        raise ValueError(
            f"weights cover n = {n} positions, so a block and its copy right after it have "
            f"length n / 2 = {n / 2:g}, got length {validation.shown(length)} (give start= for "
            f"a block elsewhere in the n positions)"
        )
    start = _check_start(0 if start is None else start, length, n)
    return length, start


if __name__ == "__main__":
    main()
