"""Chapter 11: attention for long sequences.

- The length-extrapolation task: a model trained on sequences of length L, tested at 2L and
  4L, with one of three ways to know positions: sinusoidal (added to the embeddings), RoPE
  (queries and keys rotated) or ALiBi (a distance penalty added to the scores).
- Sparse patterns: masks (True = may attend) that let each query see only some keys.
- Linear attention (Katharopoulos et al., 2020): the feature map elu(x) + 1 in place of
  exp(q . k), computed three ways that give the same numbers.
"""

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from tqdm.auto import tqdm

from helpers import validation
from helpers.attention import _merge_heads, _split_heads
from helpers.checkpoints import (
    CheckpointError,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
)
from helpers.contexts import keeping_random_state, one_torch_thread, trainable_float32
from helpers.efficient import peak_bytes
from helpers.masks import causal_mask
from helpers.positional import _alibi_bias, _sinusoidal_encoding, rotated, sinusoidal_encoding

POSITIONS = ("sinusoidal", "rope", "alibi")
DATA = Path(__file__).resolve().parents[1] / "data"
SAVED_MODELS = DATA / "long_context_models.pt"
REMAKE = "make long-context-models"


# ---------------------------------------------------------------------------------------------
# The task: recall the most recent marker.


@dataclass(frozen=True)
class RecallTask:
    """Sequences of markers (uppercase letters) and fillers (digits). At every position the
    answer is the most recent marker so far, the token itself if it is one. The first token is
    always a marker, so every position has an answer. Solving it needs the positions: among the
    markers seen so far, the nearest one is the answer."""

    num_markers: int = 8  # the answers: A..H
    num_fillers: int = 8  # the noise in between: 0..7
    marker_rate: float = 0.15  # a marker every 6-7 tokens on average: most gaps fit in L
    train_length: int = 32  # L: long enough for many markers, short enough to train in seconds

    def __post_init__(self):
        validation.coerce_fields(
            self,
            {
                "num_markers": validation.whole_number,
                "num_fillers": validation.whole_number,
                "train_length": validation.whole_number,
                "marker_rate": validation.positive_number,
            },
        )
        rate = self.marker_rate
        if rate >= 1:
            raise ValueError(f"marker_rate must be below 1 (some filler), got {rate}")

    @property
    def vocab_size(self) -> int:
        return self.num_markers + self.num_fillers

    def token_names(self) -> list[str]:
        letters = [chr(ord("A") + i) for i in range(self.num_markers)]
        return letters + [str(i) for i in range(self.num_fillers)]

    def batch(
        self, num: int, length: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens (num, length) and answers (num, length), both token ids (markers 0..7)."""
        num = validation.whole_number(num, "num")
        length = validation.whole_number(length, "length")
        if not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {generator!r}")
        is_marker = torch.rand(num, length, generator=generator) < self.marker_rate
        is_marker[:, 0] = True
        markers = torch.randint(0, self.num_markers, (num, length), generator=generator)
        fillers = torch.randint(0, self.num_fillers, (num, length), generator=generator)
        tokens = torch.where(is_marker, markers, self.num_markers + fillers)
        positions = torch.arange(length).expand(num, length)
        latest = torch.where(is_marker, positions, 0).cummax(dim=1).values  # (num, length)
        return tokens, tokens.gather(1, latest)


# ---------------------------------------------------------------------------------------------
# The model: one causal attention layer whose positions come from one of POSITIONS.


def _check_head_sizes(d_model: object, num_heads: object) -> tuple[int, int]:
    """(d_model, num_heads) as ints, if d_model = num_heads x an even head size (RoPE turns
    pairs of dimensions)."""
    d_model = validation.whole_number(d_model, "d_model")
    num_heads = validation.whole_number(num_heads, "num_heads")
    if d_model % num_heads or (d_model // num_heads) % 2:
        raise ValueError(
            f"d_model ({d_model}) must be num_heads ({num_heads}) times an even head size"
        )
    return d_model, num_heads


class PositionAwareAttention(nn.Module):
    """Causal multi-head self-attention (B, n, d_model) -> (B, n, d_model), with RoPE applied
    to the queries and keys, or ALiBi's bias added to the scores, or neither (sinusoidal
    positions are added to the embeddings before it)."""

    def __init__(self, d_model: int, num_heads: int, position: str):
        super().__init__()
        _check_position(position)
        d_model, num_heads = _check_head_sizes(d_model, num_heads)
        self.num_heads, self.position = num_heads, position
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.attention_weights = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_position_aware_input(self, x)
        n = x.shape[1]
        q = _split_heads(self.W_q(x), self.num_heads)  # (B, heads, n, d_head)
        k = _split_heads(self.W_k(x), self.num_heads)
        v = _split_heads(self.W_v(x), self.num_heads)
        if self.position == "rope":
            where = torch.arange(n, device=x.device)  # (n,)
            q, k = rotated(q, where), rotated(k, where)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, heads, n, n)
        if self.position == "alibi":
            scores = scores + _alibi_bias(self.num_heads, n, n).to(scores)
        scores = scores.masked_fill(~causal_mask(n, x.device), float("-inf"))
        self.attention_weights = torch.softmax(scores, dim=-1)
        return self.W_o(_merge_heads(self.attention_weights @ v))


class RecallModel(nn.Module):
    """Token embedding (+ sinusoidal positions) -> one causal attention layer -> a residual ->
    logits over the vocabulary (B, n, vocab)."""

    def __init__(self, vocab_size: int, position: str, d_model: int = 32, num_heads: int = 4):
        super().__init__()
        self.vocab_size = validation.whole_number(vocab_size, "vocab_size")
        _check_position(position)
        d_model, num_heads = _check_head_sizes(d_model, num_heads)
        self.position = position
        self.embedding = nn.Embedding(self.vocab_size, d_model)
        self.attention = PositionAwareAttention(d_model, num_heads, position)
        self.output = nn.Linear(d_model, self.vocab_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _check_recall_tokens(self, tokens)
        x = self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)  # (B, n, d_model)
        if self.position == "sinusoidal":
            x = x + _sinusoidal_encoding(tokens.shape[1], x.shape[-1], 10000.0).to(x)
        return self.output(x + self.attention(x))  # (B, n, vocab)


@dataclass(frozen=True)
class Recipe:
    """The one training budget every kind of position gets."""

    steps: int = 800  # loss is flat by then for all three (a longer run changes little)
    batch_size: int = 64
    lr: float = 3e-3  # Adam; larger rates made the sinusoidal model unstable
    seed: int = 0
    d_model: int = 32
    num_heads: int = 4  # ALiBi slopes 1/4, 1/16, 1/64, 1/256
    task: RecallTask = field(default_factory=RecallTask)

    def __post_init__(self):
        validation.coerce_fields(
            self, {"steps": validation.whole_number, "batch_size": validation.whole_number}
        )
        _check_head_sizes(self.d_model, self.num_heads)
        validation.coerce_fields(self, {"seed": validation.seed, "lr": validation.positive_number})
        if not isinstance(self.task, RecallTask):
            raise ValueError(f"task must be a RecallTask, got {type(self.task).__name__}")


def train_recall_model(position: str, recipe: Recipe = Recipe(), progress: bool = False) -> dict:
    """Train one model on sequences of length recipe.task.train_length; returns
    {"model", "loss" (every step), "seconds"}. Runs on one thread: a model this small gains
    nothing from more."""
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a Recipe, got {type(recipe).__name__}")
    _check_position(position)
    progress = validation.flag(progress, "progress")
    task = recipe.task
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        torch.manual_seed(recipe.seed)
        model = RecallModel(task.vocab_size, position, recipe.d_model, recipe.num_heads)
        return _trained(model, recipe, position, progress)


def _trained(model: nn.Module, recipe: Recipe, label: str, progress: bool) -> dict:
    """{"model" (in eval mode), "loss" (every step), "seconds"}: Adam on recipe.steps batches
    of the task at its training length, drawn from a generator seeded with recipe.seed."""
    task, generator = recipe.task, torch.Generator().manual_seed(recipe.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
    losses, start = [], time.perf_counter()
    bar = tqdm(range(recipe.steps), desc=f"training ({label})", disable=not progress)
    for step in bar:
        tokens, answers = task.batch(recipe.batch_size, task.train_length, generator)
        loss = F.cross_entropy(model(tokens).flatten(0, 1), answers.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise ValueError(
                f"training ({label}) diverged: the loss is {losses[-1]} at step {step}; train "
                f"with a smaller lr than {recipe.lr:g}"
            )
        if step % 50 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    return {"model": model.eval(), "loss": losses, "seconds": time.perf_counter() - start}


def extrapolation_batches(
    task: RecallTask, factors: tuple[int, ...] = (1, 2, 4), num: int = 128
) -> dict:
    """{length: (tokens, answers)} at each multiple of the training length, the same every time
    (one fixed seed per length)."""
    if not isinstance(task, RecallTask):
        raise ValueError(f"task must be a RecallTask, got {type(task).__name__}")
    if isinstance(factors, str) or not isinstance(factors, list | tuple) or not factors:
        raise ValueError(f"factors must be a non-empty tuple of whole numbers, got {factors!r}")
    factors = [validation.whole_number(factor, "a factor") for factor in factors]
    return {
        task.train_length * factor: task.batch(
            num, task.train_length * factor, torch.Generator().manual_seed(1000 + factor)
        )
        for factor in factors
    }


def _float64_copy(model: "RecallModel | LowRankRecallModel") -> nn.Module:
    """A new model with the same weights in float64 (built afresh rather than deep-copied: the
    attention weights kept from a forward pass with gradients cannot be deep-copied)."""
    attention = model.attention
    sizes = (attention.W_q.in_features, attention.num_heads)
    if isinstance(model, RecallModel):
        twin = RecallModel(model.vocab_size, model.position, *sizes)
    else:
        twin = LowRankRecallModel(model.vocab_size, attention.length, attention.projected, *sizes)
    twin.load_state_dict(model.state_dict())
    return twin.double().to(model.embedding.weight.device).eval()


def recall_accuracy(
    model: "RecallModel | LowRankRecallModel", tokens: torch.Tensor, answers: torch.Tensor
) -> dict:
    """The share of positions answered right, and the count, computed in float64 so that the
    same weights give the same count on every machine and thread count (on a copy: the model
    itself is left as it is)."""
    if not isinstance(model, RecallModel | LowRankRecallModel):
        raise ValueError(
            f"model must be a RecallModel or a LowRankRecallModel, got {type(model).__name__}"
        )
    _check_scored_as_built(model)
    validation.token_ids(tokens, "tokens", model.vocab_size)
    validation.token_ids(answers, "answers", model.vocab_size)
    if answers.shape != tokens.shape:
        raise ValueError(
            f"answers must have the shape of tokens {tuple(tokens.shape)}, one per position, "
            f"got {tuple(answers.shape)}"
        )
    if answers.numel() == 0:
        raise ValueError(f"tokens must hold at least one position, got {tuple(tokens.shape)}")
    device = model.embedding.weight.device
    with torch.no_grad():
        logits = _float64_copy(model)(tokens.to(device))
    if not logits.isfinite().all():
        raise ValueError(
            "the model's logits hold NaN or inf (its weights do, or overflow): it has no "
            "answer to count"
        )
    correct = int((logits.argmax(-1) == answers.to(device)).sum())
    return {"correct": correct, "total": answers.numel(), "accuracy": correct / answers.numel()}


def train_and_save_all(path: str | Path = SAVED_MODELS, recipe: Recipe = Recipe()) -> dict:
    """Train one model per kind of position with the same recipe and save all three in one
    checkpoint (float32 weights and every step's loss: under 100 kB). Returns
    {position: seconds of training}."""
    path = savable_path(path)  # before the minutes of training, not after them
    weights, seconds, losses = {}, {}, {}
    for position in POSITIONS:
        result = train_recall_model(position, recipe, progress=True)
        weights[position] = result["model"].state_dict()
        seconds[position], losses[position] = result["seconds"], result["loss"]
    recipe_fields = {k: v for k, v in asdict(recipe).items() if k != "task"}
    save_checkpoint(
        path,
        {
            "weights": weights,
            "recipe": recipe_fields,
            "task": asdict(recipe.task),
            "loss": losses,
            "seconds": seconds,
        },
    )
    return seconds


def load_recall_models(path: str | Path = SAVED_MODELS) -> dict:
    """{"models": {position: RecallModel}, "task": RecallTask, "recipe", "loss", "seconds"}
    from the saved checkpoint (checksum verified, read with weights_only=True)."""
    saved = load_checkpoint(path, ("weights", "recipe", "task", "loss", "seconds"), REMAKE)
    recipe = _saved_recipe(path, saved["recipe"], saved["task"])
    weights = saved["weights"]
    if not isinstance(weights, dict) or set(weights) != set(POSITIONS):
        found = sorted(weights) if isinstance(weights, dict) else type(weights).__name__
        raise CheckpointError(
            f"{path}: its weights should be one set per {POSITIONS}, found {found}"
        )
    models = {}
    for position in POSITIONS:
        model = RecallModel(recipe.task.vocab_size, position, recipe.d_model, recipe.num_heads)
        _load_weights(path, model, weights[position], position)
        models[position] = model.eval()
    return {
        "models": models,
        "task": recipe.task,
        **{k: saved[k] for k in ("recipe", "loss", "seconds")},
    }


def _saved_recipe(path: Path, recipe_fields: object, task_fields: object) -> Recipe:
    """The Recipe a checkpoint records, every field present and valid, or a CheckpointError."""
    for name, found, cls in (("recipe", recipe_fields, Recipe), ("task", task_fields, RecallTask)):
        expected = {f.name for f in fields(cls)} - {"task"}
        if not isinstance(found, dict) or set(found) != expected:
            got = sorted(found) if isinstance(found, dict) else type(found).__name__
            raise CheckpointError(f"{path}: its {name} should hold {sorted(expected)}, found {got}")
    try:
        return Recipe(**recipe_fields, task=RecallTask(**task_fields))
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: its recipe is not a valid one ({error})") from None


def _load_weights(path: Path, model: RecallModel, weights: object, position: str) -> None:
    """model.load_state_dict(weights) for floating-point tensors that fit, or a CheckpointError."""
    if not isinstance(weights, dict) or not all(
        isinstance(value, torch.Tensor) and value.is_floating_point() for value in weights.values()
    ):
        raise CheckpointError(f"{path}: the {position} weights are not floating-point tensors")
    load_weights(model, weights, f"{path} ({position})")


# ---------------------------------------------------------------------------------------------
# Sparse patterns: which score entries are computed at all.


def _offsets(size: int) -> torch.Tensor:
    positions = torch.arange(size)
    return positions[:, None] - positions[None, :]  # (q, k): i - j


def local_mask(size: int, radius: int) -> torch.Tensor:
    """(size, size): query i sees the keys j with |i - j| <= radius (Longformer's window of
    2 radius + 1 keys). With helpers.masks.causal_mask: the last radius + 1 keys."""
    size = _check_size(size)
    radius = validation.whole_number(radius, "radius", minimum=0)
    return _offsets(size).abs() <= radius


def global_mask(size: int, positions: list[int] | tuple[int, ...]) -> torch.Tensor:
    """(size, size): the global tokens at `positions` see every key and every query sees them
    (Longformer's [CLS] and question tokens)."""
    size = _check_size(size)
    if isinstance(positions, str) or not isinstance(positions, list | tuple):
        raise ValueError(f"positions must be a list of whole numbers, got {positions!r}")
    positions = [validation.whole_number(p, "a global position", minimum=0) for p in positions]
    outside = [p for p in positions if p >= size]
    if outside:
        raise ValueError(f"global positions {outside} lie outside 0..{size - 1}")
    is_global = torch.zeros(size, dtype=torch.bool)
    is_global[positions] = True
    return is_global[:, None] | is_global[None, :]


def dilated_mask(size: int, radius: int, dilation: int) -> torch.Tensor:
    """(size, size): query i sees keys i + m * dilation for |m| <= radius: a window as wide as
    radius * dilation on each side, with only every dilation-th key in it."""
    size = _check_size(size)
    radius = validation.whole_number(radius, "radius", minimum=0)
    dilation = validation.whole_number(dilation, "dilation")
    offsets = _offsets(size)
    return (offsets.abs() <= radius * dilation) & (offsets % dilation == 0)


def block_sparse_mask(
    size: int, block_size: int, num_random: int = 1, num_global: int = 1, seed: int = 0
) -> torch.Tensor:
    """(size, size), BigBird-style, decided block by block: each block of queries sees its own
    block and its two neighbours, the first num_global blocks (which see everything too), and
    num_random other blocks drawn with the seed (the same mask for the same seed; all that are
    left where fewer than num_random are)."""
    size, block_size = _check_size(size), validation.whole_number(block_size, "block_size")
    if size % block_size:
        raise ValueError(f"size ({size}) must be a multiple of block_size ({block_size})")
    num_random = validation.whole_number(num_random, "num_random", minimum=0)
    num_global = validation.whole_number(num_global, "num_global", minimum=0)
    blocks = size // block_size
    if num_global > blocks:
        raise ValueError(f"num_global ({num_global}) is more than the {blocks} blocks")
    generator = torch.Generator().manual_seed(validation.seed(seed))
    chosen = local_mask(blocks, 1) | global_mask(blocks, list(range(num_global)))
    for row in range(num_global, blocks):
        others = torch.nonzero(~chosen[row]).flatten()  # blocks not yet seen by this row
        picked = others[torch.randperm(len(others), generator=generator)[:num_random]]
        chosen[row, picked] = True
    return chosen.repeat_interleave(block_size, 0).repeat_interleave(block_size, 1)


def fraction_computed(mask: torch.Tensor) -> float:
    """The share of the q x k score entries a kernel that skips every masked entry computes."""
    mask = _check_mask(mask)
    return mask.sum().item() / mask.numel()


def fraction_of_tiles(mask: torch.Tensor, tile: int) -> float:
    """The share of tile x tile blocks holding at least one allowed entry: what a kernel that
    skips whole blocks (FlashAttention's tiles, BigBird's blocks) computes. A dense kernel
    with a mask computes every entry (1.0), however few are allowed."""
    mask = _check_mask(mask)
    tile = validation.whole_number(tile, "tile")
    if mask.shape[0] % tile or mask.shape[1] % tile:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not split into {tile} x {tile} tiles"
        )
    rows, cols = mask.shape[0] // tile, mask.shape[1] // tile
    tiles = mask.reshape(rows, tile, cols, tile).any(dim=3).any(dim=1)  # (rows, cols)
    return tiles.sum().item() / tiles.numel()


# ---------------------------------------------------------------------------------------------
# Linear attention: a kernel phi(q) . phi(k) in place of exp(q . k / sqrt(d)).

# Added to every normaliser, as in the authors' code: elu(x) + 1 rounds to 0 in float32 for
# x below about -17, and a query whose features are all 0 would otherwise give 0 / 0 = NaN.
EPSILON = 1e-6


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1 (Katharopoulos et al., 2020): positive everywhere, so every
    phi(q) . phi(k) is a positive weight, as exp is."""
    validation.tensor(x, "x", "(..., n, d)")
    if not x.is_floating_point():
        raise ValueError(f"x must be floating point, got {x.dtype}")
    return _elu_feature_map(x)


def _elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    return F.elu(x) + 1


def _at_least_float32(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """16-bit tensors as float32: in float16 a normaliser phi(q) . sum phi(k) passes 65504
    (and becomes inf) with a few thousand keys; wider tensors as they are."""
    return [t.float() if t.element_size() < 4 else t for t in tensors]


def _refuse_overflow(
    result: torch.Tensor,
    inputs: dict,
    what: str = "linear attention",
    why: str = "phi(q) . phi(k) grows with the product of q and k; scale the queries and keys down",
) -> torch.Tensor:
    """result, unless it holds inf or NaN where every input is finite: then what was computed
    overflowed (linear attention's phi(q) . phi(k): elu(x) + 1 grows like x, so q and k near
    1e20 give 1e40, beyond float32; softmax attention's scores q . k / sqrt(d), which softmax
    turns into NaN)."""
    if result.isfinite().all() or not all(t.isfinite().all() for t in inputs.values()):
        return result
    largest = ", ".join(f"{name} {t.abs().max().item():.3g}" for name, t in inputs.items())
    raise ValueError(
        f"{what} overflows {result.dtype} for these inputs (largest magnitudes: {largest}): "
        f"{why}, or compute in float64"
    )


SCORES_OVERFLOW = (
    "the scores q . k / sqrt(d) grow with the product of the queries and keys; scale them down"
)


def linear_attention_weights(
    queries: torch.Tensor, keys: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """(..., q, k): phi(q_i) . phi(k_j), over the allowed keys, divided by its row's sum
    (+ EPSILON). 16-bit inputs are computed in float32; weights that overflow are refused."""
    _check_linear_inputs(queries, keys, keys, causal)
    return _linear_attention_weights(queries, keys, causal)


def _linear_attention_weights(queries, keys, causal) -> torch.Tensor:
    dtype, named = queries.dtype, {"queries": queries, "keys": keys}
    queries, keys = _at_least_float32(queries, keys)
    similarity = _elu_feature_map(queries) @ _elu_feature_map(keys).transpose(-2, -1)
    if causal:
        similarity = similarity * causal_mask(similarity.shape[-1], similarity.device)
    weights = similarity / (similarity.sum(dim=-1, keepdim=True) + EPSILON)
    return _refuse_overflow(weights, named).to(dtype)


def linear_attention_quadratic(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """The quadratic form: the (q, k) weights first, then weights @ values. O(n^2 d)."""
    _check_linear_inputs(queries, keys, values, causal)
    dtype, named = values.dtype, {"queries": queries, "keys": keys, "values": values}
    queries, keys, values = _at_least_float32(queries, keys, values)
    output = _linear_attention_weights(queries, keys, causal) @ values
    return _refuse_overflow(output, named).to(dtype)


def linear_attention(
    queries: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """The same numbers without the (q, k) matrix. Not causal: phi(Q) (phi(K)^T V),
    normalised by phi(Q) (phi(K)^T 1) + EPSILON: O(n d d_v). Causal: running sums over the
    keys, S_i = sum over j <= i of phi(k_j) v_j^T and z_i = sum of phi(k_j); output i =
    phi(q_i) S_i / (phi(q_i) . z_i + EPSILON).
    (..., q, d), (..., k, d), (..., k, d_v) -> (..., q, d_v). 16-bit inputs are computed in
    float32 and the result converted back; a result that overflows is refused."""
    _check_linear_inputs(queries, keys, values, causal)
    dtype, named = values.dtype, {"queries": queries, "keys": keys, "values": values}
    queries, keys, values = _at_least_float32(queries, keys, values)
    phi_q, phi_k = _elu_feature_map(queries), _elu_feature_map(keys)  # (..., n, d)
    if not causal:
        summary = phi_k.transpose(-2, -1) @ values  # (..., d, d_v): the same for every query
        normaliser = phi_k.sum(dim=-2)  # (..., d)
        output = (phi_q @ summary) / (phi_q @ normaliser[..., None] + EPSILON)
    else:
        running = (phi_k[..., :, None] * values[..., None, :]).cumsum(dim=-3)  # (..., n, d, d_v)
        normaliser = phi_k.cumsum(dim=-2)  # (..., n, d)
        numerator = (phi_q[..., None, :] @ running).squeeze(-2)  # (..., n, d_v)
        output = numerator / ((phi_q * normaliser).sum(dim=-1, keepdim=True) + EPSILON)
    return _refuse_overflow(output, named).to(dtype)


# ---------------------------------------------------------------------------------------------
# A window that saves: only the blocks of keys a window can reach are ever scored.


def window_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    radius: int,
    causal: bool = False,
) -> torch.Tensor:
    """Softmax attention of query i over the keys j with |i - j| <= radius (j <= i too, if
    causal): the numbers of a dense layer given local_mask(n, radius) as its mask, but computed
    in blocks of b = max(radius, 1) positions, each block of queries scored against its own
    block of keys and the two beside it. (..., n, d), (..., n, d), (..., n, d_v) ->
    (..., n, d_v); the scores are (..., n / b, b, 3b): the cost grows like n times the window,
    not n^2."""
    radius, causal = _checked_window_inputs(queries, keys, values, radius, causal)
    dtype, named = values.dtype, {"queries": queries, "keys": keys, "values": values}
    queries, keys, values = _at_least_float32(queries, keys, values)
    output = _window_attention(queries, keys, values, radius, causal)
    return _refuse_overflow(output, named, "window_attention", SCORES_OVERFLOW).to(dtype)


def _window_attention(queries, keys, values, radius, causal):
    n, block = queries.shape[-2], max(radius, 1)
    blocks = -(-n // block)
    filler = blocks * block - n  # zeros after the last position, to make whole blocks

    def beside(x):  # (..., n, e) -> (..., blocks, 3 block, e): blocks t - 1, t, t + 1
        x = F.pad(x, (0, 0, block, filler + block)).unflatten(-2, (blocks + 2, block))
        return torch.cat([x[..., :-2, :, :], x[..., 1:-1, :, :], x[..., 2:, :, :]], dim=-2)

    q = F.pad(queries, (0, 0, 0, filler)).unflatten(-2, (blocks, block))  # (..., blocks, b, d)
    k, v = beside(keys), beside(values)  # (..., blocks, 3b, d), (..., blocks, 3b, d_v)
    i = torch.arange(blocks * block, device=q.device).view(blocks, block, 1)  # query positions
    j = torch.arange(-block, 2 * block, device=q.device) + block * torch.arange(
        blocks, device=q.device
    ).view(blocks, 1, 1)  # (blocks, 1, 3b): key positions
    allowed = ((i - j).abs() <= radius) & (j >= 0) & (j < n)  # (blocks, b, 3b)
    if causal:
        allowed = allowed & (j <= i)
    allowed = allowed | (i >= n)  # filler queries read anything: their rows are dropped
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., blocks, b, 3b)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
    return (weights @ v).flatten(-3, -2)[..., :n, :]  # (..., n, d_v)


# ---------------------------------------------------------------------------------------------
# Linformer (Wang et al., 2020): the keys and values projected along the sequence, n -> k.


def linformer_attention(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_projection: torch.Tensor,
    value_projection: torch.Tensor,
) -> torch.Tensor:
    """Softmax attention over k mixtures of the n positions instead of the n positions
    themselves: keys E K and values F V, E = key_projection and F = value_projection (k, n).
    (..., n, d), (..., n, d), (..., n, d_v) -> (..., n, d_v); the weights are (..., n, k), so
    the cost grows like n k. Not causal: every projected key mixes every position."""
    _check_linformer_inputs(queries, keys, values, key_projection, value_projection)
    dtype, named = values.dtype, {"queries": queries, "keys": keys, "values": values}
    wide = _at_least_float32(queries, keys, values, key_projection, value_projection)
    output = _linformer_attention(*wide)
    return _refuse_overflow(output, named, "linformer_attention", SCORES_OVERFLOW).to(dtype)


def _linformer_attention(queries, keys, values, key_projection, value_projection):
    projected_keys = key_projection @ keys  # (..., k, d): each a weighted mix of all n keys
    projected_values = value_projection @ values  # (..., k, d_v)
    scores = queries @ projected_keys.transpose(-2, -1) / math.sqrt(queries.shape[-1])
    return torch.softmax(scores, dim=-1) @ projected_values  # (..., n, k) @ (..., k, d_v)


class LowRankSelfAttention(nn.Module):
    """Bidirectional multi-head self-attention (B, n, d_model) -> (B, n, d_model) over
    sequences of exactly `length` positions. projected None: exact softmax attention over the
    n keys. projected k: Linformer, the keys and values projected from n positions to k by
    learned E and F (k, n), one pair shared by every head (the paper's headwise sharing). E
    and F are made for one n, so a Linformer layer takes no other length."""

    def __init__(self, d_model: int, num_heads: int, length: int, projected: int | None = None):
        super().__init__()
        d_model, num_heads, length, projected = _checked_low_rank_sizes(
            d_model, num_heads, length, projected
        )
        self.num_heads, self.length, self.projected = num_heads, length, projected
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.E = self.F = None
        if projected is not None:  # each projected position starts as a mix of about equal size
            self.E = nn.Parameter(torch.randn(projected, length) / math.sqrt(length))
            self.F = nn.Parameter(torch.randn(projected, length) / math.sqrt(length))
        self.attention_weights = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_low_rank_input(self, x)
        q = _split_heads(self.W_q(x), self.num_heads)  # (B, heads, n, d_head)
        k = _split_heads(self.W_k(x), self.num_heads)
        v = _split_heads(self.W_v(x), self.num_heads)
        if self.E is not None:
            k, v = self.E @ k, self.F @ v  # (B, heads, projected, d_head): E, F (k, n) broadcast
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, heads, n, n or k)
        self.attention_weights = torch.softmax(scores, dim=-1)
        return self.W_o(_merge_heads(self.attention_weights @ v))


class LowRankRecallModel(nn.Module):
    """Token embedding + sinusoidal positions -> one bidirectional LowRankSelfAttention -> a
    residual -> logits over the vocabulary (B, n, vocab), for sequences of exactly `length`.
    The embedding is not scaled up by sqrt(d_model) as RecallModel's is: with no causal mask to
    tell the keys before a query from those after it, the positions must weigh as much as the
    tokens (scaled, this model learned the recall task to 31% in 800 steps; unscaled, 93%)."""

    def __init__(
        self,
        vocab_size: int,
        length: int,
        projected: int | None = None,
        d_model: int = 32,
        num_heads: int = 4,
    ):
        super().__init__()
        self.vocab_size = validation.whole_number(vocab_size, "vocab_size")
        d_model, num_heads, length, projected = _checked_low_rank_sizes(
            d_model, num_heads, length, projected
        )
        validation.layer_weights(self.vocab_size, d_model, "vocab_size and d_model")
        self.embedding = nn.Embedding(self.vocab_size, d_model)
        self.attention = LowRankSelfAttention(d_model, num_heads, length, projected)
        self.output = nn.Linear(d_model, self.vocab_size)
        self.register_buffer("positions", sinusoidal_encoding(length, d_model), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        _check_low_rank_tokens(self, tokens)
        x = self.embedding(tokens) + self.positions  # (B, n, d_model)
        return self.output(x + self.attention(x))  # (B, n, vocab)


# Exact attention (None) and Linformer at four sizes of k, one model each, on the recall task at
# n = 64: the length is fixed, as E and F need. Twice RecallModel's steps: without a causal
# mask, telling the marker before a position from the one after takes longer to learn.
PROJECTIONS = (None, 32, 16, 8, 4)
LOW_RANK_RECIPE = Recipe(steps=1600, task=RecallTask(train_length=64))
SAVED_LOW_RANK_MODELS = DATA / "low_rank_models.pt"
REMAKE_LOW_RANK = "make low-rank-models"


def train_low_rank_model(
    projected: int | None, recipe: Recipe = LOW_RANK_RECIPE, progress: bool = False
) -> dict:
    """Train one LowRankRecallModel (projected None: exact attention) on sequences of length
    recipe.task.train_length; returns {"model", "loss" (every step), "seconds"}. One thread."""
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a Recipe, got {type(recipe).__name__}")
    progress = validation.flag(progress, "progress")
    task = recipe.task
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        torch.manual_seed(recipe.seed)
        model = LowRankRecallModel(
            task.vocab_size, task.train_length, projected, recipe.d_model, recipe.num_heads
        )
        label = "exact" if projected is None else f"Linformer, k = {projected}"
        return _trained(model, recipe, label, progress)


def train_and_save_low_rank(
    path: str | Path = SAVED_LOW_RANK_MODELS, recipe: Recipe = LOW_RANK_RECIPE
) -> dict:
    """Train one model per entry of PROJECTIONS with the same recipe and save them in one
    checkpoint; returns {projected: seconds of training}."""
    path = savable_path(path)  # before the minutes of training, not after them
    trained = {k: train_low_rank_model(k, recipe, progress=True) for k in PROJECTIONS}
    save_checkpoint(
        path,
        {
            "projections": list(PROJECTIONS),
            "weights": [trained[k]["model"].state_dict() for k in PROJECTIONS],
            "recipe": {k: v for k, v in asdict(recipe).items() if k != "task"},
            "task": asdict(recipe.task),
            "loss": [trained[k]["loss"] for k in PROJECTIONS],
            "seconds": [trained[k]["seconds"] for k in PROJECTIONS],
        },
    )
    return {k: trained[k]["seconds"] for k in PROJECTIONS}


def load_low_rank_models(path: str | Path = SAVED_LOW_RANK_MODELS) -> dict:
    """{"models": {projected: LowRankRecallModel}, "task", "recipe", "loss" and "seconds"
    ({projected: ...}) from the saved checkpoint (checksum verified, weights_only=True)."""
    names = ("projections", "weights", "recipe", "task", "loss", "seconds")
    saved = load_checkpoint(path, names, REMAKE_LOW_RANK)
    recipe = _saved_recipe(path, saved["recipe"], saved["task"])
    if saved["projections"] != list(PROJECTIONS) or not all(
        isinstance(saved[name], list) and len(saved[name]) == len(PROJECTIONS)
        for name in ("weights", "loss", "seconds")
    ):
        raise CheckpointError(
            f"{path}: it should hold one model, loss and time for each of {PROJECTIONS}"
        )
    for name, low in (("loss", 0.0), ("seconds", 0.0)):
        for value in saved[name]:
            numbers = value if name == "loss" else [value]
            if not isinstance(numbers, list) or not all(
                isinstance(x, float) and math.isfinite(x) and x >= low for x in numbers
            ):
                raise CheckpointError(
                    f"{path}: its {name} should be {'lists of' if name == 'loss' else ''} "
                    f"finite numbers >= 0, one {'list ' if name == 'loss' else ''}per model; "
                    f"{REMAKE_LOW_RANK} writes it again"
                )
    task, models = recipe.task, {}
    for projected, weights in zip(PROJECTIONS, saved["weights"], strict=True):
        try:
            model = LowRankRecallModel(
                task.vocab_size, task.train_length, projected, recipe.d_model, recipe.num_heads
            )
        except ValueError as problem:
            raise CheckpointError(
                f"{path}: its recipe does not build the model for k = {projected} ({problem}); "
                f"{REMAKE_LOW_RANK} writes it again"
            ) from None
        _load_weights(path, model, weights, f"projected {projected}")
        models[projected] = model.eval()
    return {
        "models": models,
        "task": task,
        "recipe": saved["recipe"],
        **{name: dict(zip(PROJECTIONS, saved[name], strict=True)) for name in ("loss", "seconds")},
    }


# ---------------------------------------------------------------------------------------------
# Reformer's LSH attention (Kitaev et al., 2020): hash, sort by bucket, attend within chunks.


def lsh_buckets(
    vectors: torch.Tensor, num_buckets: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Angular hashing: one random rotation R (d, num_buckets // 2), drawn from the generator
    (torch's global one if None) in float32, and each vector's bucket is the argmax over
    [xR, -xR]. (..., n, d) -> (..., n) int64 ids in 0 .. num_buckets - 1. Vectors pointing the
    same way share a bucket (a positive multiple of one always does); the nearer two vectors'
    angle, the likelier they share one."""
    num_buckets = _check_lsh_hashing(vectors, num_buckets, generator)
    rotation = torch.randn(vectors.shape[-1], num_buckets // 2, generator=generator)
    (wide,) = _at_least_float32(vectors)  # float16 would overflow to inf, and lose the angle
    rotated = wide @ rotation.to(wide)  # (..., n, num_buckets // 2)
    return torch.cat([rotated, -rotated], dim=-1).argmax(dim=-1)


def lsh_attention(
    queries: torch.Tensor, values: torch.Tensor, buckets: torch.Tensor, chunk_size: int
) -> torch.Tensor:
    """Reformer's attention with shared queries and keys (each key is its query made unit
    length). For each round of hashing, buckets (..., n) or (..., rounds, n): sort the
    positions by bucket (then by position), cut them into chunks of chunk_size, and let each
    query attend to the keys of its bucket in its own chunk and the chunk before it (the
    first chunk looks back to the last). A query never attends to itself unless it has no
    other key. Rounds are combined by their share of the softmax mass (the log-sum-exp of
    each), a key met in several rounds counted once. (..., n, d), (..., n, d_v) ->
    (..., n, d_v); the scores are (..., rounds, n / c, c, 2c): the cost grows like n c, plus
    n log n for the sort."""
    queries, values, buckets, chunk_size = _checked_lsh_inputs(queries, values, buckets, chunk_size)
    dtype, named = values.dtype, {"queries": queries, "values": values}
    wide_queries, wide_values = _at_least_float32(queries, values)
    output = _lsh_attention(wide_queries, wide_values, buckets, chunk_size)
    return _refuse_overflow(output, named, "lsh_attention", SCORES_OVERFLOW).to(dtype)


def _lsh_attention(queries, values, buckets, chunk_size):
    n, d = queries.shape[-2:]
    keys = queries / queries.norm(dim=-1, keepdim=True)  # shared QK: a key is its unit query
    positions = torch.arange(n, device=queries.device)
    order = (buckets * n + positions).argsort(dim=-1)  # (..., rounds, n): by bucket, position
    where = positions.expand(*buckets.shape[:-2], n)[..., None]  # (..., n, 1)
    q = _sorted_in_chunks(queries, order, chunk_size)  # (..., rounds, chunks, c, d)
    k = _with_one_back(_sorted_in_chunks(keys, order, chunk_size))  # (..., rounds, chunks, 2c, d)
    v = _with_one_back(_sorted_in_chunks(values, order, chunk_size))  # (..., 2c, d_v)
    query_at = _sorted_in_chunks(where, order, chunk_size)[..., 0]  # (..., rounds, chunks, c)
    key_at = _with_one_back(_sorted_in_chunks(where, order, chunk_size))[..., 0]  # (..., 2c)
    query_codes = _sorted_in_chunks(buckets.transpose(-2, -1), order, chunk_size)  # (.., c, R)
    key_codes = _with_one_back(query_codes)  # (..., rounds, chunks, 2c, rounds)
    same = query_codes[..., :, None, :] == key_codes[..., None, :, :]  # (..., c, 2c, rounds)
    rounds = torch.arange(buckets.shape[-2], device=queries.device)
    this_round = same.gather(-1, rounds.view(-1, 1, 1, 1, 1).expand(*same.shape[:-1], 1))[..., 0]
    itself = query_at[..., :, None] == key_at[..., None, :]  # (..., rounds, chunks, c, 2c)
    others = this_round & ~itself
    allowed = torch.where(others.any(dim=-1, keepdim=True), others, itself)
    met = same.sum(dim=-1).clamp(min=1).to(q.dtype)  # the rounds the two share a bucket in
    scores = q @ k.transpose(-2, -1) / math.sqrt(d) - met.log()  # met r times: 1/r of it each
    scores = scores.masked_fill(~allowed, float("-inf"))
    mass = scores.logsumexp(dim=-1, keepdim=True).flatten(-3, -2)  # (..., rounds, n, 1) sorted
    output = (torch.softmax(scores, dim=-1) @ v).flatten(-3, -2)  # (..., rounds, n, d_v) sorted
    unsort = order.argsort(dim=-1)[..., None]  # (..., rounds, n, 1)
    output = output.gather(-2, unsort.expand_as(output))
    share = torch.softmax(mass.gather(-2, unsort), dim=-3)  # (..., rounds, n, 1)
    return (share * output).sum(dim=-3)  # (..., n, d_v)


def lsh_pairs(buckets: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """(..., n, n) bool: the (query, key) pairs lsh_attention scores in at least one round of
    buckets (n,), one round, or (..., rounds, n): the same bucket, in the query's chunk or the
    one before it, and not the query itself unless it has no other key in that round. An n x n
    picture of what lsh_attention computes without ever making it. Without the queries to
    compare with, a 2-d (r, n) is r rounds of one sequence: a batch of B sequences hashed once
    each is (B, 1, n)."""
    buckets, chunk_size = _checked_lsh_buckets(buckets, chunk_size)
    n = buckets.shape[-1]
    order = (buckets * n + torch.arange(n, device=buckets.device)).argsort(dim=-1)
    chunk = order.argsort(dim=-1) // chunk_size  # (..., rounds, n): each position's chunk
    chunks = n // chunk_size
    same_chunk = chunk[..., :, None] == chunk[..., None, :]  # (..., rounds, n, n)
    one_back = chunk[..., :, None] == (chunk[..., None, :] + 1) % chunks
    near = same_chunk | one_back if chunks > 1 else same_chunk
    allowed = near & (buckets[..., :, None] == buckets[..., None, :])
    itself = torch.eye(n, dtype=torch.bool, device=buckets.device)
    others = allowed & ~itself
    return torch.where(others.any(dim=-1, keepdim=True), others, itself).any(dim=-3)


def _sorted_in_chunks(x: torch.Tensor, order: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """x (..., n, e) in each round's order (..., rounds, n), cut into chunks:
    (..., rounds, n / c, c, e)."""
    shape = (*order.shape, x.shape[-1])  # (..., rounds, n, e)
    x = x[..., None, :, :].expand(shape).gather(-2, order[..., None].expand(shape))
    return x.unflatten(-2, (-1, chunk_size))


def _with_one_back(chunks: torch.Tensor) -> torch.Tensor:
    """(..., chunks, c, e) -> (..., chunks, 2c, e): each chunk and the one before it, the first
    with the last (a single chunk has only itself)."""
    if chunks.shape[-3] == 1:
        return chunks
    return torch.cat([chunks, chunks.roll(1, dims=-3)], dim=-2)


# ---------------------------------------------------------------------------------------------
# The cost table, counted: the matrix products and the memory of one head at each length.


def attention_costs(n: int, d: int = 64, window: int = 64, projected: int = 64) -> dict:
    """{kind: {"flops": the operations of its matrix products, "bytes": the largest memory its
    tensors hold at once}} for one head of n positions, d wide, on seeded inputs: "exact"
    (softmax over all n keys), "window" (window_attention, radius window), "linear"
    (linear_attention), "Linformer" (linformer_attention with k = projected) and "LSH"
    (lsh_attention, one round, chunks of `window` positions, n / window buckets). Counts, not
    times: the same on every machine. The sort of LSH, n log n comparisons, is not a matrix
    product, and is not counted."""
    n, d, window, projected = _checked_cost_sizes(n, d, window, projected)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, n, d, generator=generator) for _ in range(3))  # (1, n, d)
    E, F_ = (torch.randn(projected, n, generator=generator) / math.sqrt(n) for _ in range(2))
    buckets = lsh_buckets(q, max(2, 2 * (n // (2 * window))), generator)  # (1, n)
    runs = {
        "exact": lambda: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1) @ v,
        "window": lambda: _window_attention(q, k, v, window, False),
        "linear": lambda: linear_attention(q, k, v),
        "Linformer": lambda: _linformer_attention(q, k, v, E, F_),
        "LSH": lambda: _lsh_attention(q, v, buckets[..., None, :], window),
    }
    return {
        kind: {"flops": _matmul_flops(run), "bytes": peak_bytes(run)} for kind, run in runs.items()
    }


def _matmul_flops(run: Callable[[], object]) -> int:
    with FlopCounterMode(display=False) as counter:
        run()
    return counter.get_total_flops()


def main() -> None:
    """python -m helpers.long_context: retrain chapter 11's three models and save them;
    with --low-rank, the exact and Linformer models instead."""
    parser = argparse.ArgumentParser(
        description="Retrain chapter 11's three models and store them in data/."
    )
    parser.add_argument(
        "--low-rank",
        action="store_true",
        help="retrain the exact-attention and Linformer models (PROJECTIONS) instead",
    )
    trained = train_and_save_low_rank() if parser.parse_args().low_rank else train_and_save_all()
    print({name: f"{s:.1f} s" for name, s in trained.items()})


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_position(position: object) -> None:
    if not isinstance(position, str) or position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")


def _check_size(size: int) -> int:
    return validation.whole_number(size, "size")


def _check_mask(mask: object) -> torch.Tensor:
    validation.tensor(mask, "mask", "(q, k), boolean")
    if mask.dtype != torch.bool or mask.dim() != 2 or 0 in mask.shape:
        raise ValueError(
            f"mask must be a boolean (q, k) tensor with q, k >= 1, got {mask.dtype} of shape "
            f"{tuple(mask.shape)}"
        )
    return mask


def _check_linear_inputs(queries, keys, values, causal) -> None:
    for name, value in (("queries", queries), ("keys", keys), ("values", values)):
        validation.tensor(value, name, "(..., n, size)")
        if value.dim() < 2:
            raise ValueError(f"{name} must be (..., n, size), got {tuple(value.shape)}")
    validation.same_float_dtype({"queries": queries, "keys": keys, "values": values})
    q, k, v = (tuple(t.shape) for t in (queries, keys, values))
    if q[:-2] != k[:-2] or k[:-1] != v[:-1] or q[-1] != k[-1]:
        raise ValueError(
            f"queries {q}, keys {k} and values {v} must be (..., q, d), (..., k, d) and "
            f"(..., k, d_v) with the same leading axes"
        )
    if 0 in (q[-1], v[-1]):
        raise ValueError(f"queries {q}, keys {k} and values {v} need a size of at least 1")
    validation.flag(causal, "causal")
    if causal and q[-2] != k[-2]:
        raise ValueError(f"causal attention needs as many queries as keys, got {q[-2]} and {k[-2]}")


def _checked_low_rank_sizes(d_model, num_heads, length, projected) -> tuple:
    d_model = validation.whole_number(d_model, "d_model")
    num_heads = validation.whole_number(num_heads, "num_heads")
    validation.head_size(d_model, num_heads)
    validation.layer_weights(d_model, d_model, "d_model")
    length = validation.whole_number(length, "length")
    if projected is not None:
        projected = validation.whole_number(projected, "projected")
        if projected > length:
            raise ValueError(
                f"projected ({projected}) must be at most length ({length}): it is the number "
                f"of positions the {length} keys and values are projected down to"
            )
    validation.layer_weights(projected or 1, length, "length and projected")
    return d_model, num_heads, length, projected


def _check_position_aware_input(layer: PositionAwareAttention, x: object) -> None:
    d_model, dtype = layer.W_q.in_features, layer.W_q.weight.dtype
    validation.tensor(x, "x", f"(B, n, d_model={d_model})")
    if x.dim() != 3 or x.shape[-1] != d_model or x.dtype != dtype:
        raise ValueError(
            f"x must be (B, n, d_model={d_model}) of the layer's dtype {dtype}, got "
            f"{x.dtype} of shape {tuple(x.shape)}"
        )


def _check_recall_tokens(model: RecallModel, tokens: object) -> None:
    validation.token_ids(tokens, "tokens", model.vocab_size)
    if tokens.dim() != 2 or tokens.shape[1] == 0:
        raise ValueError(
            f"tokens must be (B, n) with at least one position, got {tuple(tokens.shape)}"
        )
    device = model.embedding.weight.device
    if tokens.device != device:
        raise ValueError(f"tokens are on {tokens.device} but the model is on {device}")


def _check_low_rank_input(layer: LowRankSelfAttention, x: object) -> None:
    d_model, weight = layer.W_q.in_features, layer.W_q.weight
    expected = (
        f"(B, n, d_model) = (B, {layer.length}, {d_model}), B >= 1, {weight.dtype} on "
        f"{weight.device} as the layer's weights"
    )
    validation.dense_tensor(x, "x", expected)
    if (
        x.dim() != 3
        or x.shape[1:] != (layer.length, d_model)
        or not x.shape[0]
        or x.dtype != weight.dtype
        or x.device != weight.device
    ):
        why = ""
        if layer.projected is not None and x.dim() == 3 and x.shape[1] != layer.length:
            why = f" (E and F project exactly {layer.length} positions: the length is fixed)"
        raise ValueError(f"x must be {expected}, got {x.dtype} {tuple(x.shape)} on {x.device}{why}")


def _check_low_rank_tokens(model: LowRankRecallModel, tokens: object) -> None:
    length = model.attention.length
    validation.token_ids(tokens, "tokens", model.vocab_size, f"(B, {length})")
    if tokens.shape[0] == 0 or tokens.shape[1] != length:
        raise ValueError(
            f"tokens must be (B, {length}) with B >= 1: the model is made for sequences of "
            f"exactly {length}, got {tuple(tokens.shape)}"
        )
    device = model.embedding.weight.device
    if tokens.device != device:
        raise ValueError(f"tokens are on {tokens.device} but the model is on {device}")


def _check_linformer_inputs(queries, keys, values, key_projection, value_projection) -> None:
    named = {
        "queries": queries,
        "keys": keys,
        "values": values,
        "key_projection": key_projection,
        "value_projection": value_projection,
    }
    for name, value in named.items():
        validation.dense_tensor(value, name, "(k, n)" if "projection" in name else "(..., n, d)")
    validation.same_float_dtype(named)
    q, k, v = (tuple(t.shape) for t in (queries, keys, values))
    if len(q) < 2 or len(k) != len(q) or len(v) != len(q):
        raise ValueError(
            f"queries {q}, keys {k} and values {v} must be (..., n, d), (..., n, d) and "
            f"(..., n, d_v) of one rank, at least 2"
        )
    if q[:-2] != k[:-2] or k[:-1] != v[:-1] or q[-1] != k[-1] or 0 in q + k + v:
        raise ValueError(
            f"queries {q}, keys {k} and values {v} must be (..., n_q, d), (..., n, d) and "
            f"(..., n, d_v) with the same leading axes and sizes of at least 1"
        )
    e, f = tuple(key_projection.shape), tuple(value_projection.shape)
    if len(e) != 2 or e != f or e[1] != k[-2] or not e[0]:
        raise ValueError(
            f"key_projection {e} and value_projection {f} must both be (k, n) with n = "
            f"{k[-2]}, the keys' length, and k >= 1"
        )
    lead = math.prod(q[:-2])
    largest = max(lead * q[-2] * e[0], lead * e[0] * max(q[-1], v[-1]), lead * q[-2] * v[-1])
    if largest > MOST_SCORES:
        raise ValueError(
            f"linformer_attention would make a tensor of {largest:,} numbers for queries {q} "
            f"and k = {e[0]}, more than 2^28: use fewer positions, a smaller k or fewer rows"
        )


def _check_lsh_hashing(vectors, num_buckets, generator) -> int:
    validation.dense_tensor(vectors, "vectors", "(..., n, d)")
    if not vectors.is_floating_point() or vectors.dim() < 2 or not vectors.shape[-1]:
        raise ValueError(
            f"vectors must be floating point (..., n, d) with d >= 1, got {vectors.dtype} of "
            f"shape {tuple(vectors.shape)}"
        )
    if not vectors.isfinite().all():
        raise ValueError("vectors hold NaN or inf: they have no direction to hash")
    num_buckets = validation.whole_number(num_buckets, "num_buckets", minimum=2)
    if num_buckets % 2:
        raise ValueError(
            f"num_buckets must be even, got {num_buckets}: the buckets are the argmax over "
            f"[xR, -xR], two per column of the rotation R"
        )
    validation.layer_weights(vectors.shape[-1], num_buckets // 2, "vectors' d and num_buckets")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None, got {generator!r}")
    if generator is not None and generator.device.type != "cpu":
        raise ValueError(f"generator must be a cpu torch.Generator, got one on {generator.device}")
    return num_buckets


MOST_BUCKET_ID = 2**31 - 1  # bucket * n + position must not overflow int64


def _checked_lsh_inputs(queries, values, buckets, chunk_size) -> tuple:
    validation.dense_tensor(queries, "queries", "(..., n, d)")
    validation.dense_tensor(values, "values", "(..., n, d_v)")
    validation.same_float_dtype({"queries": queries, "values": values})
    q, v = tuple(queries.shape), tuple(values.shape)
    if len(q) < 2 or q[:-1] != v[:-1] or 0 in q + v:
        raise ValueError(
            f"queries {q} and values {v} must be (..., n, d) and (..., n, d_v) with the same "
            f"leading axes and n, and sizes of at least 1"
        )
    if not (queries.isfinite().all() and values.isfinite().all()):
        raise ValueError("queries and values must be finite: they hold NaN or inf")
    if not (queries.norm(dim=-1) > 0).all():
        raise ValueError(
            "every query must have a length above 0: its key is the query made unit length, "
            "and a zero query (or one whose squares underflow) has no direction"
        )
    validation.dense_tensor(buckets, "buckets", "(..., n) or (..., rounds, n)")
    if buckets.dtype != torch.int64:
        raise ValueError(
            f"buckets must be int64 bucket ids, as lsh_buckets makes, got {buckets.dtype}"
        )
    if buckets.device != queries.device:
        raise ValueError(f"buckets are on {buckets.device} but the queries on {queries.device}")
    if tuple(buckets.shape) == q[:-1]:
        buckets = buckets[..., None, :]  # one round
    if buckets.dim() != len(q) or tuple(buckets.shape[:-2]) != q[:-2] or buckets.shape[-1] != q[-2]:
        raise ValueError(
            f"buckets {tuple(buckets.shape)} must be (..., n) = {q[:-1]} for one round of "
            f"hashing, or (..., rounds, n) = {(*q[:-2], 'rounds', q[-2])}"
        )
    if not buckets.shape[-2] or buckets.min() < 0 or buckets.max() > MOST_BUCKET_ID:
        raise ValueError(
            f"buckets must hold at least one round of ids 0..2^31 - 1, got "
            f"{tuple(buckets.shape)}"
            + (f" from {buckets.min().item()} to {buckets.max().item()}" if buckets.numel() else "")
        )
    chunk_size = validation.whole_number(chunk_size, "chunk_size")
    if q[-2] % chunk_size:
        raise ValueError(
            f"chunk_size ({chunk_size}) must divide n ({q[-2]}): the sorted positions are cut "
            f"into chunks of one size"
        )
    rounds = buckets.shape[-2]
    scored = math.prod(q[:-2]) * rounds * q[-2] * 2 * chunk_size * max(rounds, q[-1], v[-1])
    if scored > MOST_SCORES:
        raise ValueError(
            f"lsh_attention would hold {scored:,} numbers for queries {q}, {rounds} "
            f"round{'s' * (rounds != 1)} and chunks of {chunk_size}, more than 2^28: use fewer "
            f"rounds, smaller chunks or fewer positions"
        )
    return queries, values, buckets, chunk_size


def _checked_window_inputs(queries, keys, values, radius, causal) -> tuple[int, bool]:
    named = {"queries": queries, "keys": keys, "values": values}
    for name, value in named.items():
        validation.dense_tensor(value, name, "(..., n, d)")
    validation.same_float_dtype(named)
    q, k, v = (tuple(t.shape) for t in (queries, keys, values))
    if len(q) < 2 or q[:-1] != k[:-1] or k[:-1] != v[:-1] or q[-1] != k[-1] or 0 in q + v:
        raise ValueError(
            f"queries {q}, keys {k} and values {v} must be (..., n, d), (..., n, d) and "
            f"(..., n, d_v): one position each, the same leading axes, sizes of at least 1"
        )
    radius = min(validation.whole_number(radius, "radius", minimum=0), q[-2])  # n: every key
    block = max(radius, 1)
    scored = math.prod(q[:-2]) * (-(-q[-2] // block) * block) * 3 * block
    if scored > MOST_SCORES:
        raise ValueError(
            f"window_attention would score {scored:,} query-key pairs for queries {q} and "
            f"radius {radius}, more than 2^28: use a smaller radius, or fewer positions"
        )
    return radius, validation.flag(causal, "causal")


MOST_SCORES = 2**28  # score entries one call may hold (1 GiB of float32)


def _checked_cost_sizes(n, d, window, projected) -> tuple[int, int, int, int]:
    n, d = validation.whole_number(n, "n"), validation.whole_number(d, "d")
    window = validation.whole_number(window, "window")
    projected = validation.whole_number(projected, "projected")
    if n % window or projected > n:
        raise ValueError(
            f"n ({n}) must be a multiple of window ({window}), the chunk of LSH, and at least "
            f"projected ({projected}), Linformer's k"
        )
    if n * n > 2**26 or n * d > 2**26 or d * d > 2**26:
        raise ValueError(
            f"n = {n} and d = {d} would make exact attention's {n} x {n} scores, the inputs or "
            f"linear attention's d x d summary larger than 2^26 numbers: these counts are for n "
            f"and d up to 8,192"
        )
    return n, d, window, projected


def _checked_lsh_buckets(buckets, chunk_size) -> tuple[torch.Tensor, int]:
    validation.dense_tensor(buckets, "buckets", "(n,) or (..., rounds, n)")
    if buckets.dtype != torch.int64:
        raise ValueError(
            f"buckets must be int64 bucket ids, as lsh_buckets makes, got {buckets.dtype}"
        )
    if buckets.dim() == 0:
        raise ValueError("buckets must be (n,) or (..., rounds, n) bucket ids, got a single id")
    buckets = buckets[None] if buckets.dim() == 1 else buckets  # (n,): one round
    if 0 in buckets.shape or buckets.min() < 0 or buckets.max() > MOST_BUCKET_ID:
        raise ValueError(
            f"buckets must hold at least one round of at least one id, each 0..2^31 - 1, got "
            f"shape {tuple(buckets.shape)}"
        )
    n = buckets.shape[-1]
    if buckets.numel() * n > 2**28:
        raise ValueError(
            f"buckets {tuple(buckets.shape)} would make {buckets.numel() * n:,} pairs, more than "
            f"2^28: this n x n picture is for small n (lsh_attention itself never makes it)"
        )
    chunk_size = validation.whole_number(chunk_size, "chunk_size")
    if n % chunk_size:
        raise ValueError(
            f"chunk_size ({chunk_size}) must divide n ({n}): the sorted positions are cut into "
            f"chunks of one size"
        )
    return buckets, chunk_size


def _check_scored_as_built(model: nn.Module) -> None:
    """recall_accuracy scores a float64 copy built as the class itself, which a subclass's
    forward, a forward set on a module or a forward hook would not follow: refuse them."""
    if type(model) not in (RecallModel, LowRankRecallModel):
        raise ValueError(
            f"model is a {type(model).__name__}, a subclass: recall_accuracy scores a float64 "
            f"copy built as {type(model).__mro__[1].__name__} itself, which its own forward "
            f"would not change; score the model yourself, or pass a plain one"
        )
    for name, module in model.named_modules():
        if "forward" in vars(module) or module._forward_hooks or module._forward_pre_hooks:
            raise ValueError(
                f"{name or 'the model'} has a forward of its own or a forward hook: "
                f"recall_accuracy scores a float64 copy built from the class and the weights, "
                f"which neither would follow; remove it (del module.forward, handle.remove())"
            )


if __name__ == "__main__":
    main()
