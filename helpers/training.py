"""Losses and loops for training sequence models."""

import math
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from helpers import validation


def sequence_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy over the target positions that are not pads.

    logits (B, T, vocab), targets (B, T). A pad position still has an output row (its query
    attends like any other), but its target is not a token to predict: it counts for nothing.
    With label_smoothing = eps, each target is the mixture (1 - eps) one-hot + eps uniform over
    the vocabulary (torch's definition), which keeps the model from growing ever more certain.
    """
    validation.tensor(logits, "logits", "(B, T, vocab)")
    validation.tensor(targets, "targets", "(B, T)")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (B, T, vocab) and targets (B, T): got {tuple(logits.shape)} "
            f"and {tuple(targets.shape)}"
        )
    validation.token_ids(targets, "targets", logits.shape[-1], "(B, T)")
    pad_id = validation.whole_number(pad_id, "pad_id", minimum=0)
    label_smoothing = validation.probability(label_smoothing, "label_smoothing")
    if (targets == pad_id).all():
        raise ValueError("every target is a pad: there is nothing to compute a loss over")
    return F.cross_entropy(
        logits.flatten(0, 1),
        targets.flatten(),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


def learning_rate_factor(step: int, steps: int, warmup: int) -> float:
    """Linear warm-up over `warmup` steps, then a cosine decay to 5% at the last step."""
    step = validation.whole_number(step, "step", minimum=0)
    steps = validation.whole_number(steps, "steps")
    warmup = validation.whole_number(warmup, "warmup", minimum=0)
    return _learning_rate_factor(step, steps, warmup)


def _learning_rate_factor(step: int, steps: int, warmup: int) -> float:
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, steps - warmup))  # stays at 5% after the end
    return 0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress))


def _adamw_with_schedule(model: torch.nn.Module, recipe) -> tuple:
    """(AdamW over the model's weights, its warm-up-then-cosine schedule) for a recipe whose
    fields (learning_rate, weight_decay, steps, warmup_steps) its own door checked."""
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, recipe.steps, recipe.warmup_steps)
    )
    return optimizer, schedule


def _clipped_step(model: torch.nn.Module, optimizer, schedule, loss: torch.Tensor) -> None:
    """One update: the loss's gradients, clipped to a norm of 1, then the optimizer's and the
    schedule's step."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()


def train_seq2seq(
    model: torch.nn.Module,
    next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    steps: int,
    lr: float,
    warmup: int,
    pad_id: int,
    progress: bool = True,
) -> dict:
    """Teacher-forced training: the decoder reads the target shifted right, and every position
    predicts its next token in one causal pass. next_batch() -> (src (B, S), tgt (B, T)),
    tgt starting with <bos>. Returns the loss of every step and the seconds taken."""
    steps = validation.whole_number(steps, "steps")
    lr = validation.positive_number(lr, "lr")
    if not isinstance(model, torch.nn.Module) or not callable(next_batch):
        raise ValueError("model must be a torch module and next_batch a function of no arguments")
    warmup = validation.whole_number(warmup, "warmup", minimum=0)
    pad_id = validation.whole_number(pad_id, "pad_id", minimum=0)  # before a step, not after
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, steps, warmup)
    )
    device = next(model.parameters()).device
    model.train()
    losses = []
    start = time.perf_counter()
    bar = tqdm(range(steps), desc="training", disable=not progress)
    for step in bar:
        src, tgt = _checked_batch(next_batch())
        src, tgt = src.to(device), tgt.to(device)
        logits = model(src, tgt[:, :-1])  # (B, T - 1, vocab): predicts tgt[:, 1:]
        loss = sequence_cross_entropy(logits, tgt[:, 1:], pad_id)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return {"loss": losses, "seconds": time.perf_counter() - start}


def check_deadline(deadline_minutes: object) -> None:
    """A training deadline in minutes: a number > 0, or None for none."""
    if deadline_minutes is not None:
        validation.positive_number(deadline_minutes, "deadline_minutes (None: no deadline)")


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _checked_batch(batch):
    if not (
        isinstance(batch, tuple | list)
        and len(batch) == 2
        and all(isinstance(tokens, torch.Tensor) for tokens in batch)
    ):
        raise ValueError(f"next_batch() must return (src, tgt), two tensors; got {type(batch)}")
    return batch
