"""The settings a helper computes under, each set for a with block and put back after it,
whatever happens inside: one torch thread, a model in evaluation mode, torch's global random
numbers left as they were, float32 with gradients on for training, and torch as a fresh
session has it (no inference mode, autocast or other default device) for what is shown."""

import contextlib
import functools
from collections.abc import Iterator

import torch
from torch import nn


@contextlib.contextmanager
def one_torch_thread() -> Iterator[None]:
    """Run torch on one thread inside the block: a small model's many small operations gain
    nothing from more (on a busy CPU the threads wait for each other at every one), one thread
    gives the same numbers on every machine's thread count, and with a training notebook running
    beside an explorer, torch's thread pools would fight over the cores (one redraw took seconds
    instead of tens of milliseconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """model in eval mode (no dropout) inside the with block; after it, each of its modules in
    its own mode as before (model.train(was_training) would put them all in the model's)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for module, training in modes:
            module.training = training


def keeping_random_state() -> contextlib.AbstractContextManager:
    """torch's global random numbers after the block as they were before it: a helper that
    builds a model draws its first weights from them, and the caller's random numbers stay
    theirs (the cpu generator's; this series builds its models on the cpu)."""
    return torch.random.fork_rng(devices=[])


@contextlib.contextmanager
def trainable_float32() -> Iterator[None]:
    """Inside, models are built in float32 with gradients on, so that they can be trained,
    whatever the caller set (torch.no_grad(), torch.inference_mode(), another default dtype);
    the caller's settings are put back."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.inference_mode(False), torch.enable_grad():
            yield
    finally:
        torch.set_default_dtype(dtype)


@contextlib.contextmanager
def plain_torch() -> Iterator[None]:
    """Torch inside the block as a fresh session has it, whatever the caller entered: no
    inference mode, no cpu autocast, float32 the default dtype (where the caller set float16,
    say), and no default device (tensors are made on the cpu, where torch.set_default_device
    or a `with torch.device(...)` block chose meta, say); the caller's are put back after it.
    An explorer or a checker computes what it shows the same way in any cell; without this, a
    caller's autocast would turn its float32 into bfloat16."""
    from torch.utils._device import DeviceContext

    stack = [
        torch._C._pop_torch_function_stack() for _ in range(torch._C._len_torch_function_stack())
    ]
    stack.reverse()  # bottom first
    kept = [mode for mode in stack if not isinstance(mode, DeviceContext)]
    chosen = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    torch._GLOBAL_DEVICE_CONTEXT.device_context = None  # set aside, not left: it is off the stack
    for mode in kept:
        torch._C._push_on_torch_function_stack(mode)
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        with torch.inference_mode(False), torch.autocast("cpu", enabled=False):
            yield
    finally:
        torch.set_default_dtype(dtype)
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
        for mode in stack:
            torch._C._push_on_torch_function_stack(mode)
        torch._GLOBAL_DEVICE_CONTEXT.device_context = chosen


def plainly(function):
    """function run under plain_torch(): a public method of an explorer, say."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        with plain_torch():
            return function(*args, **kwargs)

    return run
