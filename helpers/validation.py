"""Argument checks shared by the helpers: each names what it expected and what came."""

import numbers

import numpy as np
import torch


def whole_number(value, name: str, minimum: int = 1) -> int:
    """value as an int, if it is a whole number >= minimum (int, numpy or 0-d tensor integer).

    Floats are refused even when whole (2.0): a size that arrives as a float usually comes
    from a division that should have been an integer division.
    """
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point():
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"{name} must be a whole number >= {minimum}, got {value!r} ({type(value).__name__})"
        )
    if value < minimum:
        raise ValueError(f"{name} must be a whole number >= {minimum}, got {value}")
    return int(value)


def tensor(value, name: str, shape: str) -> torch.Tensor:
    """value itself if it is a torch tensor; otherwise an error that says how to make one."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, np.ndarray):
        raise ValueError(
            f"{name} must be a torch.Tensor {shape}, got a numpy array: convert it with "
            f"torch.from_numpy({name})"
        )
    raise ValueError(f"{name} must be a torch.Tensor {shape}, got {type(value).__name__}")


def same_float_dtype(named_tensors: dict) -> None:
    """Every tensor is floating point, all of one dtype and on one device."""
    for name, value in named_tensors.items():
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
