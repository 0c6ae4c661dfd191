"""Chapter 07's exercises: the Transformer (a pre-norm encoder block, a pre-norm decoder block
with cross-attention, greedy decoding of a batch)."""

from collections.abc import Callable

import torch
from torch import nn

from helpers.attention import MultiHeadAttention
from helpers.exercises.framework import Refused, exercise_checker, report, run_case
from helpers.transformer import (
    DecoderBlock,
    EncoderBlock,
    PositionWiseFFN,
    Residual,
    Seq2SeqTransformer,
)

__all__ = ["check_greedy_decode", "check_pre_norm_decoder_block", "check_pre_norm_encoder_block"]


def _leaving_alone(modules: dict, function: Callable) -> Callable:
    """function, wrapped so that a change to any weight of the named modules (in place, even
    one that restores the values) is refused and undone."""
    parameters = [p for module in modules.values() for p in module.parameters()]
    names = " or ".join(f"`{name}`" for name in modules)

    def call(*args):
        before = [p.detach().clone() for p in parameters]
        versions = [p._version for p in parameters]
        out = function(*args)
        same = all(torch.equal(b, p) for b, p in zip(before, parameters, strict=True))
        if not same or versions != [p._version for p in parameters]:
            with torch.no_grad():
                for b, p in zip(before, parameters, strict=True):
                    p.copy_(b)
            raise Refused(f"changes the weights of {names} in place: use them, do not modify them")
        return out

    return call


def _random_norm(size: int) -> nn.LayerNorm:
    """A LayerNorm whose scale and shift are not 1 and 0, so that leaving it out shows."""
    norm = nn.LayerNorm(size)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-0.5, 0.5)
    return norm


@exercise_checker
def check_pre_norm_encoder_block(learner_block: Callable) -> bool:
    """learner_block(x, mask, self_attention, ffn, norm1, norm2) -> a pre-norm encoder
    block's output (B, S, d_model): self-attention with the padding mask, then the FFN, each
    in a pre-norm residual connection (norm1 before the attention, norm2 before the FFN)."""
    generator = torch.Generator().manual_seed(7)
    torch.manual_seed(7)
    d_model = 8
    attention = MultiHeadAttention(d_model, num_heads=2)
    ffn = PositionWiseFFN(d_model, 16)
    norm1, norm2 = _random_norm(d_model), _random_norm(d_model)
    tested = EncoderBlock(d_model, 2, 16, norm_first=True)  # the tested copy, with these layers
    tested.self_attention, tested.ffn = attention, ffn
    tested.attention_residual.norm, tested.ffn_residual.norm = norm1, norm2
    layers = {"self_attention": attention, "ffn": ffn, "norm1": norm1, "norm2": norm2}
    call = _leaving_alone(layers, learner_block)

    def attend(h, mask):
        return attention(h, h, h, mask=mask)

    def block(x, mask, first_norm=norm1, second_norm=norm2, masked=True):
        x = x + attend(first_norm(x), mask if masked else None)
        return x + ffn(second_norm(x))

    def post_norm(x, mask):
        x = norm1(x + attend(x, mask))
        return norm2(x + ffn(x))

    def no_residual(x, mask):
        return ffn(norm2(attend(norm1(x), mask)))

    failures, passed = [], 0
    for name, shape, lengths in (
        ("2 sources, the second with 2 pads", (2, 5, d_model), [5, 3]),
        ("1 source, no pads", (1, 4, d_model), [4]),
    ):
        x = torch.randn(*shape, generator=generator) * 2 + 0.5
        mask = torch.arange(shape[1])[None, None, :] < torch.tensor(lengths)[:, None, None]
        with torch.no_grad():
            mistakes = {
                "that is post-norm: normalise each sublayer's input, not the sum": post_norm(
                    x, mask
                ),
                "the padding mask is missing: pass mask= to the self-attention, or every "
                "position reads the pads": block(x, mask, masked=False),
                "norm1 goes before the attention and norm2 before the FFN, one each": block(
                    x, mask, norm2, norm1
                ),
                "the same LayerNorm twice: norm2 belongs before the FFN": block(
                    x, mask, norm1, norm1
                ),
                "the residuals are missing: add each sublayer's input back": no_residual(x, mask),
            }
        passed += run_case(
            name,
            lambda x, mask: call(x, mask, attention, ffn, norm1, norm2),
            (x, mask),
            lambda x, mask: tested(x, mask),
            failures,
            atol=1e-5,
            hint="pre-norm: x + attention(norm1(x)) with the mask, then x + ffn(norm2(x))",
            mistakes=mistakes,
            forbidden={
                "EncoderBlock.forward": EncoderBlock.forward,
                "DecoderBlock.forward": DecoderBlock.forward,
                "the Residual module": Residual.forward,
            },
            names=("x", "mask"),
        )
    return report(failures, passed)


@exercise_checker
def check_pre_norm_decoder_block(learner_block: Callable) -> bool:
    """learner_block(y, memory, tgt_mask, src_mask, self_attention, cross_attention, ffn, norm1,
    norm2, norm3) -> a pre-norm decoder block's output (B, T, d_model): masked self-attention
    (tgt_mask), cross-attention to the memory (src_mask), then the FFN, each in a pre-norm
    residual connection with its own LayerNorm (norm1, norm2, norm3). The memory is read as it
    is: the encoder's final LayerNorm has already normalised it."""
    generator = torch.Generator().manual_seed(70)
    torch.manual_seed(70)
    d_model = 8
    self_attention = MultiHeadAttention(d_model, num_heads=2)
    cross_attention = MultiHeadAttention(d_model, num_heads=2)
    ffn = PositionWiseFFN(d_model, 16)
    norm1, norm2, norm3 = _random_norm(d_model), _random_norm(d_model), _random_norm(d_model)
    tested = DecoderBlock(d_model, 2, 16, norm_first=True)  # the tested copy, with these layers
    tested.self_attention, tested.cross_attention, tested.ffn = self_attention, cross_attention, ffn
    tested.self_residual.norm, tested.cross_residual.norm = norm1, norm2
    tested.ffn_residual.norm = norm3
    layers = {
        "self_attention": self_attention,
        "cross_attention": cross_attention,
        "ffn": ffn,
        "norm1": norm1,
        "norm2": norm2,
        "norm3": norm3,
    }
    call = _leaving_alone(layers, learner_block)

    def block(y, memory, tgt_mask, src_mask, norms=(norm1, norm2, norm3), norm_memory=False):
        h = norms[0](y)
        y = y + self_attention(h, h, h, mask=tgt_mask)
        h = norms[1](y)
        read = norms[1](memory) if norm_memory else memory
        y = y + cross_attention(h, read, read, mask=src_mask)
        return y + ffn(norms[2](y))

    def post_norm(y, memory, tgt_mask, src_mask):
        y = norm1(y + self_attention(y, y, y, mask=tgt_mask))
        y = norm2(y + cross_attention(y, memory, memory, mask=src_mask))
        return norm3(y + ffn(y))

    def no_residual(y, memory, tgt_mask, src_mask):
        h = norm1(y)
        h = norm2(self_attention(h, h, h, mask=tgt_mask))
        return ffn(norm3(cross_attention(h, memory, memory, mask=src_mask)))

    def self_attention_only(y, memory, tgt_mask, src_mask):
        h = norm1(y)
        y = y + self_attention(h, h, h, mask=tgt_mask)
        return y + ffn(norm3(y))

    failures, passed = [], 0
    for name, batch, T, lengths in (
        ("2 targets of 4, sources of lengths 5 and 3", 2, 4, [5, 3]),
        ("1 target of 3, a source of 5, no pads", 1, 3, [5]),
    ):
        y = torch.randn(batch, T, d_model, generator=generator) * 2 + 0.5
        memory = torch.randn(batch, 5, d_model, generator=generator) * 2 - 0.5
        src_mask = torch.arange(5)[None, None, :] < torch.tensor(lengths)[:, None, None]
        tgt_mask = torch.ones(T, T, dtype=torch.bool).tril().expand(batch, T, T)  # (B, T, T)
        args = (y, memory, tgt_mask, src_mask)
        with torch.no_grad():
            mistakes = {
                "that is post-norm: normalise each sublayer's input, not the sum": post_norm(*args),
                "the causal mask is missing: pass tgt_mask to the self-attention, or each "
                "position reads the ones after it": block(y, memory, None, src_mask),
                "the memory is normalised too: the encoder's final LayerNorm has done that, so "
                "norm2 applies to the decoder's stream only": block(*args, norm_memory=True),
                "the residuals are missing: add each sublayer's input back": no_residual(*args),
                "the cross-attention is missing: between the self-attention and the FFN, the "
                "decoder reads the memory": self_attention_only(*args),
                "one LayerNorm each, in order: norm1 before the self-attention, norm2 before "
                "the cross-attention, norm3 before the FFN": block(
                    *args, norms=(norm1, norm3, norm2)
                ),
            }
            if lengths != [5] * batch:
                mistakes[
                    "the source's padding mask is missing: pass src_mask to the cross-attention"
                ] = block(y, memory, tgt_mask, None)
        passed += run_case(
            name,
            lambda y, memory, tgt_mask, src_mask: call(
                y,
                memory,
                tgt_mask,
                src_mask,
                self_attention,
                cross_attention,
                ffn,
                norm1,
                norm2,
                norm3,
            ),
            args,
            lambda y, memory, tgt_mask, src_mask: tested(y, memory, tgt_mask, src_mask),
            failures,
            atol=1e-5,
            hint="",
            mistakes=mistakes,
            forbidden={
                "EncoderBlock.forward": EncoderBlock.forward,
                "DecoderBlock.forward": DecoderBlock.forward,
                "the Residual module": Residual.forward,
            },
            names=("y", "memory", "tgt_mask", "src_mask"),
        )
    return report(failures, passed)


def _greedy_variant(model, src, bos_id, eos_id, max_steps, **wrong) -> torch.Tensor:
    """Greedy decoding as model.greedy_decode does it, or with one typical mistake."""
    with torch.no_grad():
        memory, src_mask = model.encode(src)
        generated = torch.full((len(src), 1), bos_id, dtype=torch.long)
        finished = torch.zeros(len(src), dtype=torch.bool)
        for _ in range(max_steps):
            logits = model.decode(generated, memory, src_mask)[:, -1]  # (B, vocab)
            if not wrong.get("specials"):
                logits[:, [model.pad_id, bos_id]] = float("-inf")
            next_token = logits.argmax(-1)  # (B,)
            if not wrong.get("no_pads"):
                next_token = next_token.masked_fill(finished, model.pad_id)
            generated = torch.cat([generated, next_token[:, None]], dim=1)
            finished |= next_token == eos_id
            done = finished.any() if wrong.get("any_stop") else finished.all()
            if done and not wrong.get("no_stop"):
                break
    return generated if wrong.get("bos") else generated[:, 1:]


def _greedy_model(seed: int) -> Seq2SeqTransformer:
    """A small untrained model whose greedy outputs end at different steps (seed 0: two of
    five sources write <eos> at step 4, three never; seed 11: all five by step 4)."""
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(10, 8, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=16)
    with torch.no_grad():
        model.output.bias[2] += 0.5  # <eos> a little more likely
    return model.eval()


@exercise_checker
def check_greedy_decode(learner_decode: Callable) -> bool:
    """learner_decode(model, src, bos_id, eos_id, max_steps) -> (B, steps) token ids, as
    model.greedy_decode returns them, without calling it: the most likely token at each step
    (never <pad> or <bos>), <pad> after a sequence's <eos>, and no more steps once every
    sequence has written <eos>; without the <bos>."""
    failures, passed = [], 0
    bos_id, eos_id = 1, 2
    for name, seed, max_steps in (
        ("two of five write <eos>, three never do in 8 steps", 0, 8),
        ("all five write <eos> by step 4 (of 8)", 11, 8),
        ("all five, at most 3 steps", 11, 3),
    ):
        model = _greedy_model(seed)
        generator = torch.Generator().manual_seed(seed)
        src = torch.randint(3, 10, (5, 6), generator=generator)  # (B, S)
        src[1, 4:] = src[3, 3:] = model.pad_id  # right-padded
        args = (model, src, bos_id, eos_id, max_steps)
        mistakes = {
            "after its <eos> a sequence writes <pad>, and the loop stops once every sequence "
            "has written <eos>": _greedy_variant(*args, no_pads=True, no_stop=True),
            "<bos> is the first input, not an output: leave it out": _greedy_variant(
                *args, bos=True
            ),
            "a sequence that has written <eos> writes <pad> from then on": _greedy_variant(
                *args, no_pads=True
            ),
            "stop once every sequence has written <eos>": _greedy_variant(*args, no_stop=True),
            "the loop stopped when the first sequence wrote <eos>: stop only when every "
            "sequence has written <eos>": _greedy_variant(*args, any_stop=True),
            "<pad> and <bos> are never written: set their logits to -inf": _greedy_variant(
                *args, specials=True
            ),
        }
        passed += run_case(
            name,
            _leaving_alone({"model": model}, learner_decode),
            args,
            lambda *args: _greedy_variant(*args),
            failures,
            atol=0.0,
            hint="at each step the most likely token of model.decode at the last position",
            mistakes=mistakes,
            forbidden={"model.greedy_decode": Seq2SeqTransformer._greedy_decode},
            names=("model", "src", "bos_id", "eos_id", "max_steps"),
        )
    return report(failures, passed)
