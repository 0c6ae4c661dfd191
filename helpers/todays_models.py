"""Chapter 16's small decoder: one model whose attention is any of today's variants
(helpers.todays_attention), so that they can be trained on the same data and compared, and
written with or without their caches.

Read top to bottom: the config, a pre-norm block, the model, then generate().
"""

import argparse
import copy
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from helpers import validation
from helpers.checkpoints import (
    MAX_CHECKPOINT_PARAMETERS,
    CheckpointError,
    as_path,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
)
from helpers.contexts import keeping_random_state, one_torch_thread, trainable_float32
from helpers.gpt import _distribution, checked_sampling
from helpers.todays_attention import (
    CausalSelfAttention,
    LatentCache,
    MultiHeadLatentAttention,
    RollingCache,
    _check_attention_input,
    _check_latent_input,
    _checked_pads,
    _checked_window,
)
from helpers.training import _adamw_with_schedule, _clipped_step
from helpers.translation import BOS_ID, DATA_DIR, EOS_ID, load_pairs, load_tokenizer

ATTENTIONS = ("multi-head", "grouped-query", "latent")
MOST_NEW_TOKENS = 2**16


@dataclass(frozen=True)
class TodayConfig:
    vocab_size: int = 8000  # chapter 08's pieces
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 4
    d_ff: int = 512  # 4 x d_model, as GPT-2
    attention: str = "multi-head"  # or "grouped-query" (num_kv_heads), "latent" (MLA)
    num_kv_heads: int = 1  # grouped-query only: 1 is multi-query attention
    d_latent: int = 32  # latent only: the size cached per position, with d_rope
    d_rope: int = 16  # latent only: the rotated key part shared by every head
    absorbed: bool = False  # latent only: compute in the absorbed form (the same outputs)
    qk_norm: bool = False  # RMSNorm over each head's queries and keys (not for latent)
    sink: bool = False  # a learned sink logit per head (not for latent)
    window: int | None = None  # a sliding window (not for latent)
    keep: int = 0  # with a window: the first positions every query may read

    def __post_init__(self):
        _check_config(self)


class TodayBlock(nn.Module):
    """Pre-norm (RMSNorm, as Llama): x + attention(norm(x)), then x + ffn(norm(x))."""

    def __init__(self, config: TodayConfig):
        super().__init__()
        self.attention_norm = nn.RMSNorm(config.d_model)
        self.attention = _attention(config)
        self.absorbed = config.absorbed
        self.ffn_norm = nn.RMSNorm(config.d_model)
        self.ffn = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff),
            nn.GELU(),
            nn.Linear(config.d_ff, config.d_model),
        )

    def forward(self, x: torch.Tensor, cache, pads: torch.Tensor) -> torch.Tensor:
        """x (B, n, d_model); cache and pads (B,) as TodayGPT's door checked them: the
        attention's computation is called without its own checks."""
        read = self.attention_norm(x)
        if isinstance(self.attention, MultiHeadLatentAttention):
            x = x + self.attention._forward(read, cache, self.absorbed, pads)  # (B, n, d_model)
        else:
            x = x + self.attention._forward(read, cache, pads)
        return x + self.ffn(self.ffn_norm(x))


def _attention(config: TodayConfig) -> nn.Module:
    if config.attention == "latent":
        return MultiHeadLatentAttention(
            config.d_model, config.num_heads, config.d_latent, config.d_rope
        )
    return CausalSelfAttention(
        config.d_model,
        config.num_heads,
        config.num_kv_heads if config.attention == "grouped-query" else None,
        config.qk_norm,
        config.sink,
        config.window,
        config.keep,
    )


class TodayGPT(nn.Module):
    """Token embeddings (no position embedding: every variant turns its keys with RoPE),
    TodayBlocks, a final RMSNorm and an output layer tied to the embedding.
    ids (B, n) -> logits (B, n, vocab_size)."""

    def __init__(self, config: TodayConfig):
        super().__init__()
        self.config = _check_config(config)
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(TodayBlock(config) for _ in range(config.num_layers))
        self.norm = nn.RMSNorm(config.d_model)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.output.weight = self.tokens.weight
        nn.init.normal_(self.tokens.weight, std=0.02)  # GPT-2's: logits near 0 at the start

    def forward(
        self, ids: torch.Tensor, caches: list | None = None, pads: torch.Tensor | None = None
    ) -> torch.Tensor:
        """ids: (B, n), the positions after those the caches have read (all of them when
        caches is None); caches: new_caches(), extended by this pass. pads: (B,) each row's
        left pads (their ids are never read), the same on every pass through the caches."""
        pads = self._check_inputs(ids, caches, pads)
        return self._forward(ids, caches, pads)

    def _forward(self, ids, caches, pads=None) -> torch.Tensor:
        if pads is None:
            pads = torch.zeros(len(ids), dtype=torch.long, device=ids.device)
        x = self.tokens(ids)  # (B, n, d_model)
        for index, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[index], pads)
        return self.output(self.norm(x))  # (B, n, vocab_size)

    def new_caches(self) -> list:
        """One empty cache per layer, of the kind its attention reads."""
        if self.config.attention == "latent":
            return [LatentCache() for _ in self.blocks]
        return [block.attention.new_cache() for block in self.blocks]

    def cache_bytes(self, caches: list) -> int:
        """The bytes a list of this model's caches holds now."""
        self._check_caches(caches)
        return sum(_held_bytes(cache) for cache in caches)

    def _check_inputs(self, ids: object, caches: object, pads: object = None) -> torch.Tensor:
        """The checks of forward, once for every layer before any runs: the ids, the caches
        (one per layer, each its own, of its layer's kind and sizes, all of one length) and the
        pads (the same as every cache began with). Returns the pads as (B,) int64."""
        validation.token_ids(ids, "ids", self.config.vocab_size, "(B, n)")
        if not ids.numel():
            raise ValueError(f"ids must hold at least one token, got {tuple(ids.shape)}")
        if caches is not None:
            self._check_caches(caches)
        dtype = self.tokens.weight.dtype
        reads = torch.zeros((), dtype=dtype).expand(*ids.shape, self.config.d_model)  # no memory
        checked = _checked_pads(pads, reads, None)
        for index, block in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
            if isinstance(block.attention, MultiHeadLatentAttention):
                _check_latent_input(block.attention, reads, cache, False)
            else:
                _check_attention_input(block.attention, reads, cache)
            _checked_pads(checked, reads, cache)
        return checked

    def _check_caches(self, caches: object) -> None:
        kind = LatentCache if self.config.attention == "latent" else RollingCache
        if not isinstance(caches, list) or len(caches) != len(self.blocks):
            raise ValueError(
                f"caches must be a list of {len(self.blocks)} {kind.__name__}s, one per layer "
                f"(model.new_caches()), got {validation.shown(caches)}"
            )
        if not all(isinstance(cache, kind) for cache in caches):
            raise TypeError(f"caches must hold {kind.__name__}s (model.new_caches())")
        if len({id(cache) for cache in caches}) != len(caches):
            raise ValueError("caches must be one per layer, each its own (model.new_caches())")
        read = {cache.seen if isinstance(cache, RollingCache) else len(cache) for cache in caches}
        if len(read) > 1:
            raise ValueError(
                f"caches must have read the same positions, every layer as many: got {sorted(read)}"
            )


def _held_bytes(cache) -> int:
    if isinstance(cache, LatentCache):
        return cache.nbytes
    if cache.keys is None:
        return 0
    return sum(t.numel() * t.element_size() for t in (cache.keys, cache.values))


@torch.no_grad()
def generate(
    model: TodayGPT,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    pads: torch.Tensor | None = None,
) -> torch.Tensor:
    """(B, T + max_new_tokens): the prompt (B, T), then the tokens written one at a time,
    greedily (temperature 0) or drawn with torch.multinomial from chapter 12's distribution.
    With and without the caches the tokens are the same. pads: (B,) the left pads of each
    prompt, for prompts of different lengths in one batch: a row then writes what it would
    write alone."""
    if not isinstance(model, TodayGPT):
        raise TypeError(f"model must be a TodayGPT, got {type(model).__name__}")
    model._check_inputs(ids, None)
    max_new_tokens = validation.whole_number(max_new_tokens, "max_new_tokens", minimum=0)
    if max_new_tokens > MOST_NEW_TOKENS:
        raise ValueError(
            f"max_new_tokens must be at most {MOST_NEW_TOKENS:,} (one token per step: more "
            f"would write for hours), got {validation.shown(max_new_tokens)}"
        )
    sampling = checked_sampling(temperature, top_k, top_p, model.config.vocab_size, generator)
    use_cache = validation.flag(use_cache, "use_cache")
    pads = _checked_prompt_pads(pads, ids)
    return _generate(model, ids, max_new_tokens, sampling, generator, use_cache, pads)


def _generate(model, ids, max_new_tokens, sampling, generator, use_cache, pads) -> torch.Tensor:
    temperature, top_k, top_p = sampling
    was_training = model.training
    model.eval()
    caches = model.new_caches() if use_cache else None
    written, newest = ids.clone(), ids  # newest: what the model has not read yet
    for _ in range(max_new_tokens):
        logits = model._forward(newest if use_cache else written, caches, pads)[:, -1].double()
        if temperature == 0:
            token = logits.argmax(-1, keepdim=True)  # (B, 1)
        else:
            probabilities = _distribution(logits, temperature, top_k, top_p)
            token = torch.multinomial(probabilities, 1, generator=generator)  # (B, 1)
        written = torch.cat([written, token.to(ids.dtype)], dim=1)
        newest = token
    model.train(was_training)
    return written


# Training: chapter 08's sentence pairs packed end to end into windows


def packed_windows(split: str, length: int, seed: int = 0, bos: bool = False) -> torch.Tensor:
    """(windows, length) int64: the split's sentence pairs in a seeded order, each written
    "English <eos> French <eos>" in chapter 08's pieces, end to end, cut into windows of
    `length` (the last, shorter piece dropped); with bos, each window is <bos> and the next
    length - 1 pieces, as a language model's training samples begin. A French sentence can be
    read off the English just before it: a reason to look back far, as the sinks and windows of
    this chapter need."""
    length = validation.whole_number(length, "length", minimum=2)
    seed = validation.seed(seed)
    bos = validation.flag(bos, "bos")
    pairs = load_pairs(split)  # checks the split
    order = torch.randperm(len(pairs), generator=torch.Generator().manual_seed(seed)).tolist()
    tokenizer = load_tokenizer()
    texts = [text for i in order for text in pairs[i]]
    stream = [
        piece for encoding in tokenizer.encode_batch(texts) for piece in (*encoding.ids, EOS_ID)
    ]
    read = length - bos  # the pieces of the stream in each window
    windows = len(stream) // read
    if not windows:
        raise ValueError(
            f"length ({length:,}) must fit the {split} split's {len(stream):,} pieces at least once"
        )
    pieces = torch.tensor(stream[: windows * read], dtype=torch.long).view(windows, read)
    if bos:
        pieces = torch.cat([torch.full((windows, 1), BOS_ID), pieces], dim=1)
    return pieces


@dataclass(frozen=True)
class TodayRecipe:
    steps: int = 2000
    batch_size: int = 16  # windows per step
    learning_rate: float = 1e-3
    warmup_steps: int = 100  # then a cosine decay to 5%
    weight_decay: float = 0.01
    log_every: int = 50
    seed: int = 0

    def __post_init__(self):
        sizes = ("steps", "batch_size", "log_every")
        validation.coerce_fields(
            self,
            {
                **dict.fromkeys(sizes, validation.recipe_size),
                "warmup_steps": validation.at_least(0),
                "seed": validation.seed,
            },
        )
        learning_rate, weight_decay = validation.adamw_rates(self.learning_rate, self.weight_decay)
        object.__setattr__(self, "learning_rate", learning_rate)
        object.__setattr__(self, "weight_decay", weight_decay)


def train(
    config: TodayConfig, windows: torch.Tensor, recipe: TodayRecipe = TodayRecipe(), progress=True
) -> dict:
    """A TodayGPT trained to predict every next piece of the windows, on one thread, seeded:
    {"model", "log": {"step", "loss"}, "seconds"}."""
    config = _check_config(config)
    validation.token_ids(windows, "windows", config.vocab_size, "(windows, length)")
    if (
        windows.dtype != torch.long
        or windows.dim() != 2
        or not len(windows)
        or windows.shape[1] < 2
    ):
        raise ValueError(
            f"windows must be int64 (windows, length) with at least one window of length >= 2 "
            f"(a piece to read and the next to predict), got {windows.dtype} "
            f"{tuple(windows.shape)}"
        )
    if not isinstance(recipe, TodayRecipe):
        raise TypeError(f"recipe must be a TodayRecipe, got {type(recipe).__name__}")
    progress = validation.flag(progress, "progress")
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        torch.manual_seed(recipe.seed)
        model = TodayGPT(config)
        return _train(model, windows, recipe, progress)


def _train(model, windows, recipe, progress) -> dict:
    optimizer, schedule = _adamw_with_schedule(model, recipe)
    generator = torch.Generator().manual_seed(recipe.seed)
    log = {"step": [], "loss": [], "largest score": [], "entropy": []}
    start = time.perf_counter()
    for step in tqdm(range(1, recipe.steps + 1), desc=model.config.attention, disable=not progress):
        chosen = torch.randint(len(windows), (recipe.batch_size,), generator=generator)
        batch = windows[chosen]  # (batch, length)
        logits = model._forward(batch[:, :-1], None)  # (batch, length - 1, vocab)
        loss = F.cross_entropy(logits.transpose(1, 2), batch[:, 1:])
        _clipped_step(model, optimizer, schedule, loss)
        if step % recipe.log_every == 0 or step == recipe.steps:
            log["step"].append(step)
            log["loss"].append(loss.item())
            log["largest score"].append(_largest_score(model))
            log["entropy"].append(_mean_entropy(model))
    return {"model": model.eval(), "log": log, "seconds": time.perf_counter() - start}


def _largest_score(model: TodayGPT) -> float | None:
    """The largest |attention score| of the last pass, over every layer (None for latent
    attention, which does not keep it): the number QK-norm keeps from growing."""
    found = [getattr(block.attention, "largest_score", None) for block in model.blocks]
    return None if None in found else max(float(score) for score in found)


def _mean_entropy(model: TodayGPT) -> float:
    """The mean entropy (nats) of every attention row of the last pass, over every layer and
    head: near 0 when each query puts all its weight on one key."""
    entropies = []
    for block in model.blocks:
        weights = block.attention.attention_weights.detach()  # (B, heads, n, keys)
        entropies.append(-(weights * weights.clamp_min(1e-30).log()).sum(-1).mean())
    return float(torch.stack(entropies).mean())


@torch.no_grad()
def weight_on_first(model: TodayGPT, windows: torch.Tensor, from_position: int = 32) -> dict:
    """Where an attention sink would show: the mean weight each head puts on position 0, over
    the queries from `from_position` on, computed in float64, (layers, heads); and what a head
    spreading its weight evenly would put there, the mean of 1 / (position + 1)."""
    if not isinstance(model, TodayGPT):
        raise TypeError(f"model must be a TodayGPT, got {type(model).__name__}")
    model._check_inputs(windows, None)
    from_position = validation.whole_number(from_position, "from_position", minimum=0)
    if from_position >= windows.shape[1]:
        raise ValueError(
            f"from_position ({from_position}) must be a position of the windows, below "
            f"{windows.shape[1]}"
        )
    copy64 = copy.deepcopy(model).double().eval()
    copy64._forward(windows, None)
    first = torch.stack(
        [
            block.attention.attention_weights[:, :, from_position:, 0].mean((0, 2))
            for block in copy64.blocks
        ]
    )  # (layers, heads)
    positions = torch.arange(from_position, windows.shape[1], dtype=torch.float64)
    return {"first": first, "even": float((1 / (positions + 1)).mean())}


@torch.no_grad()
def held_out_loss(model: TodayGPT, windows: torch.Tensor, rows_per_pass: int = 16) -> float:
    """The mean next-piece loss (nats) over every position of the windows (B, L), computed in
    float64, rows_per_pass windows at a time: the same on any thread count."""
    windows = _checked_scored_windows(model, windows)
    rows_per_pass = min(validation.whole_number(rows_per_pass, "rows_per_pass"), len(windows))
    _check_pass_size(rows_per_pass, windows.shape[1], model, "rows_per_pass")
    copy64 = copy.deepcopy(model).double().eval()
    total = 0.0
    for rows in windows.split(rows_per_pass):
        logits = copy64._forward(rows[:, :-1], None)  # (rows, L - 1, vocab)
        total += float(
            F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten(), reduction="sum")
        )
    return total / (len(windows) * (windows.shape[1] - 1))


# Streaming: reading past the trained length through a sliding window


STREAM_LENGTH = 385  # three times the trained window of 128, and the piece after the last


def stream_sequences(rows: int = 8, bos: bool = False) -> torch.Tensor:
    """(rows, STREAM_LENGTH) int64: the first windows of the test split's pairs packed as
    packed_windows packs them (with bos, each begins with <bos>): held-out text three times
    longer than the models read."""
    rows = validation.whole_number(rows, "rows")
    windows = packed_windows("test", STREAM_LENGTH, bos=bos)
    if rows > len(windows):
        raise ValueError(f"rows must be at most the {len(windows)} test windows, got {rows}")
    return windows[:rows]


@torch.no_grad()
def streaming_losses(model: TodayGPT, windows: torch.Tensor, window=None, keep: int = 0) -> dict:
    """Each row of windows (B, L) read through a sliding window of `window` positions with the
    first `keep` always readable, exactly as decoding it one piece at a time through
    RollingCache(window, keep) reads it, in one masked pass, in float64:
    {"loss": (L - 1,) the mean next-piece loss at each position, "first": (layers, L) the mean
    weight the queries at each position put on position 0, over heads and rows}."""
    windows = _checked_streaming(model, windows)
    window, keep = _checked_window(window, keep)
    _check_pass_size(len(windows), windows.shape[1], model, "windows")
    return _streaming_losses(copy.deepcopy(model).double().eval(), windows, window, keep)


def _streaming_losses(model64, windows, window, keep) -> dict:
    """streaming_losses of a float64 model in eval mode that may be changed: its attention
    layers are given the window and keep."""
    for block in model64.blocks:
        block.attention.window, block.attention.keep = window, keep
    logits = model64._forward(windows, None)  # (B, L, vocab)
    losses = F.cross_entropy(
        logits[:, :-1].flatten(0, 1), windows[:, 1:].flatten(), reduction="none"
    ).view(len(windows), -1)  # (B, L - 1)
    first = torch.stack(
        [block.attention.attention_weights[..., 0].mean((0, 1)) for block in model64.blocks]
    )  # (layers, L)
    return {"loss": losses.mean(0), "first": first}


@torch.no_grad()
def recomputed_losses(
    model: TodayGPT, windows: torch.Tensor, window: int, positions: torch.Tensor, keep: int = 0
) -> torch.Tensor:
    """(len(positions),) float64: the mean loss of predicting piece t + 1 from a fresh pass over
    the first `keep` pieces and the `window` pieces up to t, for each t of positions
    (StreamingLLM's sliding window with re-computation: every piece costs a whole pass)."""
    windows = _checked_streaming(model, windows)
    window, keep = _checked_window(window, keep)
    positions = _checked_recomputed_positions(positions, window, keep, windows.shape[1])
    _check_pass_size(len(positions) * len(windows), keep + window, model, "positions", 1)
    copy64 = copy.deepcopy(model).double().eval()
    for block in copy64.blocks:  # each span is read whole, whatever window the model has
        block.attention.window, block.attention.keep = None, 0
    spans = torch.stack(
        [
            torch.cat([windows[:, :keep], windows[:, t - window + 1 : t + 1]], dim=1)
            for t in positions
        ]
    )  # (P, B, keep + window)
    x = copy64.tokens(spans.flatten(0, 1))  # (P * B, keep + window, d_model)
    pads = torch.zeros(len(x), dtype=torch.long)
    for block in copy64.blocks:
        x = block(x, None, pads)
    logits = copy64.output(copy64.norm(x[:, -1]))  # (P * B, vocab): the last piece's guess
    targets = windows[:, positions + 1].T.flatten()  # (P * B,)
    return F.cross_entropy(logits, targets, reduction="none").view(len(positions), -1).mean(1)


# The saved models: `make todays-models` trains them (each on one thread, seeded: a rerun on the
# same machine writes the same file)

WINDOW_LENGTH = 129  # 128 pieces read, each next one predicted
VARIANTS = {  # each a TodayConfig's fields (the configs are checked when the models are made)
    "multi-head": {},
    # 64 and 40 more feed-forward units give the parameters of multi-head attention (+0.01%)
    "grouped-query": {"attention": "grouped-query", "num_kv_heads": 2, "d_ff": 576},
    "latent": {"attention": "latent", "d_ff": 552},
}
SINK_VARIANTS = {  # trained on windows that begin with <bos>, where a sink may form
    "softmax": {},  # multi-head attention with a plain softmax
    "sink": {"sink": True},  # a learned sink logit per head
}
RECIPE = TodayRecipe()
QK_NORM_WINDOW_LENGTH = 65
QK_NORM_VARIANTS = {  # small, so that both runs take minutes
    "plain": {"d_model": 64, "num_layers": 2, "d_ff": 256},
    "qk-norm": {"d_model": 64, "num_layers": 2, "d_ff": 256, "qk_norm": True},
}
QK_NORM_RECIPE = TodayRecipe(steps=300, learning_rate=3e-2, log_every=10)
SAVED_MODELS = DATA_DIR / "todays_models.pt"
SAVED_SINKS = DATA_DIR / "todays_sink_models.pt"
SAVED_QK_NORM = DATA_DIR / "todays_qk_norm.pt"
REMAKE = "make todays-models"
SAVED_KEYS = ("configs", "recipe", "window_length", "bos", "weights", "logs")
TIED_COPY = "output.weight"  # the same matrix as tokens.weight, stored once


def train_variants(
    variants: dict, recipe: TodayRecipe, window_length: int, bos: bool = False, progress=True
) -> dict:
    """Each TodayConfig of `variants` ({name: its fields}) trained with the recipe on the
    training split's windows: {name: train()'s result}."""
    windows = packed_windows("train", window_length, bos=bos)
    return {
        name: train(TodayConfig(**fields), windows, recipe, progress)
        for name, fields in variants.items()
    }


def save_variants(
    path: str | Path, results: dict, recipe: TodayRecipe, window_length: int, bos: bool = False
):
    """The trained models in one checksummed file: float16 weights (the tied output matrix
    once), their configs, the recipe, the window length and the training logs."""
    path = savable_path(path)
    results = _checked_results(results)
    if not isinstance(recipe, TodayRecipe):
        raise TypeError(f"recipe must be a TodayRecipe, got {type(recipe).__name__}")
    window_length = validation.whole_number(window_length, "window_length", minimum=2)
    bos = validation.flag(bos, "bos")
    save_checkpoint(
        path,
        {
            "configs": {name: asdict(result["model"].config) for name, result in results.items()},
            "recipe": asdict(recipe),
            "window_length": window_length,
            "bos": bos,
            "weights": {
                name: {k: t.half() for k, t in r["model"].state_dict().items() if k != TIED_COPY}
                for name, r in results.items()
            },
            "logs": {
                name: {k: v for k, v in r["log"].items() if None not in v}
                for name, r in results.items()
            },
        },
    )


def load_variants(path: str | Path = SAVED_MODELS) -> dict:
    """Saved models (checksum verified, weights_only=True), in eval mode and float32:
    {"models": {name: TodayGPT}, "logs": {name: {"step", "loss", ...}}, "recipe",
    "window_length", "bos"}."""
    saved = load_checkpoint(path, SAVED_KEYS, REMAKE)
    path = as_path(path)
    try:
        configs = _saved_configs(saved["configs"])
        loaded = {
            "recipe": TodayRecipe(**saved["recipe"]),
            "window_length": validation.whole_number(
                saved["window_length"], "window_length", minimum=2
            ),
            "bos": validation.flag(saved["bos"], "bos"),
            "logs": {name: _saved_log(saved["logs"][name]) for name in configs},
            "models": {},
        }
        for name, config in configs.items():
            weights = float_weights(saved["weights"][name], path)
            weights[TIED_COPY] = weights["tokens.weight"]
            with keeping_random_state(), trainable_float32():
                model = TodayGPT(config)
            load_weights(model, weights, path)
            loaded["models"][name] = model.eval()
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CheckpointError(
            f"{path} does not hold what `{REMAKE}` writes ({type(error).__name__}: "
            f"{str(error)[:200]}): rebuild it with `{REMAKE}`"
        ) from None
    return loaded


def _saved_configs(configs: object) -> dict[str, TodayConfig]:
    """The saved configs, each a model a 16 MB file can hold, counted before any is built."""
    if not isinstance(configs, dict) or not configs:
        raise ValueError("its configs should be {name: a TodayConfig's fields}, at least one")
    checked = {}
    for name, fields in configs.items():
        config = TodayConfig(**fields)
        with torch.device("meta"):
            one, two = (
                sum(p.numel() for p in TodayGPT(replace(config, num_layers=n)).parameters())
                for n in (1, 2)
            )
        count = one + (config.num_layers - 1) * (two - one)
        if count > MAX_CHECKPOINT_PARAMETERS:
            raise ValueError(
                f"config {name!r} asks for {count:,} parameters, more than a file of at most 16 "
                f"MB in float16 holds ({MAX_CHECKPOINT_PARAMETERS:,})"
            )
        checked[name] = config
    return checked


def _saved_log(log: object) -> dict:
    if not isinstance(log, dict) or "step" not in log or "loss" not in log:
        raise ValueError("a training log should be {'step': [...], 'loss': [...], ...}")
    steps = log["step"]
    for key, values in log.items():
        if not isinstance(values, list) or len(values) != len(steps):
            raise ValueError(f"a training log's {key!r} should be a list as long as its steps")
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            raise ValueError(f"a training log's {key!r} should hold numbers")
    return log


def main() -> None:
    """python -m helpers.todays_models: retrain chapter 16's models into data/."""
    parser = argparse.ArgumentParser(description="Retrain chapter 16's models into data/.")
    parser.add_argument(
        "stage",
        choices=["variants", "sinks", "qk-norm"],
        help="variants: multi-head, grouped-query and latent models of one size on windows of "
        "128 pieces; sinks: multi-head models with and without a sink logit, on windows that "
        "begin with <bos>; qk-norm: two small models at a high learning rate, with and without "
        "QK-norm",
    )
    stage = parser.parse_args().stage
    if stage == "variants":
        results = train_variants(VARIANTS, RECIPE, WINDOW_LENGTH)
        save_variants(SAVED_MODELS, results, RECIPE, WINDOW_LENGTH)
    elif stage == "sinks":
        results = train_variants(SINK_VARIANTS, RECIPE, WINDOW_LENGTH, bos=True)
        save_variants(SAVED_SINKS, results, RECIPE, WINDOW_LENGTH, bos=True)
    else:
        results = train_variants(QK_NORM_VARIANTS, QK_NORM_RECIPE, QK_NORM_WINDOW_LENGTH)
        save_variants(SAVED_QK_NORM, results, QK_NORM_RECIPE, QK_NORM_WINDOW_LENGTH)
    print({name: f"{result['seconds']:.0f} s" for name, result in results.items()})


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _checked_prompt_pads(pads: object, ids: torch.Tensor) -> torch.Tensor | None:
    if pads is None:
        return None
    validation.dense_tensor(pads, "pads", "(B,)")
    if pads.shape != (ids.shape[0],) or pads.is_floating_point() or pads.dtype == torch.bool:
        raise ValueError(
            f"pads must be (B,) = ({ids.shape[0]},) integers, got {pads.dtype} {tuple(pads.shape)}"
        )
    if (pads < 0).any() or (pads >= ids.shape[1]).any():
        raise ValueError(
            f"pads must leave each prompt at least one token: 0 <= pads < {ids.shape[1]}, got "
            f"{pads.tolist()}"
        )
    return pads.long()


def _check_config(config: object) -> TodayConfig:
    if not isinstance(config, TodayConfig):
        raise TypeError(f"config must be a TodayConfig, got {type(config).__name__}")
    if config.attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, got {config.attention!r}")
    for name in (
        "vocab_size",
        "d_model",
        "num_heads",
        "d_ff",
        "num_kv_heads",
        "d_latent",
        "d_rope",
    ):
        object.__setattr__(config, name, validation.whole_number(getattr(config, name), name))
    object.__setattr__(
        config, "num_layers", validation.layer_count(config.num_layers, "num_layers")
    )
    for name in ("qk_norm", "sink", "absorbed"):
        object.__setattr__(config, name, validation.flag(getattr(config, name), name))
    validation.layer_weights(config.d_model, config.d_ff, "d_model x d_ff")
    if config.absorbed and config.attention != "latent":
        raise ValueError("absorbed is a form of latent attention: attention='latent'")
    if config.attention == "latent" and (
        config.qk_norm or config.sink or config.window is not None or config.keep
    ):
        raise ValueError(
            "qk_norm, sink, window and keep are options of the multi-head and grouped-query "
            "attention here, not of latent attention"
        )
    if config.vocab_size * config.d_model > validation.MOST_LAYER_WEIGHTS:
        raise ValueError(
            f"vocab_size x d_model = {config.vocab_size * config.d_model:,} weights in one "
            f"layer: more than {validation.MOST_LAYER_WEIGHTS:,}"
        )
    return config


def _checked_streaming(model: object, windows: object) -> torch.Tensor:
    windows = _checked_scored_windows(model, windows)
    if model.config.attention == "latent":
        raise ValueError(
            "a sliding window is an option of multi-head and grouped-query attention here, not "
            "of latent attention"
        )
    return windows


def _checked_scored_windows(model: object, windows: object) -> torch.Tensor:
    """The windows as int64, after the model's weights and the windows are checked."""
    if not isinstance(model, TodayGPT):
        raise TypeError(f"model must be a TodayGPT, got {type(model).__name__}")
    validation.weights_readable(model, "model")
    model._check_inputs(windows, None)
    if windows.dim() != 2 or windows.shape[1] < 2:
        raise ValueError(
            f"windows must hold at least 2 pieces (one to read, the next to predict), got "
            f"{tuple(windows.shape)}"
        )
    return windows.long()


MOST_PASS_NUMBERS = 2**27  # float64 logits or scores of one pass: 1 GiB


def _check_pass_size(
    rows: int, length: int, model: TodayGPT, name: str, guesses_per_row: int | None = None
) -> None:
    """One float64 pass of rows x length pieces (guesses_per_row: the positions whose logits
    are made, default all): its logits and every layer's attention weights fit."""
    config = model.config
    logits = rows * (length if guesses_per_row is None else guesses_per_row) * config.vocab_size
    scores = rows * config.num_heads * length * length * config.num_layers  # every layer's kept
    if max(logits, scores) > MOST_PASS_NUMBERS:
        raise ValueError(
            f"{name}: a pass of {rows:,} rows of {length:,} pieces would hold {logits:,} float64 "
            f"logits and {scores:,} attention weights, more than {MOST_PASS_NUMBERS:,} (1 GiB): "
            f"read fewer or shorter rows at a time"
        )


def _checked_recomputed_positions(
    positions: object, window: int | None, keep: int, length: int
) -> torch.Tensor:
    if window is None:
        raise ValueError("window must be a whole number of pieces to recompute over, got None")
    validation.dense_tensor(positions, "positions", "(P,)")
    if (
        positions.dim() != 1
        or positions.is_floating_point()
        or positions.is_complex()
        or positions.dtype == torch.bool
    ):
        raise ValueError(
            f"positions must be (P,) integers, got {positions.dtype} {tuple(positions.shape)}"
        )
    first = keep + window - 1  # a full window after the kept pieces
    if not len(positions) or (positions < first).any() or (positions > length - 2).any():
        raise ValueError(
            f"positions must be at least one position from keep + window - 1 = {first} (a full "
            f"window to read) to {length - 2} (a next piece to predict), got "
            f"{validation.shown(positions.tolist())}"
        )
    return positions.long()


def _checked_results(results: object) -> dict:
    if not isinstance(results, dict) or not results:
        raise TypeError(
            f"results must be a dict {{name: {{'model': TodayGPT, 'log': {{...}}}}}} with at "
            f"least one model (train_variants' result), got {validation.shown(results)}"
        )
    for name, result in results.items():
        if not isinstance(name, str):
            raise TypeError(f"results' names must be str, got {validation.shown(name)}")
        if not isinstance(result, dict) or not isinstance(result.get("model"), TodayGPT):
            raise TypeError(f"results[{name!r}] must be a dict with a TodayGPT as 'model'")
        validation.weights_readable(result["model"], f"results[{name!r}]['model']")
        log = result.get("log")
        if not isinstance(log, dict) or not all(isinstance(v, list) for v in log.values()):
            raise TypeError(f"results[{name!r}]['log'] must be a dict of lists (train's log)")
        _saved_log({key: values for key, values in log.items() if None not in values})
    return results


if __name__ == "__main__":
    main()
