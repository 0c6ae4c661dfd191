"""A decoder-only Transformer (GPT): one causal stack instead of an encoder and a decoder.

Read top to bottom: the configuration, one pre-norm block (causal self-attention, then the
feed-forward network, each inside a residual connection), the model (token and learned
position embeddings, the blocks, a last LayerNorm, an output layer tied to the token
embedding), and generate(): greedy decoding or sampling with temperature, top-k and top-p,
with or without the key/value cache.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validation
from helpers.attention import KeyValueCache, MultiHeadAttention
from helpers.masks import causal_mask
from helpers.transformer import PositionWiseFFN, Residual


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

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "num_heads", "num_layers", "d_ff"):
            object.__setattr__(self, name, validation.whole_number(getattr(self, name), name))
        if self.d_model % self.num_heads:
            raise ValueError(
                f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})"
            )
        object.__setattr__(self, "dropout", validation.probability(self.dropout))
        only = validation.flag(self.attention_only, "attention_only")
        object.__setattr__(self, "attention_only", only)


class GPTBlock(nn.Module):
    """Causal self-attention, then (unless attention_only) the feed-forward network, each
    inside a pre-norm residual connection."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.attention = MultiHeadAttention(config.d_model, config.num_heads, config.dropout)
        self.attention_residual = Residual(config.d_model, config.dropout, norm_first=True)
        self.ffn = None
        if not config.attention_only:
            self.ffn = PositionWiseFFN(config.d_model, config.d_ff, config.dropout)
            self.ffn_residual = Residual(config.d_model, config.dropout, norm_first=True)

    def forward(
        self, x: torch.Tensor, mask: torch.Tensor | None, cache: KeyValueCache | None = None
    ) -> torch.Tensor:
        """x (B, n, d_model); mask (n, cached + n) or None for one new position after a cache."""
        x = self.attention_residual(x, lambda h: self.attention(h, h, h, mask=mask, cache=cache))
        return x if self.ffn is None else self.ffn_residual(x, self.ffn)


class GPT(nn.Module):
    """forward(ids (B, T)) -> logits (B, T, vocab_size); position t sees positions 0..t only."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.tokens = nn.Embedding(config.vocab_size, config.d_model)
        self.positions = nn.Embedding(config.context_length, config.d_model)
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, std=0.02)  # GPT-2's initialisation
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(GPTBlock(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.output = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.output.weight = self.tokens.weight  # tied: one matrix reads and writes tokens

    def check_ids(self, ids: object, start: int = 0) -> torch.Tensor:
        """ids (B, T) of the vocabulary, T >= 1, that fit in the context after `start`."""
        start = validation.whole_number(start, "start (positions already cached)", minimum=0)
        validation.token_ids(ids, "ids", self.config.vocab_size, "(B, T)")
        if ids.shape[1] == 0 or ids.shape[0] == 0:
            raise ValueError(f"ids must hold at least one token, got shape {tuple(ids.shape)}")
        if start + ids.shape[1] > self.config.context_length:
            raise ValueError(
                f"{start + ids.shape[1]} positions do not fit in the context of "
                f"{self.config.context_length}: keep the last {self.config.context_length}"
            )
        if ids.device != self.tokens.weight.device:
            raise ValueError(
                f"ids are on {ids.device} but the model is on {self.tokens.weight.device}"
            )
        return ids

    def forward(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """With caches (one KeyValueCache per layer), ids are the newest positions only: they
        attend to every cached position as well, and the caches grow by T."""
        return self.output(self.features(ids, caches))  # (B, T, vocab_size)

    def features(self, ids: torch.Tensor, caches: list | None = None) -> torch.Tensor:
        """What the output layer reads: (B, T, d_model), after the last LayerNorm. A training
        loop that scores only some positions turns only those into logits."""
        if caches is not None and (
            not isinstance(caches, list | tuple)
            or len(caches) != len(self.blocks)
            or not all(isinstance(cache, KeyValueCache) for cache in caches)
        ):
            raise ValueError(
                f"caches must be a list of {len(self.blocks)} KeyValueCache, one per layer "
                f"(model.new_caches()), got {caches!r:.80}"
            )
        start = 0 if caches is None else len(caches[0])
        self.check_ids(ids, start)
        steps = ids.shape[1]
        where = torch.arange(start, start + steps, device=ids.device)  # (T,)
        x = self.dropout(self.tokens(ids) + self.positions(where))  # (B, T, d_model)
        mask = causal_mask(start + steps, ids.device)[start:]  # (T, start + T)
        if steps == 1:
            mask = None  # one new position may read every position so far
        for layer, block in enumerate(self.blocks):
            x = block(x, mask, None if caches is None else caches[layer])
        return self.norm(x)

    def new_caches(self) -> list[KeyValueCache]:
        return [KeyValueCache() for _ in self.blocks]

    def attention_maps(self) -> list[torch.Tensor | None]:
        """Each layer's attention weights in the last forward pass: (B, heads, T, cached + T)."""
        return [block.attention.attention_weights for block in self.blocks]


def _check_sampling(temperature, top_k, top_p, generator, vocab_size: int) -> tuple:
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


def next_token_probabilities(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p=None
) -> torch.Tensor:
    """logits (B, V) -> the distribution one token is drawn from (B, V): logits / temperature,
    only the top_k largest kept, then only the smallest set of most likely tokens whose
    probability reaches top_p (the most likely token always stays)."""
    validation.tensor(logits, "logits", "(B, V)")
    if logits.dim() != 2 or logits.shape[1] == 0 or not logits.is_floating_point():
        raise ValueError(
            f"logits must be floating (B, V), got {logits.dtype} {tuple(logits.shape)}"
        )
    if logits.isnan().any() or logits.isposinf().any():
        raise ValueError("logits hold NaN or +inf: no token can be drawn")
    if not logits.isfinite().any(-1).all():
        raise ValueError("a row of logits is all -inf: no token can be drawn")
    temperature, top_k, top_p = _check_sampling(temperature, top_k, top_p, None, logits.shape[1])
    dtype = logits.dtype
    if temperature == 0:
        raise ValueError("temperature 0 is greedy decoding: take logits.argmax(-1) instead")
    logits = logits.double()
    scores = (logits - logits.amax(-1, keepdim=True)) / temperature  # (B, V), <= 0: no overflow
    if top_k is not None:  # exactly k, ties broken by torch.topk
        best = scores.topk(top_k, dim=-1).indices  # (B, k)
        kept = torch.zeros_like(scores, dtype=torch.bool).scatter(-1, best, True)
        scores = scores.masked_fill(~kept, float("-inf"))
    probabilities = scores.softmax(-1)
    if top_p is not None and top_p < 1:  # (top_p = 1 keeps every token)
        ordered, order = probabilities.sort(dim=-1, descending=True)  # (B, V)
        before = ordered.cumsum(-1) - ordered  # the mass of the more likely tokens
        keep = torch.zeros_like(ordered, dtype=torch.bool).scatter(-1, order, before < top_p)
        probabilities = probabilities.masked_fill(~keep, 0.0)
        probabilities = probabilities / probabilities.sum(-1, keepdim=True)
    return probabilities.to(dtype)


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
) -> torch.Tensor:
    """(B, T + max_new_tokens) ids, the prompt ids (B, T) first. temperature 0 is greedy
    (argmax); otherwise one token per row is drawn with torch.multinomial from
    next_token_probabilities(...). With and without the cache the tokens are the same; the
    cache only saves recomputing the earlier positions. With a stop_id (such as <eos>), the
    writing stops once every row has written it, and the places left are filled with it: a
    row's tokens up to its first stop_id are the same as without."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    max_new_tokens = validation.whole_number(max_new_tokens, "max_new_tokens", minimum=0)
    model.check_ids(ids)
    if ids.shape[1] + max_new_tokens > model.config.context_length:
        raise ValueError(
            f"{ids.shape[1]} prompt tokens + {max_new_tokens} new ones do not fit in the context "
            f"of {model.config.context_length}"
        )
    temperature, top_k, top_p = _check_sampling(
        temperature, top_k, top_p, generator, model.config.vocab_size
    )
    use_cache = validation.flag(use_cache, "use_cache")
    if stop_id is not None:
        stop_id = validation.whole_number(stop_id, "stop_id", minimum=0)
        if stop_id >= model.config.vocab_size:
            raise ValueError(
                f"stop_id {stop_id} is outside the vocabulary of {model.config.vocab_size}"
            )
    was_training = model.training
    model.eval()  # no dropout while writing
    try:
        written = _generate(
            model, ids, max_new_tokens, temperature, top_k, top_p, generator, use_cache, stop_id
        )
        missing = ids.shape[1] + max_new_tokens - written.shape[1]
        return F.pad(written, (0, missing), value=stop_id or 0)  # (B, T + max_new_tokens)
    finally:
        model.train(was_training)


def _generate(model, ids, max_new_tokens, temperature, top_k, top_p, generator, use_cache, stop_id):
    caches = model.new_caches() if use_cache else None
    written, newest = ids.clone(), ids  # newest: what the model has not read yet
    stopped = torch.zeros(len(ids), dtype=torch.bool, device=ids.device)  # (B,)
    for _ in range(max_new_tokens):
        if stop_id is not None and stopped.all():
            break
        logits = model(newest if use_cache else written, caches)[:, -1].double()  # (B, V)
        if temperature == 0:
            if logits.isnan().any():  # argmax would pick a NaN's position as a token
                raise ValueError("the model's logits hold NaN: no token can be chosen")
            token = logits.argmax(-1, keepdim=True)  # (B, 1)
        else:
            probabilities = next_token_probabilities(logits, temperature, top_k, top_p)
            token = torch.multinomial(probabilities, 1, generator=generator)  # (B, 1)
        written = torch.cat([written, token.to(ids.dtype)], dim=1)  # (B, T + steps so far)
        newest = token
        if stop_id is not None:
            stopped |= token[:, 0] == stop_id
    return written
