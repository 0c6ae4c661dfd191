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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from helpers import validation
from helpers.attention import merge_heads, split_heads
from helpers.checkpoints import CheckpointError, load_checkpoint, load_weights, save_checkpoint
from helpers.contexts import one_torch_thread
from helpers.masks import causal_mask
from helpers.positional import alibi_bias, apply_rope, sinusoidal_encoding

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
        d_model, dtype = self.W_q.in_features, self.W_q.weight.dtype
        validation.tensor(x, "x", f"(B, n, d_model={d_model})")
        if x.dim() != 3 or x.shape[-1] != d_model or x.dtype != dtype:
            raise ValueError(
                f"x must be (B, n, d_model={d_model}) of the layer's dtype {dtype}, got "
                f"{x.dtype} of shape {tuple(x.shape)}"
            )
        n = x.shape[1]
        q = split_heads(self.W_q(x), self.num_heads)  # (B, heads, n, d_head)
        k = split_heads(self.W_k(x), self.num_heads)
        v = split_heads(self.W_v(x), self.num_heads)
        if self.position == "rope":
            q, k = apply_rope(q), apply_rope(k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, heads, n, n)
        if self.position == "alibi":
            scores = scores + alibi_bias(self.num_heads, n, n).to(scores)
        scores = scores.masked_fill(~causal_mask(n, x.device), float("-inf"))
        self.attention_weights = torch.softmax(scores, dim=-1)
        return self.W_o(merge_heads(self.attention_weights @ v))


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
        validation.token_ids(tokens, "tokens", self.vocab_size)
        if tokens.dim() != 2 or tokens.shape[1] == 0:
            raise ValueError(
                f"tokens must be (B, n) with at least one position, got {tuple(tokens.shape)}"
            )
        device = self.embedding.weight.device
        if tokens.device != device:
            raise ValueError(f"tokens are on {tokens.device} but the model is on {device}")
        x = self.embedding(tokens) * math.sqrt(self.embedding.embedding_dim)  # (B, n, d_model)
        if self.position == "sinusoidal":
            x = x + sinusoidal_encoding(tokens.shape[1], x.shape[-1]).to(x)
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
    with one_torch_thread():
        torch.manual_seed(recipe.seed)
        generator = torch.Generator().manual_seed(recipe.seed)
        model = RecallModel(task.vocab_size, position, recipe.d_model, recipe.num_heads)
        optimizer = torch.optim.Adam(model.parameters(), lr=recipe.lr)
        losses, start = [], time.perf_counter()
        bar = tqdm(range(recipe.steps), desc=f"training ({position})", disable=not progress)
        for step in bar:
            tokens, answers = task.batch(recipe.batch_size, task.train_length, generator)
            loss = F.cross_entropy(model(tokens).flatten(0, 1), answers.flatten())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step % 50 == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return {"model": model, "loss": losses, "seconds": time.perf_counter() - start}


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


def _float64_copy(model: RecallModel) -> RecallModel:
    """A new model with the same weights in float64 (built afresh rather than deep-copied: the
    attention weights kept from a forward pass with gradients cannot be deep-copied)."""
    attention = model.attention
    twin = RecallModel(
        model.vocab_size, model.position, attention.W_q.in_features, attention.num_heads
    )
    twin.load_state_dict(model.state_dict())
    return twin.double().to(model.embedding.weight.device).eval()


def recall_accuracy(model: RecallModel, tokens: torch.Tensor, answers: torch.Tensor) -> dict:
    """The share of positions answered right, and the count, computed in float64 so that the
    same weights give the same count on every machine and thread count (on a copy: the model
    itself is left as it is)."""
    if not isinstance(model, RecallModel):
        raise ValueError(f"model must be a RecallModel, got {type(model).__name__}")
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
    correct = int((logits.argmax(-1) == answers.to(device)).sum())
    return {"correct": correct, "total": answers.numel(), "accuracy": correct / answers.numel()}


def train_and_save_all(path: str | Path = SAVED_MODELS, recipe: Recipe = Recipe()) -> dict:
    """Train one model per kind of position with the same recipe and save all three in one
    checkpoint (float32 weights and every step's loss: under 100 kB). Returns
    {position: seconds of training}."""
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
    chosen = local_mask(blocks, 1) | global_mask(blocks, list(range(num_global)))
    generator = torch.Generator().manual_seed(validation.seed(seed))
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
    return F.elu(x) + 1


def _at_least_float32(*tensors: torch.Tensor) -> list[torch.Tensor]:
    """16-bit tensors as float32: in float16 a normaliser phi(q) . sum phi(k) passes 65504
    (and becomes inf) with a few thousand keys; wider tensors as they are."""
    return [t.float() if t.element_size() < 4 else t for t in tensors]


def _refuse_overflow(result: torch.Tensor, inputs: dict) -> torch.Tensor:
    """result, unless it holds inf or NaN where every input is finite: then phi(q) . phi(k)
    overflowed (elu(x) + 1 grows like x, so q and k near 1e20 give 1e40, beyond float32)."""
    if result.isfinite().all() or not all(t.isfinite().all() for t in inputs.values()):
        return result
    largest = ", ".join(f"{name} {t.abs().max().item():.3g}" for name, t in inputs.items())
    raise ValueError(
        f"linear attention overflows {result.dtype} for these inputs (largest magnitudes: "
        f"{largest}): phi(q) . phi(k) grows with the product of q and k; scale the queries "
        f"and keys down, or compute in float64"
    )


def linear_attention_weights(
    queries: torch.Tensor, keys: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """(..., q, k): phi(q_i) . phi(k_j), over the allowed keys, divided by its row's sum
    (+ EPSILON). 16-bit inputs are computed in float32; weights that overflow are refused."""
    _check_linear_inputs(queries, keys, keys, causal)
    dtype, named = queries.dtype, {"queries": queries, "keys": keys}
    queries, keys = _at_least_float32(queries, keys)
    similarity = elu_feature_map(queries) @ elu_feature_map(keys).transpose(-2, -1)
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
    output = linear_attention_weights(queries, keys, causal) @ values
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
    phi_q, phi_k = elu_feature_map(queries), elu_feature_map(keys)  # (..., n, d)
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


def main() -> None:
    """python -m helpers.long_context: retrain chapter 11's three models and save them."""
    argparse.ArgumentParser(
        description="Retrain chapter 11's three models and store them in data/."
    ).parse_args()
    print({position: f"{s:.1f} s" for position, s in train_and_save_all().items()})


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


if __name__ == "__main__":
    main()
