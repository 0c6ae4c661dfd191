"""The Transformer encoder-decoder, built from this project's attention and masks.

Read top to bottom: the feed-forward network, the residual connection with LayerNorm (after
the sublayer as in the 2017 paper, or before it: ``norm_first``), the encoder and decoder
blocks, their stacks, and the model with greedy decoding.
"""

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import nn

from helpers import validation
from helpers.attention import KeyValueCache, MultiHeadAttention, copy_weights_from_torch
from helpers.checkpoints import MAX_CHECKPOINT_PARAMETERS, CheckpointError
from helpers.contexts import evaluating
from helpers.masks import _causal_padding_mask, _padding_mask
from helpers.positional import PositionalEncoding


class PositionWiseFFN(nn.Module):
    """The same two-layer network applied at every position: d_model -> d_ff -> d_model."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        for name, size in (("d_model", d_model), ("d_ff", d_ff)):
            validation.whole_number(size, name)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, n, d_model)
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class Residual(nn.Module):
    """x + sublayer(x), with a LayerNorm after the sum (post-norm, the 2017 paper) or on the
    sublayer's input (pre-norm, most current models: the residual path stays un-normalised,
    so gradients reach early layers directly and training is less sensitive to warm-up)."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderBlock(nn.Module):
    """Self-attention, then the feed-forward network, each inside a residual connection."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = True,
    ):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = PositionWiseFFN(d_model, d_ff, dropout)
        self.attention_residual = Residual(d_model, dropout, norm_first)
        self.ffn_residual = Residual(d_model, dropout, norm_first)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # x (B, S, d_model); mask (B, 1, S): the source's non-pads
        x = self.attention_residual(x, lambda h: self.self_attention(h, h, h, mask=mask))
        return self.ffn_residual(x, self.ffn)


class DecoderBlock(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, feed-forward."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = True,
    ):
        super().__init__()
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.cross_attention = MultiHeadAttention(d_model, num_heads, dropout)
        self.ffn = PositionWiseFFN(d_model, d_ff, dropout)
        self.self_residual = Residual(d_model, dropout, norm_first)
        self.cross_residual = Residual(d_model, dropout, norm_first)
        self.ffn_residual = Residual(d_model, dropout, norm_first)

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None,
        memory_mask: torch.Tensor,
        cache: KeyValueCache | None = None,
    ) -> torch.Tensor:
        """y (B, T, d_model); memory (B, S, d_model); self_mask (B, T, T) or None;
        memory_mask (B, 1, S). With a KeyValueCache, y holds only the newest positions."""

        def attend_to_self(h: torch.Tensor) -> torch.Tensor:
            return self.self_attention(h, h, h, mask=self_mask, cache=cache)

        y = self.self_residual(y, attend_to_self)
        y = self.cross_residual(
            y, lambda h: self.cross_attention(h, memory, memory, mask=memory_mask)
        )
        return self.ffn_residual(y, self.ffn)


class Embedding(nn.Module):
    """Token embedding times sqrt(d_model), plus the sinusoidal encoding of each position.

    The scaling matters with embeddings initialised at variance 1/d_model (as here): they would
    otherwise be small next to the encoding's entries of size about 1.
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        nn.init.normal_(self.tokens.weight, std=d_model**-0.5)
        self.positions = PositionalEncoding(d_model, max_len, dropout)
        self.scale = math.sqrt(d_model)

    def forward(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        # (B, n) -> (B, n, d_model)
        return self.positions(self.tokens(tokens) * self.scale, start)


class Encoder(nn.Module):
    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float,
        norm_first: bool,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers)
        )
        # pre-norm leaves the residual stream un-normalised: one LayerNorm at the end
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, mask)
        return self.final_norm(x)


class Decoder(nn.Module):
    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float,
        norm_first: bool,
    ):
        super().__init__()
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, num_heads, d_ff, dropout, norm_first) for _ in range(num_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        self_mask: torch.Tensor | None,
        memory_mask: torch.Tensor,
        caches: list[KeyValueCache] | None = None,
    ) -> torch.Tensor:
        for index, block in enumerate(self.blocks):
            cache = None if caches is None else caches[index]
            y = block(y, memory, self_mask, memory_mask, cache)
        return self.final_norm(y)


@dataclass(frozen=True)
class TransformerConfig:
    """The sizes of a Seq2SeqTransformer, each default with its reason. Build a variant with
    dataclasses.replace(config, d_model=128), which refuses a key that is not a field."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 64  # small enough to train on a laptop CPU in minutes
    num_heads: int = 4  # d_model / num_heads = 16 dimensions per head
    num_layers: int = 2  # per stack; the 2017 paper used 6 for translation
    d_ff: int = 256  # 4 x d_model, the paper's ratio
    dropout: float = 0.0  # toy tasks with unlimited fresh data do not overfit
    pad_id: int = 0  # the id of <pad> in both vocabularies
    norm_first: bool = True  # pre-norm: trains without a careful warm-up (chapter 07)
    max_len: int = 256  # positions the sinusoidal table is built for
    tie_embeddings: bool = False  # one matrix for both embeddings and the output layer

    def __post_init__(self):
        sizes = ("d_model", "num_heads", "num_layers", "d_ff", "max_len")
        vocabularies = ("src_vocab_size", "tgt_vocab_size")
        validation.coerce_fields(
            self,
            {
                **dict.fromkeys(sizes, validation.whole_number),
                **dict.fromkeys(vocabularies, validation.at_least(2)),
                "pad_id": validation.at_least(0),
                "dropout": validation.probability,
                "norm_first": validation.flag,
                "tie_embeddings": validation.flag,
            },
        )
        pad_id = self.pad_id
        if pad_id >= min(self.src_vocab_size, self.tgt_vocab_size):
            raise ValueError(
                f"pad_id ({pad_id}) must be an id of both vocabularies (sizes "
                f"{self.src_vocab_size} and {self.tgt_vocab_size})"
            )
        if self.d_model % 2:
            raise ValueError(
                f"d_model ({self.d_model}) must be even: sin/cos pairs encode positions"
            )
        validation.head_size(self.d_model, self.num_heads)
        if self.tie_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"tie_embeddings needs one vocabulary for source and target, got sizes "
                f"{self.src_vocab_size} and {self.tgt_vocab_size}"
            )


def parameter_count(config: TransformerConfig) -> int:
    """The number of parameters a Seq2SeqTransformer of this config has, without building it."""
    d, d_ff, layers = config.d_model, config.d_ff, config.num_layers
    attention = 4 * (d * d + d)
    ffn = d * d_ff + d_ff + d_ff * d + d
    norm = 2 * d
    encoder = layers * (attention + ffn + 2 * norm)
    decoder = layers * (2 * attention + ffn + 3 * norm)
    final_norms = 2 * norm if config.norm_first else 0
    if config.tie_embeddings:  # one (vocab, d) matrix; the output layer keeps its own bias
        embeddings, output = config.src_vocab_size * d, config.tgt_vocab_size
    else:
        embeddings = (config.src_vocab_size + config.tgt_vocab_size) * d
        output = d * config.tgt_vocab_size + config.tgt_vocab_size
    return encoder + decoder + final_norms + embeddings + output


class Seq2SeqTransformer(nn.Module):
    """Encoder-decoder Transformer over token ids.

    forward(src (B, S), tgt (B, T)) -> logits (B, T, tgt_vocab_size). Padding masks come from
    pad_id; the decoder's causal mask is applied always, in training and in evaluation.
    The arguments are the fields of TransformerConfig; ``model.config`` holds them.
    With tie_embeddings, source embedding, target embedding and output layer share one weight
    (a shared vocabulary gives a token one row whether it is read or written).
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int = 64,
        num_heads: int = 4,
        num_layers: int = 2,
        d_ff: int = 256,
        dropout: float = 0.0,
        pad_id: int = 0,
        norm_first: bool = True,
        max_len: int = 256,
        tie_embeddings: bool = False,
    ):
        super().__init__()
        c = self.config = TransformerConfig(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            d_model=d_model,
            num_heads=num_heads,
            num_layers=num_layers,
            d_ff=d_ff,
            dropout=dropout,
            pad_id=pad_id,
            norm_first=norm_first,
            max_len=max_len,
            tie_embeddings=tie_embeddings,
        )
        self.pad_id, self.max_len = c.pad_id, c.max_len
        layers = (c.num_layers, c.d_model, c.num_heads, c.d_ff, c.dropout, c.norm_first)
        self.src_embedding = Embedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout)
        self.tgt_embedding = Embedding(c.tgt_vocab_size, c.d_model, c.max_len, c.dropout)
        self.encoder = Encoder(*layers)
        self.decoder = Decoder(*layers)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size)
        if c.tie_embeddings:
            self.tgt_embedding.tokens.weight = self.src_embedding.tokens.weight
            self.output.weight = self.src_embedding.tokens.weight

    @classmethod
    def from_config(cls, config: TransformerConfig) -> "Seq2SeqTransformer":
        if not isinstance(config, TransformerConfig):
            raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")
        return cls(**asdict(config))

    def _check_tokens(self, name, tokens, vocab_size) -> torch.Tensor:
        """The token ids as int64 (what nn.Embedding takes), after checking them."""
        validation.token_ids(tokens, name, vocab_size)
        if tokens.shape[1] > self.max_len:
            raise ValueError(f"{name} has {tokens.shape[1]} positions; max_len is {self.max_len}")
        return tokens.long()

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """src (B, S) -> memory (B, S, d_model) and its padding mask (B, 1, S)."""
        return self._encode(self._check_tokens("src", src, self.config.src_vocab_size))

    def _encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        src_mask = _padding_mask(src, self.pad_id)  # (B, 1, S)
        return self.encoder(self.src_embedding(src), src_mask), src_mask

    def decode(
        self, tgt: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor
    ) -> torch.Tensor:
        """tgt (B, T) -> logits (B, T, tgt_vocab), every position in one causal pass."""
        tgt = self._check_tokens("tgt", tgt, self.config.tgt_vocab_size)  # (B, T)
        tgt_mask = _causal_padding_mask(tgt, self.pad_id)  # (B, T, T)
        y = self.decoder(self.tgt_embedding(tgt), memory, tgt_mask, src_mask)
        return self.output(y)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)

    @torch.no_grad()
    def greedy_decode(
        self, src: torch.Tensor, bos_id: int, eos_id: int, max_steps: int, use_cache: bool = True
    ) -> torch.Tensor:
        """Generate up to max_steps tokens after bos_id, taking the most likely token each
        step; stop when every sequence has produced eos_id. Returns (B, steps) token ids
        without the bos, pad_id after each sequence's eos.

        With use_cache, each step feeds only the newest token and the decoder's self-attention
        reuses the keys and values of the earlier steps; without it, each step runs the whole
        prefix again. The two give the same tokens. Decoding runs in evaluation mode (no
        dropout); the model's mode is restored afterwards.
        """
        self._check_decoding(bos_id, eos_id, max_steps)
        with evaluating(self):
            return self._greedy_decode(src, bos_id, eos_id, max_steps, use_cache)

    def _check_decoding(self, bos_id, eos_id, max_steps) -> None:
        vocab_size = self.config.tgt_vocab_size
        bos_id = validation.whole_number(bos_id, "bos_id", minimum=0)
        eos_id = validation.whole_number(eos_id, "eos_id", minimum=0)
        max_steps = validation.whole_number(max_steps, "max_steps")
        if max_steps > self.max_len:
            raise ValueError(
                f"max_steps ({max_steps}) exceeds the {self.max_len} positions the model was "
                f"built for (max_len)"
            )
        for name, token in (("bos_id", bos_id), ("eos_id", eos_id)):
            if token >= vocab_size:
                raise ValueError(
                    f"{name} ({token}) is outside the target vocabulary 0..{vocab_size - 1}"
                )
        if len({bos_id, eos_id, self.pad_id}) < 3:
            raise ValueError(
                f"bos_id ({bos_id}), eos_id ({eos_id}) and pad_id ({self.pad_id}) must be three "
                f"different tokens"
            )

    def _greedy_decode(self, src, bos_id, eos_id, max_steps, use_cache):
        memory, src_mask = self.encode(src)
        batch = src.shape[0]
        generated = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
        finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
        caches = [KeyValueCache() for _ in self.decoder.blocks] if use_cache else None
        for step in range(max_steps):
            if use_cache:
                newest = self.tgt_embedding(generated[:, -1:], start=step)  # (B, 1, d_model)
                y = self.decoder(newest, memory, None, src_mask, caches)  # sees steps 0..step
                logits = self.output(y[:, -1])
            else:
                logits = self.decode(generated, memory, src_mask)[:, -1]
            logits[:, [self.pad_id, bos_id]] = float("-inf")  # never predicted
            next_token = logits.argmax(-1).masked_fill(finished, self.pad_id)  # (B,)
            generated = torch.cat([generated, next_token[:, None]], dim=1)
            finished |= next_token == eos_id
            if finished.all():
                break
        return generated[:, 1:]

    def attention_maps(self) -> dict:
        """The weights of the last forward pass, per kind and layer: (B, heads, q, k) each."""
        return {
            "encoder self-attention": [
                b.self_attention.attention_weights for b in self.encoder.blocks
            ],
            "decoder self-attention": [
                b.self_attention.attention_weights for b in self.decoder.blocks
            ],
            "cross-attention": [b.cross_attention.attention_weights for b in self.decoder.blocks],
        }


def copy_weights_from_torch_transformer(ours: Seq2SeqTransformer, theirs: nn.Transformer) -> None:
    """Give our encoder and decoder stacks the weights of a torch.nn.Transformer of the same
    size (embeddings and output layer are ours alone: nn.Transformer has none)."""

    def copy_affine(target: nn.Module, source: nn.Module) -> None:  # a Linear or a LayerNorm
        target.weight.copy_(source.weight)
        target.bias.copy_(source.bias)

    _check_same_layout(ours, theirs)
    with torch.no_grad():
        for block, layer in zip(ours.encoder.blocks, theirs.encoder.layers, strict=True):
            copy_weights_from_torch(block.self_attention, layer.self_attn)
            copy_affine(block.ffn.linear1, layer.linear1)
            copy_affine(block.ffn.linear2, layer.linear2)
            copy_affine(block.attention_residual.norm, layer.norm1)
            copy_affine(block.ffn_residual.norm, layer.norm2)
        for block, layer in zip(ours.decoder.blocks, theirs.decoder.layers, strict=True):
            copy_weights_from_torch(block.self_attention, layer.self_attn)
            copy_weights_from_torch(block.cross_attention, layer.multihead_attn)
            copy_affine(block.ffn.linear1, layer.linear1)
            copy_affine(block.ffn.linear2, layer.linear2)
            copy_affine(block.self_residual.norm, layer.norm1)
            copy_affine(block.cross_residual.norm, layer.norm2)
            copy_affine(block.ffn_residual.norm, layer.norm3)
        for our_norm, their_norm in (
            (ours.encoder.final_norm, theirs.encoder.norm),
            (ours.decoder.final_norm, theirs.decoder.norm),
        ):
            if isinstance(our_norm, nn.LayerNorm):
                copy_affine(our_norm, their_norm)


def torch_transformer_like(ours: Seq2SeqTransformer) -> nn.Transformer:
    """A torch.nn.Transformer with our model's sizes and layout, to compare against.

    nn.Transformer always ends its stacks with a LayerNorm; with post-norm (the 2017 paper)
    ours has none, so there the final norm is left out. Nested tensors are off: with them,
    torch's encoder returns zeros at pad positions instead of their (unused) values.
    """
    if not isinstance(ours, Seq2SeqTransformer):
        raise ValueError(f"expected a Seq2SeqTransformer, got {type(ours).__name__}")
    c = ours.config
    sizes = {
        "d_model": c.d_model,
        "nhead": c.num_heads,
        "dim_feedforward": c.d_ff,
        "dropout": c.dropout,
        "batch_first": True,
        "norm_first": c.norm_first,
    }

    def final_norm() -> nn.LayerNorm | None:
        return nn.LayerNorm(c.d_model) if c.norm_first else None

    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**sizes),
        c.num_layers,
        norm=final_norm(),
        enable_nested_tensor=False,
    )
    decoder = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(**sizes), c.num_layers, norm=final_norm()
    )
    return nn.Transformer(**sizes, custom_encoder=encoder, custom_decoder=decoder)


def saved_config(config: dict, path: object) -> TransformerConfig:
    """A checkpoint's config dict as a TransformerConfig whose model a 16 MB file can hold, or a
    CheckpointError naming the file (chapters 07 and 09 load their models through it)."""
    try:
        config = TransformerConfig(**config)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: its config is not a model's ({error})") from None
    if parameter_count(config) > MAX_CHECKPOINT_PARAMETERS:
        raise CheckpointError(
            f"{path}: its config asks for {parameter_count(config):,} parameters, more than a "
            f"checkpoint of at most 16 MB in float16 can hold ({MAX_CHECKPOINT_PARAMETERS:,})"
        )
    return config


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_same_layout(ours: Seq2SeqTransformer, theirs: nn.Transformer) -> None:
    """Refuse, before copying anything, a torch model that would compute something else."""
    if not isinstance(ours, Seq2SeqTransformer) or not isinstance(theirs, nn.Transformer):
        raise ValueError("expected a Seq2SeqTransformer and a torch.nn.Transformer")
    c, layer = ours.config, theirs.encoder.layers[0]
    found = {
        "encoder layers": (c.num_layers, len(theirs.encoder.layers)),
        "decoder layers": (c.num_layers, len(theirs.decoder.layers)),
        "d_model": (c.d_model, layer.linear1.in_features),
        "d_ff": (c.d_ff, layer.linear1.out_features),
        "heads": (c.num_heads, layer.self_attn.num_heads),
        "norm_first": (c.norm_first, layer.norm_first),
        "activation": (
            "relu",
            getattr(layer.activation, "__name__", type(layer.activation).__name__),
        ),
        "layer_norm_eps": (1e-5, layer.norm1.eps),
    }
    differ = [f"{name} ours {a!r}, theirs {b!r}" for name, (a, b) in found.items() if a != b]
    if differ:
        raise ValueError(f"the models differ: {'; '.join(differ)}")
