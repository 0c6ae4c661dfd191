"""A task that needs two relations at once, for multi-head attention (chapter 04).

Each sequence is a ring of random tokens; at every position the model must output the
token on its left and the token on its right. One attention layer with two heads can
solve it only if one head looks left and the other right.
"""

import torch
import torch.nn.functional as F
from torch import nn

from helpers import validation
from helpers.attention import MultiHeadAttention
from helpers.contexts import one_torch_thread


def make_neighbour_batch(
    num: int, length: int = 8, vocab: int = 10, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """tokens (num, length); left and right neighbours (num, length), wrapping around."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    num = validation.whole_number(num, "num")
    length = validation.whole_number(length, "length", minimum=2)
    vocab = validation.whole_number(vocab, "vocab")
    tokens = torch.randint(0, vocab, (num, length), generator=generator)
    return tokens, tokens.roll(1, dims=1), tokens.roll(-1, dims=1)


class NeighbourModel(nn.Module):
    """Token embedding + learned position embedding -> one multi-head attention -> two heads
    of output (the left token, the right token). No residual: everything the outputs need
    must come through attention."""

    def __init__(self, vocab: int = 10, length: int = 8, d_model: int = 32, num_heads: int = 2):
        super().__init__()
        vocab, length = (
            validation.whole_number(vocab, "vocab"),
            validation.whole_number(length, "length", 2),
        )
        self.vocab = vocab
        d_model = validation.whole_number(d_model, "d_model")
        self.length = length
        self.token_embedding = nn.Embedding(vocab, d_model)
        self.position_embedding = nn.Parameter(torch.randn(length, d_model))
        self.attention = MultiHeadAttention(d_model, num_heads)
        self.left_output = nn.Linear(d_model, vocab)
        self.right_output = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (B, length)
        _check_tokens(self, tokens)
        x = self.token_embedding(tokens) + self.position_embedding  # (B, length, d_model)
        mixed = self.attention(x, x, x)  # (B, length, d_model)
        return self.left_output(mixed), self.right_output(mixed)  # 2 x (B, length, vocab)


def neighbour_loss(
    model: "NeighbourModel", tokens: torch.Tensor, left: torch.Tensor, right: torch.Tensor
) -> torch.Tensor:
    _check_neighbours(tokens, left, right)
    for name, value in (("left", left), ("right", right)):
        validation.token_ids(value, name, model.vocab)
    left_logits, right_logits = model(tokens)
    return F.cross_entropy(left_logits.flatten(0, 1), left.flatten()) + F.cross_entropy(
        right_logits.flatten(0, 1), right.flatten()
    )


def neighbour_accuracy(
    model: "NeighbourModel", tokens: torch.Tensor, left: torch.Tensor, right: torch.Tensor
) -> float:
    """Share of positions where both neighbours are predicted right."""
    _check_neighbours(tokens, left, right)
    with torch.no_grad():
        left_logits, right_logits = model(tokens)
    correct = (left_logits.argmax(-1) == left) & (right_logits.argmax(-1) == right)
    return correct.float().mean().item()


def train_neighbour_model(
    steps: int = 150, batch_size: int = 128, seed: int = 0, **sizes: int
) -> tuple["NeighbourModel", list[float]]:
    """Adam on fresh batches; returns the model and the loss after every step."""
    steps = validation.whole_number(steps, "steps")
    batch_size = validation.whole_number(batch_size, "batch_size")
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = NeighbourModel(**sizes)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    vocab = model.token_embedding.num_embeddings
    # A model this small trains no faster on several threads, and on a busy CPU much slower
    # (the threads wait for each other at every one of its many small operations): use one.
    with one_torch_thread():
        for _ in range(steps):
            batch = make_neighbour_batch(batch_size, model.length, vocab, generator)
            loss = neighbour_loss(model, *batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return model, losses


def weight_by_offset(weights: torch.Tensor, offsets: tuple[int, ...] = (-1, 0, 1)) -> torch.Tensor:
    """Mean weight each head puts on the key at position i + offset (around the ring).

    weights: (B, heads, length, length) -> (heads, len(offsets)).
    """
    validation.tensor(weights, "weights", "(B, heads, length, length)")
    if weights.dim() != 4 or weights.shape[-1] != weights.shape[-2] or not len(weights):
        raise ValueError(
            f"weights must be (B, heads, length, length) with B >= 1, got {tuple(weights.shape)}"
        )
    if isinstance(offsets, str) or not offsets:
        raise ValueError(f"offsets must be a non-empty sequence of whole numbers, got {offsets!r}")
    offsets = [validation.whole_number(o, "offset", minimum=-weights.shape[-1]) for o in offsets]
    length = weights.shape[-1]
    positions = torch.arange(length)
    columns = [weights[..., positions, (positions + offset) % length] for offset in offsets]
    return torch.stack([c.mean(dim=(0, 2)) for c in columns], dim=-1)


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_tokens(model: NeighbourModel, tokens: object) -> None:
    validation.token_ids(tokens, "tokens", model.vocab, f"(B, {model.length})")
    if tokens.shape[1] != model.length:
        raise ValueError(f"tokens must be (B, {model.length}), got {tuple(tokens.shape)}")


def _check_neighbours(tokens, left, right) -> None:
    for name, value in (("tokens", tokens), ("left", left), ("right", right)):
        validation.tensor(value, name, "(B, n)")
    if not (tokens.shape == left.shape == right.shape) or tokens.dim() != 2 or not len(tokens):
        raise ValueError(
            f"tokens {tuple(tokens.shape)}, left {tuple(left.shape)} and right "
            f"{tuple(right.shape)} must be one (B, n) shape with batch >= 1"
        )
