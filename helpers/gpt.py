"""A decoder-only Transformer (GPT): one causal stack instead of an encoder and a decoder.

Read top to bottom: the configuration, one pre-norm block (causal self-attention, then the
feed-forward network, each inside a residual connection), the model (token embeddings and
positions, learned by default, the blocks, a last LayerNorm, an output layer tied to the token
embedding), and generate(): greedy decoding or sampling with temperature, top-k and top-p,
with or without the key/value cache.
"""

import copy
import math
import weakref
import zlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validation
from helpers.attention import KeyValueCache, MultiHeadAttention
from helpers.contexts import evaluating
from helpers.masks import causal_mask
from helpers.positional import sinusoidal_encoding
from helpers.transformer import PositionWiseFFN, Residual

LARGEST_MODEL = 2**30  # parameters (4 GiB of float32); this series' largest GPT has 7.6 M
LARGEST_TENSOR = 2**31  # numbers in one tensor a helper builds outside a forward pass (8 GiB)
# numbers in a forward pass's largest tensor (1 GiB of float32): the pass holds several of that
# size at once (the attention scores and weights, the feed-forward's input and hidden layer)
LARGEST_ACTIVATION = 2**28
# float64 (rows, vocab_size) tensors one sampling step holds at once: the logits, their scores,
# the probabilities, and top-p's sorted copy, its order, running sums, the mass before each token
# and what is kept (measured: about 60 bytes a row and token); together they get the bytes of one
# forward tensor, LARGEST_ACTIVATION float32 numbers (1 GiB)
SAMPLING_COPIES = 8
POSITIONS = ("learned", "sinusoidal", "rope")


@dataclass(frozen=True)
class GPTConfig:
    """The sizes of a GPT. Build a variant with dataclasses.replace(config, num_layers=1)."""

    vocab_size: int
    context_length: int  # the most positions the model reads: its position table's size
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int
    dropout: float = 0.0  # small models on small data; training recipes set their own
    attention_only: bool = False  # True drops every feed-forward block (chapter 13's circuits)
    # How a position reaches attention (chapters 05 and 11): "learned", a trained table added
    # to the token embeddings (GPT-2's); "sinusoidal", the fixed sines and cosines added
    # instead; "rope", every head's queries and keys turned by their position, nothing added.
    position: str = "learned"

    def __post_init__(self):
        sizes = ("vocab_size", "context_length", "d_model", "num_heads", "num_layers", "d_ff")
        validation.coerce_fields(self, dict.fromkeys(sizes, validation.whole_number))
        validation.head_size(self.d_model, self.num_heads)
        validation.coerce_fields(
            self, {"dropout": validation.probability, "attention_only": validation.flag}
        )
        validation.coerce_fields(self, {"position": validation.one_of(POSITIONS)})
        if self.position == "rope" and (self.d_model // self.num_heads) % 2:
            raise ValueError(
                f"rope turns pairs of dimensions: each head's size, d_model / num_heads = "
                f"{self.d_model // self.num_heads}, must be even"
            )
        if self.position == "sinusoidal" and self.d_model % 2:
            raise ValueError(
                f"sinusoidal positions come in sin/cos pairs: d_model must be even, got "
                f"{self.d_model}"
            )
        if self.build_count() > LARGEST_MODEL:
            sizes = ", ".join(
                f"{name}={shown_count(getattr(self, name))}"
                for name in ("vocab_size", "context_length", "d_model", "d_ff", "num_layers")
            )
            table = self.sinusoid_count()
            table = (
                f" and a sinusoid table of {shown_count(table)} numbers (each counted as 4: it "
                f"is built in float64)"
                if table
                else ""
            )
            raise ValueError(
                f"this config asks for {shown_count(self.parameter_count())} parameters{table}, "
                f"more than {LARGEST_MODEL:,} ({LARGEST_MODEL * 4 // 2**30} GiB of float32): a "
                f"size is mistyped ({sizes})"
            )
        validation.layer_count(self.num_layers, "num_layers")

    def parameter_count(self) -> int:
        """The parameters GPT(self) holds, counted before any is made (the output layer is
        the token embedding: counted once)."""
        d = self.d_model
        attention = 4 * (d * d + d) + 2 * d  # W_q, W_k, W_v, W_o with biases; a LayerNorm
        ffn = 0 if self.attention_only else 2 * d * self.d_ff + self.d_ff + d + 2 * d
        tables = (self.vocab_size + (self.position == "learned") * self.context_length) * d
        return tables + self.num_layers * (attention + ffn) + 2 * d  # and the last LayerNorm

    def sinusoid_count(self) -> int:
        """The numbers of GPT(self)'s fixed sinusoid table (position "sinusoidal"), which is
        no parameter: context_length x d_model, or 0."""
        return (self.position == "sinusoidal") * self.context_length * self.d_model

    def build_count(self) -> int:
        """The memory GPT(self) takes while it is built, in float32 numbers: its parameters,
        and its sinusoid table four times, for it is built in float64 (its angles, itself,
        then its float32 copy: 16 bytes a number while it is made)."""
        return self.parameter_count() + 4 * self.sinusoid_count()


class GPTBlock(nn.Module):
    """Causal self-attention, then (unless attention_only) the feed-forward network, each
    inside a pre-norm residual connection."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = check_config(config)
        self.attention = MultiHeadAttention(
            config.d_model, config.num_heads, config.dropout, rope=config.position == "rope"
        )
        self.attention_residual = Residual(config.d_model, config.dropout, norm_first=True)
        self.ffn = None
        if not config.attention_only:
            self.ffn = PositionWiseFFN(config.d_model, config.d_ff, config.dropout)
            self.ffn_residual = Residual(config.d_model, config.dropout, norm_first=True)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None,
        cache: KeyValueCache | None = None,
        check_input: bool = True,
    ) -> torch.Tensor:
        """x (B, n, d_model); mask (n, cached + n) or None for one new position after a cache.
        check_input False: x is what GPT's own pass made from ids it checked (GPT checks the
        logits instead); True: x is checked, and an output of NaN or inf is refused, the cache
        left as it was."""
        if not validation.flag(check_input, "check_input"):
            return self._pass(x, mask, cache)
        self._check_input(x, mask, cache)
        held = (cache.keys, cache.values) if isinstance(cache, KeyValueCache) else None
        weights = self.attention.attention.attention_weights
        y = self._pass(x, mask, cache)
        if not y.isfinite().all():
            self.attention.attention.attention_weights = weights
            if held is not None:
                cache.keys, cache.values = held
            raise ValueError(f"the block turned a finite x into NaN or inf: {self._overflow(x)}")
        return y

    def _pass(self, x: torch.Tensor, mask, cache) -> torch.Tensor:
        x = self.attention_residual(x, lambda h: self.attention(h, h, h, mask=mask, cache=cache))
        return x if self.ffn is None else self.ffn_residual(x, self.ffn)

    def _overflow(self, x: torch.Tensor) -> str:
        """Why a pass of finite x made NaN or inf: a weight that holds them, or else numbers
        too large for x's dtype."""
        weights = self.state_dict()
        for name, weight in weights.items():
            if not weight.isfinite().all():
                return f"its weight {name} holds NaN or inf"
        largest = max(weight.abs().max().item() for weight in weights.values())
        return (
            f"x's numbers reach {x.abs().max().item():.3g}, too large for {x.dtype}: the "
            f"block's LayerNorms square them (finite below about "
            f"{math.sqrt(torch.finfo(x.dtype).max):.3g} only) and its weights (up to "
            f"{largest:.3g}) multiply them"
        )

    def _check_input(self, x: object, mask: object, cache: object) -> None:
        """x: (B, n, d_model), B and n >= 1, in the block's dtype on its device (under autocast
        too: its attention takes its weights' dtype), every number finite, small enough for
        one pass (check_forward_size)."""
        weight = self.attention_residual.norm.weight
        expected = (
            f"(B, n, d_model) = (B, n, {self.config.d_model}), B and n >= 1, {weight.dtype} on "
            f"{weight.device} as the block's weights"
        )
        validation.dense_tensor(x, "x", expected)
        if (
            x.dim() != 3
            or x.shape[-1] != self.config.d_model
            or not x.shape[0]
            or not x.shape[1]
            or x.dtype != weight.dtype
            or x.device != weight.device
        ):
            raise ValueError(f"x must be {expected}, got {x.dtype} {tuple(x.shape)} on {x.device}")
        cached = len(cache) if isinstance(cache, KeyValueCache) else 0
        check_forward_size(self.config, x.shape[0], x.shape[1], cached + x.shape[1], "x")
        if not x.isfinite().all():
            raise ValueError(
                "x holds NaN or inf: the residual stream a block reads is finite (attention "
                "would spread a NaN to every later position)"
            )
        if mask is None and x.shape[1] > 1:
            raise ValueError(
                f"mask is None for {x.shape[1]} positions: with no mask every position would "
                f"read the ones after it, and the block is causal; pass an (n, cached + n) "
                f"boolean mask, causal_mask({x.shape[1]}) without a cache. None is for a single "
                f"new position only"
            )


class GPT(nn.Module):
    """forward(ids (B, T)) -> logits (B, T, vocab_size); position t sees positions 0..t only."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = check_config(config)
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = None  # "rope": the blocks turn queries and keys instead
        if config.position == "learned":
            self.positions = nn.Embedding(config.context_length, config.d_model)
        for table in (self.tokens, self.positions):
            if table is not None:
                nn.init.normal_(table.weight, std=0.02)  # GPT-2's initialisation
        if config.position == "sinusoidal":  # fixed: not a weight, and not saved with them
            sinusoids = sinusoidal_encoding(config.context_length, config.d_model)
            self.register_buffer("sinusoids", sinusoids, persistent=False)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(GPTBlock(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.output.weight = self.tokens.weight  # tied: one matrix reads and writes tokens

    def check_ids(self, ids: object, start: int = 0, name: str = "ids") -> torch.Tensor:
        """ids (B, T) of the vocabulary, T >= 1, that fit in the context after `start`, in
        tensors of at most LARGEST_TENSOR numbers; name: what the caller calls them."""
        check_ids_name(name)
        start = validation.whole_number(start, "start (positions already cached)", minimum=0)
        if validation.dense_tensor(ids, name, "(B, T)").dim() == 2:  # sized before it is read
            context = self.config.context_length
            if start + ids.shape[1] > context and start:
                raise ValueError(
                    f"{name}: the caches hold {shown_count(start)} positions already, and "
                    f"{shown_count(start + ids.shape[1])} positions do not fit in the context "
                    f"of {context}: "
                    f"a cache cannot drop its oldest positions, so start again from new caches "
                    f"with the last {context} tokens at most"
                )
            if start + ids.shape[1] > context:
                raise ValueError(
                    f"{name}: {shown_count(ids.shape[1])} positions do not fit in the context of "
                    f"{context}: keep the last {context}"
                )
            check_forward_size(self.config, ids.shape[0], ids.shape[1], start + ids.shape[1], name)
        validation.token_ids(ids, name, self.config.vocab_size, "(B, T)")
        if ids.shape[1] == 0 or ids.shape[0] == 0:
            raise ValueError(f"{name} must hold at least one token, got shape {tuple(ids.shape)}")
        if ids.device != self.tokens.weight.device:
            raise ValueError(
                f"{name} are on {ids.device} but the model is on {self.tokens.weight.device}"
            )
        return ids

    def forward(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """With caches (one KeyValueCache per layer), ids are the newest positions only: they
        attend to every cached position as well, and the caches grow by T (a pass refused for
        its logits leaves them as they were)."""
        start = self._check_pass(ids, caches)
        held = [] if caches is None else [(cache.keys, cache.values) for cache in caches]
        maps = [block.attention.attention.attention_weights for block in self.blocks]
        logits = self.output(self._features(ids, caches, start))  # (B, T, vocab_size)
        try:
            self._refuse_nonfinite(logits, caches, start)
        except ValueError:  # a refused pass leaves the caches and the maps as they were
            for cache, (keys, values) in zip(caches or (), held, strict=True):
                cache.keys, cache.values = keys, values
            for block, weights in zip(self.blocks, maps, strict=True):
                block.attention.attention.attention_weights = weights
            raise
        return logits

    def check_finite_logits(
        self, logits: torch.Tensor, caches: list | None = None, cached: int = 0
    ) -> None:
        """Refuse logits this model made that hold NaN or +inf, naming what made them: a
        weight, one of the caches' `cached` positions held before the pass, or weights too
        large for the logits' dtype. caches: the ones the pass read, which it grew past
        `cached`."""
        if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
            found = (
                f"a {logits.dtype} tensor {tuple(logits.shape)}"
                if isinstance(logits, torch.Tensor)
                else validation.shown(logits)
            )
            raise TypeError(f"logits must be a floating-point tensor, got {found}")
        validation.dense_tensor(logits, "logits", "(..., vocab_size)")
        if logits.dim() < 2 or logits.shape[-1] != self.config.vocab_size:
            raise ValueError(
                f"logits must be (..., vocab_size) = (..., {self.config.vocab_size}), at least "
                f"2-D, got shape {tuple(logits.shape)}: were they made by another model?"
            )
        if caches is not None and not isinstance(caches, list | tuple):
            raise TypeError(
                f"caches must be the list of caches the pass read, or None, got "
                f"{validation.shown(caches)}"
            )
        cached = validation.whole_number(cached, "cached", minimum=0)
        held = 0 if caches is None else self._check_caches(caches)[0]
        if cached > held:
            now = "no caches were given" if caches is None else f"the caches hold {held} now"
            raise ValueError(
                f"cached ({cached}) counts the positions the caches held before the pass, but "
                f"{now}: a pass only adds to them"
            )
        self._refuse_nonfinite(logits, caches, cached)

    def _refuse_nonfinite(self, logits: torch.Tensor, caches: list | None, cached: int) -> None:
        if logits.isnan().any() or logits.isposinf().any():
            if caches is None:
                raise ValueError(f"logits hold NaN or +inf: {_culprit(self, logits.dtype)}")
            culprit = _culprit(self, logits.dtype, caches, cached)
            raise ValueError(f"logits hold NaN or +inf after a pass with caches: {culprit}")

    def features(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """What the output layer reads: (B, T, d_model), after the last LayerNorm. A training
        loop that scores only some positions turns only those into logits (and checks them
        with check_finite_logits)."""
        return self._features(ids, caches, self._check_pass(ids, caches))

    def _check_pass(self, ids: object, caches: object) -> int:
        """The positions the caches hold, after checking ids and caches for one pass."""
        start, cached_rows = (0, None) if caches is None else self._check_caches(caches)
        self.check_ids(ids, start)
        if cached_rows not in (None, ids.shape[0]):
            raise ValueError(
                f"the caches hold {cached_rows} rows but ids has {ids.shape[0]}: keep feeding "
                f"the rows the caches were filled with (a new batch needs model.new_caches())"
            )
        for cache in caches or ():
            cache.filled_by = weakref.ref(self)  # this pass fills them
        return start

    def _features(self, ids: torch.Tensor, caches: list | None, start: int) -> torch.Tensor:
        steps = ids.shape[1]
        where = torch.arange(start, start + steps, device=ids.device)  # (T,)
        x = self.tokens(ids)  # (B, T, d_model)
        if self.config.position == "learned":
            x = x + self.positions(where)
        if self.config.position == "sinusoidal":
            x = x + self.sinusoids[where]
        x = self.dropout(x)
        mask = causal_mask(start + steps, ids.device)[start:]  # (T, start + T)
        if steps == 1:
            mask = None  # one new position may read every position so far
        for layer, block in enumerate(self.blocks):  # x is made from ids check_ids checked
            x = block(x, mask, None if caches is None else caches[layer], check_input=False)
        return self.norm(x)

    def new_caches(self) -> list[KeyValueCache]:
        """One empty KeyValueCache per layer, this model's: another model refuses them and
        their copies (cache.filled_by, a weak reference to the model, which copies keep)."""
        caches = [KeyValueCache() for _ in self.blocks]
        for cache in caches:
            cache.filled_by = weakref.ref(self)
        return caches

    def _check_caches(self, caches: object) -> tuple[int, int | None]:
        """(positions cached, rows cached or None when empty), after checking that the caches
        are one KeyValueCache per layer, each its own, made or filled by this model (or by no
        model yet), that together hold the same positions of the same rows, as this model's
        layers compute them."""
        if (
            not isinstance(caches, list | tuple)
            or len(caches) != len(self.blocks)
            or not all(isinstance(cache, KeyValueCache) for cache in caches)
        ):
            raise ValueError(
                f"caches must be a list of {len(self.blocks)} KeyValueCache, one per layer "
                f"(model.new_caches()), got {_kinds_of(caches)}"
            )
        if len({id(cache) for cache in caches}) < len(caches):
            raise ValueError(
                "caches must be a new KeyValueCache for each layer, but one cache object "
                "serves several layers ([KeyValueCache()] * n repeats one object): every "
                "layer would append its keys to it; use model.new_caches()"
            )
        shapes = [cache.held_shape(f"caches[{layer}]") for layer, cache in enumerate(caches)]
        if len(set(shapes)) > 1:
            held = ", ".join(
                f"layer {i}: {'empty' if s is None else s}" for i, s in enumerate(shapes)
            )
            raise ValueError(
                f"every layer's cache must hold the same positions of the same rows, got "
                f"{held[:300]}: caches from one model's passes, none emptied or cut"
            )
        if shapes[0] is not None:
            self._check_cache_layout(caches[0], shapes[0])
        for layer, cache in enumerate(caches):
            made_by = getattr(cache, "filled_by", None)
            if made_by is not None and not (
                isinstance(made_by, weakref.ReferenceType) and made_by() is self
            ):
                raise ValueError(
                    f"caches[{layer}] was made or filled by another model (another GPT of these "
                    f"sizes fills caches of the same shape with its own keys and values): use "
                    f"this model's model.new_caches()"
                )
        return (0, None) if shapes[0] is None else (shapes[0][2], shapes[0][0])

    def _check_cache_layout(self, cache: KeyValueCache, shape: tuple) -> None:
        """A cache's keys (held, of this shape) as this model's layers make them: their heads
        and head size, dtype (autocast's, under autocast) and device."""
        weight = self.tokens.weight
        device = weight.device.type
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
        dtype = dtype or weight.dtype
        attention = self.blocks[0].attention
        expected = (attention.num_kv_heads, self.config.d_model // self.config.num_heads)
        held = cache.keys
        if (shape[1], shape[3]) != expected or (held.dtype, held.device) != (
            dtype,
            weight.device,
        ):
            autocast = (
                " (or filled under another torch.autocast setting than this pass's: read the "
                "prompt and generate under the same one)"
                if (shape[1], shape[3]) == expected
                and held.device == weight.device
                and weight.dtype in (held.dtype, dtype)
                else ""
            )
            raise ValueError(
                f"the caches hold keys {shape}, {held.dtype} on {held.device}; this model's "
                f"layers make (B, {expected[0]}, positions, {expected[1]}), {dtype} on "
                f"{weight.device}: caches of another model, or filled before a .to(){autocast}"
            )

    def attention_maps(self) -> list[torch.Tensor | None]:
        """Each layer's attention weights in the last forward pass: (B, heads, T, cached + T)."""
        return [block.attention.attention_weights for block in self.blocks]


def _culprit(model: GPT, dtype: torch.dtype, caches: list | tuple = (), before: int = 0) -> str:
    """What made a forward pass write NaN or +inf logits: a weight that holds such numbers
    (named first: its layer puts them in the caches too), or else the first cache whose
    `before` positions, held before the pass, hold them (keys or values no layer of finite
    weights makes) or numbers too large for their dtype, or else weights too large for it."""
    weights = model.state_dict()
    for name, weight in weights.items():
        if weight.is_floating_point() and not weight.isfinite().all():
            return f"the model's weights make them ({name} holds NaN or inf)"
    for layer, cache in enumerate(caches):
        for part in ("keys", "values"):
            if not getattr(cache, part)[:, :, :before].isfinite().all():
                return (
                    f"caches[{layer}].{part} hold NaN or inf, which no layer makes: caches are "
                    f"filled by this model's passes only (model.new_caches())"
                )
    for layer, cache in enumerate(caches):
        for part in ("keys", "values"):
            numbers = getattr(cache, part)[:, :, :before]
            limit = math.sqrt(torch.finfo(numbers.dtype).max)
            if numbers.numel() and numbers.abs().max() > limit:
                return (
                    f"caches[{layer}].{part} reach {numbers.abs().max().item():.3g}, too large "
                    f"for {numbers.dtype}: attention passes them on to the residual stream, whose "
                    f"LayerNorms square them (finite below about {limit:.3g} only): caches are "
                    f"filled by this model's passes only (model.new_caches())"
                )
    held = "the caches held only finite numbers: " if caches else ""
    name, weight = max(weights.items(), key=lambda item: item[1].abs().max().item())
    if weight.abs().max() <= 1:
        return (
            f"{held}the model's weights are finite and small (at most "
            f"{weight.abs().max().item():.3g}, in {name}), so its own passes make finite logits "
            f"in {dtype}: were these logits made by another model or changed after the pass?"
        )
    return (
        f"{held}the model's weights make them: the logits overflow to inf or NaN in {dtype}, "
        f"the weights being too large for it (up to {weight.abs().max().item():.3g}, in {name})"
    )


def next_token_probabilities(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p=None
) -> torch.Tensor:
    """logits (B, V) -> the distribution one token is drawn from (B, V): logits / temperature,
    only the top_k largest kept, then only the smallest set of most likely tokens whose
    probability reaches top_p (the most likely token always stays)."""
    check_logits(logits)
    temperature, top_k, top_p = checked_sampling(temperature, top_k, top_p, logits.shape[1])
    _check_sampled_rows(logits.shape[0], logits.shape[1], "logits")
    if temperature == 0:
        raise ValueError("temperature 0 is greedy decoding: take logits.argmax(-1) instead")
    return _distribution(logits, temperature, top_k, top_p)


def _distribution(logits: torch.Tensor, temperature: float, top_k, top_p) -> torch.Tensor:
    """next_token_probabilities' computation, for arguments checked already (generate checks
    its settings and sampling size once, at its door, and each step's logits only)."""
    dtype = logits.dtype
    logits = logits.double()
    largest = logits.amax(-1, keepdim=True)
    scores = (logits - largest) / temperature  # (B, V), <= 0
    overflowed = scores.isneginf() & logits.isfinite()  # 1e308 - (-1e308): taken in halves
    if overflowed.any():
        halves = (logits / 2 - largest / 2) / temperature * 2
        scores = torch.where(overflowed, halves, scores)
    if top_k is not None:  # exactly k, ties broken by torch.topk
        best = scores.topk(top_k, dim=-1).indices  # (B, k)
        kept = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, best, True)
        scores = scores.masked_fill(~kept, float("-inf"))
    probabilities = scores.softmax(-1)
    if top_p is not None and top_p < 1:  # (top_p = 1 keeps every token)
        probabilities = probabilities.masked_fill(~_nucleus(probabilities, top_p), 0.0)
        probabilities = probabilities / probabilities.sum(-1, keepdim=True)
    return probabilities.to(dtype)


def _nucleus(probabilities: torch.Tensor, top_p: float) -> torch.Tensor:
    """(B, V) bool: the tokens kept while the probability of the more likely tokens before
    them, in torch.sort's descending order, is below top_p. Only the most likely tokens are
    put in order, as many as the nucleus needs (sorting all V takes twenty times as long),
    and all of them where tokens of one probability straddle its edge: there the order
    decides which of them stays."""
    vocabulary, candidates = probabilities.shape[-1], min(64, probabilities.shape[-1])
    while True:
        if candidates == vocabulary:
            ordered, order = probabilities.sort(dim=-1, descending=True)  # (B, V)
        else:
            ordered, order = probabilities.topk(candidates, dim=-1)  # the largest, in order
        before = ordered.cumsum(-1) - ordered  # the mass of the more likely tokens
        kept = before < top_p  # (B, candidates)
        size = kept.sum(-1, keepdim=True)  # (B, 1): at least the most likely token
        if candidates == vocabulary:
            break
        if (size < candidates).all() and torch.equal(kept, kept.cummin(-1).values):
            last_in, first_out = ordered.gather(-1, size - 1), ordered.gather(-1, size)
            if (last_in > first_out).all():  # no tie at an edge: any order keeps these
                break
            candidates = vocabulary  # a tie at an edge: torch.sort's order decides
        else:  # a nucleus may be longer than the candidates
            candidates = min(4 * candidates, vocabulary)
    return torch.zeros_like(probabilities, dtype=torch.bool).scatter(-1, order, kept)


def _kinds_of(caches: object) -> str:
    """What a caches argument holds, in words: "a list of 1 KeyValueCache", "a dict"."""
    if not isinstance(caches, list | tuple):
        return f"a {type(caches).__name__}"
    kinds = sorted({type(cache).__name__ for cache in caches})
    return f"a {type(caches).__name__} of {len(caches)} {' and '.join(kinds) or 'items'}"


@dataclass(frozen=True)
class ReadPrompt:
    """Prompt ids (B, T) as generate reads them before it writes: the caches that hold them,
    the logits (B, V) of the last position, in float64, the model that read them (a weak
    reference: a reading keeps no model alive), and what that model computed with then
    (layout and checksums, as _model_layout and _weight_checksums tell them); handed: the
    tensors it hands generate (_handed_tensors) as it made them, each with its version, and
    their checksums, to refuse a reading edited since. Made by read_prompt."""

    ids: torch.Tensor
    caches: tuple[KeyValueCache, ...]
    logits: torch.Tensor
    model: weakref.ReferenceType
    layout: tuple
    checksums: torch.Tensor
    handed: tuple


@torch.no_grad()
def read_prompt(model: GPT, ids: torch.Tensor) -> ReadPrompt:
    """What generate computes first from ids (B, T), kept so that writing from the same prompt
    again (generate(..., read=...), another seed or temperature) skips reading it: the same
    tokens, as long as the model has not changed since."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    model.check_ids(ids)
    with evaluating(model):
        caches = model.new_caches()
        logits = model(ids, caches)[:, -1].double()  # (B, V)
    layout, checksums = _model_layout(model), _weight_checksums(model)
    ids, caches = ids.clone(), tuple(caches)
    tensors = _handed_tensors(ids, caches, logits)
    handed = (tuple((t, _version(t)) for t in tensors), _checksums(tensors))
    return ReadPrompt(ids, caches, logits, weakref.ref(model), layout, checksums, handed)


def _handed_tensors(ids: object, caches: object, logits: object) -> tuple:
    """What a reading hands generate: its ids, logits, and each cache's keys and values."""
    parts = [(getattr(cache, "keys", None), getattr(cache, "values", None)) for cache in caches]
    return (ids, logits, *(t for pair in parts for t in pair))


def _is_unchanged(read: ReadPrompt) -> bool:
    """Whether read hands generate what read_prompt made: the same tensors (none replaced),
    none edited since, in place (their versions) or through .data (their checksums)."""
    if not isinstance(read, ReadPrompt):
        raise TypeError(f"read must be what read_prompt made, got {type(read).__name__}")
    if not isinstance(read.caches, tuple) or not isinstance(read.handed, tuple):
        return False
    tensors = _handed_tensors(read.ids, read.caches, read.logits)
    made, checksums = read.handed
    if len(made) != len(tensors):
        return False
    if not all(t is kept and _version(t) == v for t, (kept, v) in zip(tensors, made, strict=True)):
        return False
    return torch.equal(_checksums(tensors), checksums)


def is_current(read: ReadPrompt, model: GPT) -> bool:
    """Whether read is model's reading as the model is now: made by it, left unchanged
    (_is_unchanged), and nothing the model computes with changed since, as far as
    _model_layout and _weight_checksums tell."""
    if not _is_unchanged(read):
        return False
    if not isinstance(read.model, weakref.ReferenceType) or read.model() is not model:
        return False
    return _model_unchanged(read, model)


def _model_unchanged(read: ReadPrompt, model: GPT) -> bool:
    """is_current's last test, of a reading made by model and left unchanged: nothing the model
    computes with changed since, as far as _model_layout and _weight_checksums tell."""
    if read.layout != _model_layout(model):  # first: a model moved to meta has no numbers
        return False
    checksums, kept = _weight_checksums(model), read.checksums
    if not isinstance(kept, torch.Tensor) or (kept.dtype, kept.shape) != (
        checksums.dtype,
        checksums.shape,
    ):
        return False
    return torch.equal(kept, checksums)


def _model_layout(model: nn.Module) -> tuple:
    """What a pass of the model computes with, short of the numbers: each module (its
    identity) with its forward hooks and torch's global ones, and each weight and buffer by
    identity, memory, dtype, device, shape and version (torch counts every in-place change
    made through it)."""
    hooks = (
        tuple(torch.nn.modules.module._global_forward_pre_hooks),
        tuple(torch.nn.modules.module._global_forward_hooks),
    )
    modules = tuple(
        (
            name,
            id(module),
            tuple(module._forward_pre_hooks),
            tuple(module._forward_hooks),
            _plain_attributes(module),
        )
        for name, module in model.named_modules()
    )
    tensors = tuple(
        (id(t), t.data_ptr(), t.dtype, t.device, t.shape, _version(t))
        for t in (*model.parameters(), *model.buffers())
    )
    return hooks, modules, tensors


def _version(tensor: torch.Tensor) -> int | None:
    """How many in-place changes torch counted on the tensor; None for one made under
    torch.inference_mode, which counts none (its checksum still tells a change)."""
    return None if tensor.is_inference() else tensor._version


def _plain_attributes(module: nn.Module) -> tuple:
    """A module's settings a pass reads besides its weights (a LayerNorm's eps, an attention's
    rope flag, the model's config), and a forward set on the module itself, by identity; not
    its train/eval mode, which generate sets and puts back."""
    settings = (bool, int, float, str, tuple, type(None), GPTConfig)  # not tensors a pass keeps
    return tuple(
        (key, id(value) if key == "forward" else repr(value))
        for key, value in vars(module).items()
        if not key.startswith("_")
        and key != "training"
        and (key == "forward" or isinstance(value, settings))
    )


def _weight_checksums(model: nn.Module) -> torch.Tensor:
    """_checksums of the model's weights and buffers."""
    return _checksums([*model.parameters(), *model.buffers()])


def _checksums(tensors: list | tuple) -> torch.Tensor:
    """(tensors,) int64: the CRC-32 of each tensor's bytes, read from the cpu. An edit through
    .data, which no version counts, changes it, even one that only moves numbers about; one
    pass over the bytes, a few milliseconds for a translator's 30 MB (three float64 sums per
    tensor took seven times as long, the most of an explorer's redraw)."""
    found = [t.detach().cpu().reshape(-1).contiguous().view(torch.uint8) for t in tensors]
    return torch.tensor([zlib.crc32(bytes_.numpy()) for bytes_ in found], dtype=torch.int64)


@torch.no_grad()
def generate(
    model: GPT,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    stop_id: int | None = None,
    read: ReadPrompt | None = None,
) -> torch.Tensor:
    """(B, T + max_new_tokens) ids, the prompt ids (B, T) first. temperature 0 is greedy
    (argmax); otherwise one token per row is drawn with torch.multinomial from
    next_token_probabilities(...). With and without the cache the tokens are the same; the
    cache only saves recomputing the earlier positions. With a stop_id (such as <eos>), the
    writing stops once every row has written it, and the places left are filled with it: a
    row's tokens up to its first stop_id are the same as without. read: read_prompt(model,
    ids), to write from without reading the prompt again (it is left as it was). generator
    None with a temperature above 0: the draws come from torch's global generator (moving it on)."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    max_new_tokens = validation.whole_number(max_new_tokens, "max_new_tokens", minimum=0)
    model.check_ids(ids)
    check_room(model.config, ids.shape[1], max_new_tokens)
    temperature, top_k, top_p = checked_sampling(
        temperature, top_k, top_p, model.config.vocab_size, generator
    )
    use_cache = validation.flag(use_cache, "use_cache")
    if read is not None:
        _check_read(model, ids, read, use_cache)
    longest = ids.shape[1] + max_new_tokens  # the last step reads every position
    check_forward_size(model.config, len(ids), 1 if use_cache else longest, longest)
    if max_new_tokens:
        check_sampling_size(model.config, len(ids), temperature)
    if stop_id is not None:
        stop_id = validation.whole_number(stop_id, "stop_id", minimum=0)
        if stop_id >= model.config.vocab_size:
            raise ValueError(
                f"stop_id {validation.shown(stop_id)} is outside the vocabulary of "
                f"{model.config.vocab_size}"
            )
    sampling = (temperature, top_k, top_p)
    return _generate(model, ids, max_new_tokens, sampling, generator, use_cache, stop_id, read)


def _generate(model, ids, max_new_tokens, sampling, generator, use_cache, stop_id, read):
    """generate's computation, for arguments its checks have passed (sampling: temperature,
    top_k, top_p as checked_sampling gives them; read: current, of these ids)."""
    with evaluating(model), torch.no_grad():  # no dropout while writing
        written = _written(
            model, ids, max_new_tokens, sampling, generator, use_cache, stop_id, read
        )
    missing = ids.shape[1] + max_new_tokens - written.shape[1]
    return F.pad(written, (0, missing), value=stop_id or 0)  # (B, T + max_new_tokens)


def _written(model, ids, max_new_tokens, sampling, generator, use_cache, stop_id, read):
    temperature, top_k, top_p = sampling
    caches = model.new_caches() if use_cache else None
    written, newest = ids.clone(), ids  # newest: what the model has not read yet
    if read is not None:  # the prompt read already: its caches, copied, and last logits
        caches, newest = [copy.copy(cache) for cache in read.caches], None
    stopped = torch.zeros(len(ids), dtype=torch.bool, device=ids.device)  # (B,)
    for _ in range(max_new_tokens):
        if stop_id is not None and stopped.all():
            break
        if newest is None:
            logits = read.logits
        else:
            logits = model(newest if use_cache else written, caches)[:, -1].double()  # (B, V)
        if temperature == 0:  # argmax would pick a NaN's or the first +inf's position
            token = check_logits(logits).argmax(-1, keepdim=True)  # (B, 1)
        else:
            probabilities = _distribution(check_logits(logits), temperature, top_k, top_p)
            token = torch.multinomial(probabilities, 1, generator=generator)  # (B, 1)
        written = torch.cat([written, token.to(ids.dtype)], dim=1)  # (B, T + steps so far)
        newest = token
        if stop_id is not None:
            stopped |= token[:, 0] == stop_id
    return written


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_sampled_rows(rows: int, vocab_size: int, name: str) -> None:
    """check_sampling_size's limit, for rows of a vocabulary of vocab_size tokens."""
    per_row = SAMPLING_COPIES * 2 * vocab_size  # float64: two float32 numbers' bytes
    if rows * per_row > LARGEST_ACTIVATION:
        raise ValueError(
            f"{name}: sampling {shown_count(rows)} rows from a vocabulary of "
            f"{shown_count(vocab_size)} holds {SAMPLING_COPIES} float64 tensors of rows x "
            f"vocabulary at once, {shown_count(rows * per_row * 4)} bytes, more than 1 GiB = "
            f"{LARGEST_ACTIVATION * 4:,} bytes (2^28 float32 numbers): sample at most "
            f"{LARGEST_ACTIVATION // per_row:,} rows at a time, or decode greedily (temperature 0)"
        )


def checked_sampling(temperature, top_k, top_p, vocab_size: int, generator=None) -> tuple:
    """(temperature, top_k, top_p) as generate computes with them (top_k at most the
    vocabulary), after checking them and the generator."""
    temperature = validation.positive_number(temperature, "temperature", allow_zero=True)
    if top_k is not None:
        top_k = validation.whole_number(top_k, "top_k")
        top_k = min(top_k, vocab_size)
    if top_p is not None:
        top_p = validation.positive_number(top_p, "top_p")
        if top_p > 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r}")
    return temperature, top_k, top_p


def _check_read(model: GPT, ids: torch.Tensor, read: object, use_cache: bool) -> None:
    """read must be read_prompt(model, ids): the same ids, caches this model's layers fill,
    read by this model."""
    if not isinstance(read, ReadPrompt):
        raise TypeError(f"read must be what read_prompt made, got {type(read).__name__}")
    if not use_cache:
        raise ValueError("read holds the prompt's caches: it needs use_cache=True")
    if not isinstance(read.ids, torch.Tensor):
        raise TypeError(
            f"read.ids must be the prompt ids read_prompt kept (a tensor), got "
            f"{type(read.ids).__name__}: read = read_prompt(model, ids)"
        )
    if not _is_unchanged(read):
        raise ValueError(
            "read's ids, logits or caches were changed since read_prompt made them (edited in "
            "place or through .data, or replaced): read them again with read_prompt(model, ids)"
        )
    if read.ids.shape != ids.shape or not torch.equal(read.ids, ids):
        raise ValueError(
            f"read is the reading of other ids ({tuple(read.ids.shape)}): read_prompt(model, "
            f"ids) with these ids {tuple(ids.shape)}"
        )
    if not isinstance(read.model, weakref.ReferenceType) or read.model() is not model:
        raise ValueError(
            "read is another model's reading of these ids (read_prompt(other, ids)): its caches "
            "and logits are that model's; use read_prompt(model, ids) with this model"
        )
    if not _model_unchanged(read, model):  # _is_unchanged and the model tested just above
        raise ValueError(
            "read is the model's reading of these ids before it was changed (a training step, "
            "a load, an edit in place or through .data, a .to(), a module replaced, a hook "
            "added or removed since): its caches and logits are the old model's; read them "
            "again with read_prompt(model, ids)"
        )
    positions, rows = model._check_caches(read.caches)
    logits = read.logits
    if (rows, positions) != tuple(ids.shape) or not (
        isinstance(logits, torch.Tensor) and logits.shape == (len(ids), model.config.vocab_size)
    ):
        raise ValueError(
            "read was not made by read_prompt(model, ids): its caches or logits differ"
        )


def check_config(config: object) -> GPTConfig:
    if not isinstance(config, GPTConfig):
        raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
    return config


def check_forward_size(
    config: GPTConfig,
    rows: int,
    positions: int,
    keys: int,
    name: str = "ids",
    keys_name: str | None = None,
) -> None:
    """Refuse, before anything is made, a forward pass of `rows` x `positions` new positions
    that read `keys` positions each (whole numbers >= 0), whose largest tensor (logits, the
    feed-forward's hidden layer or the attention weights) would hold more than
    LARGEST_ACTIVATION numbers. keys_name: the setting that fixes the keys, if any (such as
    "context_length"), named when the attention weights are too large."""
    check_config(config)
    rows = validation.whole_number(rows, "rows", minimum=0)
    positions = validation.whole_number(positions, "positions", minimum=0)
    keys = validation.whole_number(keys, "keys", minimum=0)
    check_ids_name(name)
    if keys_name is not None and not isinstance(keys_name, str):
        raise TypeError(f"keys_name must be a str or None, got {validation.shown(keys_name):.40}")
    keys_shown = f"{shown_count(keys)} keys" + (f" (the {keys_name})" if keys_name else "")
    widths = {  # the tensors a pass makes, by width: the first widest one is named
        f"logits, vocab_size {config.vocab_size:,}": config.vocab_size,
        f"feed-forward's hidden layer, d_ff {config.d_ff:,}": config.d_ff,
        f"residual stream, d_model {config.d_model:,}": config.d_model,
        f"attention weights, {config.num_heads} heads x {keys_shown}": config.num_heads * keys,
    }
    if config.attention_only:  # no feed-forward layer is built, whatever d_ff says
        del widths[f"feed-forward's hidden layer, d_ff {config.d_ff:,}"]
    widest_tensor, widest = max(widths.items(), key=lambda item: item[1])
    numbers = rows * positions * widest
    if numbers > LARGEST_ACTIVATION:
        advice = "use fewer rows or positions"
        if widest_tensor.startswith("attention"):
            advice += f", or a smaller {keys_name or 'number of keys'} than {shown_count(keys)}"
        raise ValueError(
            f"{name}: {shown_count(rows)} row{'s' * (rows != 1)} x {shown_count(positions)} "
            f"position{'s' * (positions != 1)} would make a tensor of {shown_count(numbers)} "
            f"numbers (x {shown_count(widest)}: the {widest_tensor}), more than 2^28 = "
            f"{LARGEST_ACTIVATION:,} (1 GiB of float32, and a forward pass holds several such "
            f"tensors at once): {advice}"
        )


def check_sampling_size(
    config: GPTConfig, rows: int, temperature: float, name: str = "ids"
) -> None:
    """Refuse, before anything is made, drawing tokens for `rows` rows (a whole number >= 0) at
    a temperature above 0, whose sampling step would hold SAMPLING_COPIES float64 tensors of
    (rows, vocab_size) at once: more than the bytes of LARGEST_ACTIVATION float32 numbers
    together. Greedy decoding (temperature 0) takes an argmax only."""
    check_config(config)
    rows = validation.whole_number(rows, "rows", minimum=0)
    temperature = validation.positive_number(temperature, "temperature", allow_zero=True)
    check_ids_name(name)
    if temperature:
        _check_sampled_rows(rows, config.vocab_size, name)


def check_ids_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(
            f"name must be a str (what the caller calls the ids), got {validation.shown(name):.40}"
        )


def check_room(config: GPTConfig, prompt_length: int, max_new_tokens: int) -> None:
    """Refuse a prompt of prompt_length tokens and max_new_tokens new ones (whole numbers
    >= 0) that together do not fit in the context."""
    check_config(config)
    prompt_length = validation.whole_number(prompt_length, "prompt_length", minimum=0)
    max_new_tokens = validation.whole_number(max_new_tokens, "max_new_tokens", minimum=0)
    if prompt_length + max_new_tokens > config.context_length:
        raise ValueError(
            f"{shown_count(prompt_length)} prompt tokens + {shown_count(max_new_tokens)} new ones "
            f"do not fit in the context of {config.context_length}"
        )


def shown_count(number: int) -> str:
    """A count (a whole number >= 0) as a message shows it: 1,234,567, or about 10^40 where
    the digits would be too many to read (or, past 4,300 of them, for Python to write)."""
    number = validation.whole_number(number, "number (a count to show)", minimum=0)
    return f"{number:,}" if number < 10**15 else f"about 10^{_digits(number) - 1}"


def _digits(number: int) -> int:
    """How many digits a whole number > 0 has, counted exactly (math.log10 rounds 10^16 - 1
    up to 16.0), without writing them all (Python refuses past 4,300)."""
    digits = max(1, math.floor(number.bit_length() * math.log10(2)))  # at most one too few
    return digits + (number >= 10**digits)


def check_logits(logits: object) -> torch.Tensor:
    """logits (B, V), floating, each row with a finite logit, none NaN or +inf: a row a token
    can be chosen from; at most LARGEST_ACTIVATION numbers, sized before they are read."""
    validation.dense_tensor(logits, "logits", "(B, V)")
    if logits.dim() != 2 or logits.shape[1] == 0 or not logits.is_floating_point():
        raise ValueError(
            f"logits must be floating (B, V), V >= 1, got {logits.dtype} {tuple(logits.shape)}"
        )
    if logits.numel() > LARGEST_ACTIVATION:  # an expand()ed view holds them in a few bytes
        raise ValueError(
            f"logits hold {shown_count(logits.numel())} numbers ({shown_count(logits.shape[0])} "
            f"x {shown_count(logits.shape[1])}), more than 2^28 = {LARGEST_ACTIVATION:,}, the "
            f"most a forward pass makes: is a size mistyped?"
        )
    if logits.isnan().any() or logits.isposinf().any():
        raise ValueError("logits hold NaN or +inf: no token can be chosen")
    if not logits.isfinite().any(-1).all():
        raise ValueError("a row of logits is all -inf: no token can be chosen")
    return logits
