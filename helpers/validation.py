"""Argument checks shared by the helpers: each names what it expected and what came."""

import functools
import math
import numbers
import reprlib
from collections.abc import Callable

import numpy as np
import torch


def whole_number(value: object, name: str, minimum: int = 1) -> int:
    """value as an int, if it is a whole number >= minimum (int, numpy or 0-d tensor integer).

    Floats are refused even when whole (2.0): a size that arrives as a float usually comes
    from a division that should have been an integer division.
    """
    if isinstance(value, torch.Tensor) and value.is_meta:
        raise ValueError(
            f"{name} must be a whole number >= {minimum}, got a meta tensor (no value)"
        )
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"{name} must be a whole number >= {minimum}, got {shown(value)} "
            f"({type(value).__name__})"
        )
    if value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {shown(value)}")
    return int(value)


def at_least(minimum: int) -> Callable[[object, str], int]:
    """The check of a field that holds a whole number >= minimum (coerce_fields)."""
    return functools.partial(whole_number, minimum=minimum)


LARGEST_SIZE = 2**31 - 1  # any size or count of a recipe: more is a typing mistake


def recipe_size(value: object, name: str) -> int:
    """value as an int, if it is a whole number 1..LARGEST_SIZE (a recipe's size or count)."""
    value = whole_number(value, name)
    if value > LARGEST_SIZE:
        raise ValueError(f"{name} must be at most 2^31 - 1 = {LARGEST_SIZE}, got {shown(value)}")
    return value


def one_of(choices: tuple[str, ...]) -> Callable[[object, str], str]:
    """The check of a field that holds one of the strings in choices (coerce_fields): a plain
    str back, as numpy's str_ would be saved as numpy and not load from a checkpoint."""

    def check(value: object, name: str) -> str:
        if not isinstance(value, str) or value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(choices)}, got {shown(value)}")
        return str(value)

    return check


def coerce_fields(instance: object, kinds: dict[str, Callable[[object, str], object]]) -> None:
    """Check a dataclass's fields, in the order given, and store each as its check returns it
    (an int for numpy's ints, a float for an int rate), frozen dataclasses too: kinds maps a
    field's name to its check, called as check(value, name) (whole_number, at_least(0), seed,
    positive_number, probability, flag, ...)."""
    for name, check in kinds.items():
        object.__setattr__(instance, name, check(getattr(instance, name), name))


MOST_LAYERS = 64  # blocks in one stack: the models this series builds have at most 7


def layer_count(value: object, name: str, minimum: int = 1) -> int:
    """value as an int, if it is a whole number minimum..MOST_LAYERS: a stack of more blocks is
    a typing mistake, and building it one module at a time would take minutes."""
    value = whole_number(value, name, minimum)
    if value > MOST_LAYERS:
        raise ValueError(
            f"{name} must be at most {MOST_LAYERS} blocks, got {shown(value)}: a smaller model "
            f"was meant"
        )
    return value


MOST_LAYER_WEIGHTS = 2**28  # one linear layer's weights (1 GiB of float32): more is a typing slip


def layer_weights(rows: int, cols: int, what: str) -> None:
    """A ValueError if a linear layer of rows x cols weights (whole numbers already) would hold
    more than MOST_LAYER_WEIGHTS: building it would ask for gigabytes, or more than exists. On
    the meta device (torch.device("meta") as the default) nothing is allocated: no limit."""
    if rows * cols > MOST_LAYER_WEIGHTS and torch.get_default_device().type != "meta":
        raise ValueError(
            f"{what} would make a layer of {shown(rows)} x {shown(cols)} weights, more than "
            f"2^28 (1 GiB of float32): a size is mistyped"
        )


def head_size(d_model: int, num_heads: int) -> int:
    """d_model // num_heads, the size of each head, if num_heads divides d_model (both whole
    numbers already)."""
    if d_model % num_heads:
        raise ValueError(
            f"d_model ({shown(d_model)}) must be divisible by num_heads ({shown(num_heads)})"
        )
    return d_model // num_heads


def seed(value: object, name: str = "seed") -> int:
    """value as an int, if it is a whole number 0 .. 2^32 - 1: torch's cpu generator reads only
    a seed's low 32 bits, so 2^32 would draw what 0 draws."""
    value = whole_number(value, name, minimum=0)
    if value >= 2**32:
        raise ValueError(
            f"{name} must be below 2^32, got {shown(value)}: torch's cpu generator reads only a "
            f"seed's low 32 bits (2^32 would draw what 0 draws)"
        )
    return value


def tensor(value: object, name: str, shape: str) -> torch.Tensor:
    """value itself if it is a torch tensor; otherwise an error that says how to make one."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        raise ValueError(
            f"{name} must be a torch.Tensor {shape}, got a numpy array: convert it with "
            f"torch.from_numpy({name})"
        )
    raise ValueError(f"{name} must be a torch.Tensor {shape}, got {type(value).__name__}")


def dense_tensor(value: object, name: str, shape: str) -> torch.Tensor:
    """value itself if it is a tensor whose numbers torch reads and computes with: strided (not
    sparse, not nested), with values (not on the meta device), and not float8 (a storage
    format: torch's cpu kernels neither compare nor sum it)."""
    tensor(value, name, shape)
    if value.is_meta or value.is_nested or value.layout != torch.strided:
        kind = "on the meta device (no values)" if value.is_meta else f"{value.layout}"
        kind = "nested" if value.is_nested else kind
        raise ValueError(f"{name} must be an ordinary dense tensor, got one {kind}")
    if value.is_floating_point() and value.element_size() == 1:
        raise ValueError(
            f"{name} must be a tensor torch computes with, got {value.dtype}, a storage format: "
            f"convert it with .float()"
        )
    return value


def same_float_dtype(named_tensors: dict) -> None:
    """Every tensor is floating point, all of one dtype and on one device."""
    for name, value in named_tensors.items():
        tensor(value, name, "")
        if not value.is_floating_point():
            raise ValueError(f"{name} must be floating point, got {value.dtype}")
    dtypes = {name: value.dtype for name, value in named_tensors.items()}
    if len(set(dtypes.values())) > 1:
        listed = ", ".join(f"{name} {dtype}" for name, dtype in dtypes.items())
        raise ValueError(f"inputs must share one dtype, got {listed}: convert them with .to()")
    devices = {name: value.device for name, value in named_tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"inputs must be on one device, got {listed}")


def _finite(value: numbers.Real) -> bool:
    """Whether a real number is finite, including ints too large for a float (they are not)."""
    try:
        return bool(np.isfinite(float(value)))
    except OverflowError:
        return False


def positive_number(value: object, name: str, allow_zero: bool = False) -> float:
    """value as a float, if it is a finite real number > 0 (or >= 0 with allow_zero)."""
    if not isinstance(value, numbers.Real | bool):
        kind = type(value).__name__
        hint = ": tensor.item() gives its number" if isinstance(value, torch.Tensor) else ""
        raise ValueError(f"{name} must be an int or a float, got {shown(value)} (a {kind}{hint})")
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int or a float, got the bool {value}")
    if not _finite(value):
        raise ValueError(f"{name} must be a finite number, got {shown(value)}")
    if value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound}, got {shown(value)}")
    return float(value)


def at_least_zero(value: object, name: str) -> float:
    """value as a float, if it is a finite real number >= 0 (a rate that may be 0)."""
    return positive_number(value, name, allow_zero=True)


MOST_LEARNING_RATE = 1.0  # AdamW moves each weight by up to about this much at every step


def adamw_rates(learning_rate: object, weight_decay: object) -> tuple[float, float]:
    """(learning_rate, weight_decay) as floats, if AdamW can train with them: a learning rate
    in (0, MOST_LEARNING_RATE] and a weight decay >= 0 whose product with it is at most 1."""
    learning_rate = positive_number(learning_rate, "learning_rate")
    weight_decay = positive_number(weight_decay, "weight_decay", allow_zero=True)
    if learning_rate > MOST_LEARNING_RATE:
        raise ValueError(
            f"learning_rate must be at most {MOST_LEARNING_RATE:g}, got {shown(learning_rate)}: "
            "AdamW moves every weight by up to about the learning rate at each step, and the "
            "weights of this series' models are about 1 or less"
        )
    if learning_rate * weight_decay > 1:
        raise ValueError(
            f"weight_decay must be at most 1 / learning_rate = {1 / learning_rate:g}, got "
            f"{shown(weight_decay)}: AdamW multiplies every weight by 1 - learning_rate x "
            "weight_decay at each step, which beyond that flips their signs (and beyond "
            "2 / learning_rate makes them grow without bound)"
        )
    return learning_rate, weight_decay


def probability(value: object, name: str = "dropout") -> float:
    """value as a float in [0, 1): a dropout rate."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < 1:
        raise ValueError(f"{name} must be a probability in [0, 1), got {shown(value)}")
    return float(value)


def flag(value: object, name: str) -> bool:
    """value itself if it is True or False (a string such as 'False' would count as true)."""
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def token_ids(
    value: object, name: str, vocab_size: int | None, shape: str = "(B, n)", dim: int = 2
) -> torch.Tensor:
    """An integer tensor of the given rank whose ids all lie in 0..vocab_size - 1 (any ids, if
    vocab_size is None)."""
    tensor(value, name, shape)
    if value.dim() != dim:
        raise ValueError(f"{name} must be {shape}, got shape {tuple(value.shape)}")
    if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got {value.dtype}")
    if value.dtype not in (torch.int64, torch.int32):  # the only ones nn.Embedding takes
        raise ValueError(f"{name} must be int64 or int32 token ids, got {value.dtype}")
    if value.is_meta:
        raise ValueError(f"{name} is on the meta device: it has a shape but no ids to read")
    if value.is_nested or value.layout != torch.strided:
        kind = "nested" if value.is_nested else value.layout
        raise ValueError(f"{name} must be an ordinary dense tensor, got a {kind} one")
    if vocab_size is not None and value.numel() and (value.min() < 0 or value.max() >= vocab_size):
        raise ValueError(
            f"{name} holds ids from {value.min().item()} to {value.max().item()}, outside the "
            f"vocabulary 0..{vocab_size - 1}"
        )
    return value


def shown(value: object) -> str:
    """value as a message shows it: short, however long, deep or large it is."""
    try:
        return reprlib.repr(value)
    except ValueError:  # an int of more digits than Python prints
        kind = type(value).__name__
        return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} too large to print"


def attention_weights(
    value: object, name: str = "weights", shape: str = "(..., k)"
) -> torch.Tensor:
    """value itself if it holds attention weights: a dense floating-point tensor whose rows (its
    last axis, one per query) lie in 0..1 and sum to 1, to the rounding of its dtype, or are all
    0 (a query with no key allowed, as helpers.attention.masked_softmax returns it)."""
    dense_tensor(value, name, shape)
    if value.dim() == 0 or not value.is_floating_point():
        raise ValueError(
            f"{name} must be floating-point attention weights {shape}, got {value.dtype} of "
            f"shape {tuple(value.shape)}"
        )
    # Reductions only, never a mask or a copy as large as the weights: an expanded view of a
    # few numbers may stand for (n, n) weights that no mask of them would fit in memory.
    weights = value.detach()
    low, high = (weights.amin(), weights.amax()) if weights.numel() else (0, 0)  # NaN: NaN
    if not (math.isfinite(low) and math.isfinite(high)):
        where = tuple((~weights.isfinite()).nonzero()[0].tolist())
        value = "NaN" if weights[where].isnan() else f"{weights[where].item()}"
        raise ValueError(
            f"{name} hold {value} (first at index {where}): attention weights are finite"
        )
    if low < 0 or high > 1:
        where = tuple(((weights < 0) | (weights > 1)).nonzero()[0].tolist())
        raise ValueError(
            f"{name} must be attention weights, each in 0..1, got {weights[where].item()!r} at "
            f"index {where}: raw scores become weights through a softmax over the keys"
        )
    totals = weights.sum(-1).double()  # (...): one per query, summed in the weights' dtype
    tolerance = max(1e-4, 3 * torch.finfo(value.dtype).eps)  # a softmax's rows: within eps / 2
    off = ((totals - 1).abs() > tolerance) & (totals != 0)
    if off.any():
        where = tuple(off.nonzero()[0].tolist())
        which = f"row {where}" if where else "the weights"  # one row, of a 1-D tensor
        raise ValueError(
            f"{name} must be attention weights, each row (the last axis, one per query) summing "
            f"to 1, but {which} sum{'s' if where else ''} to {totals[where].item():.4g}: are the "
            f"keys on the last axis, and the weights taken before dropout?"
        )
    return value


def number_in(value: object, low: float, high: float) -> bool:
    """Whether value is a real number (an int or a float, not a bool) in low..high, finite as a
    float: for the numbers of a checkpoint's logs and history."""
    if type(value) not in (int, float):
        return False
    try:
        return math.isfinite(float(value)) and low <= value <= high
    except OverflowError:  # an int too large for a float
        return False


def weights_readable(model: torch.nn.Module, name: str) -> None:
    """Every weight holds numbers, finite ones: a model built on the meta device, or one whose
    training diverged, would give NaN results or fail inside torch."""
    for key, weight in model.state_dict().items():
        if weight.is_meta:
            raise ValueError(f"{name}'s weight {key} is on the meta device: it holds no values")
        if weight.is_floating_point() and not weight.isfinite().all():
            raise ValueError(f"{name}'s weight {key} holds NaN or inf: its results would be NaN")
