"""What every checker shares: run the learner's function on a case, compare its values and the
gradients it passes back with a reference, refuse in-place changes and forbidden calls, and
report "Correct" or "Not yet" with the reason. Nothing here raises at a wrong answer."""

import contextlib
import functools
import importlib
import inspect
import io
import numbers
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.modules import module as module_hooks
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._python_dispatch import _pop_mode as _pop_dispatch_mode

from helpers.contexts import plain_torch


class OperationsWatcher(TorchDispatchMode):
    """A dispatch mode that watches the operations a learner's function runs. torch imports its
    compiler (torch._dynamo: seconds on a cold start) at the first operation under a dispatch
    mode: it is imported here, when the mode is made, so that the import does not count
    against the answer's time limit."""

    def __init__(self):
        super().__init__()
        importlib.import_module("torch._dynamo")


class Refused(Exception):
    """Raised by a checker's own wrapper around the learner's function: its message is the
    whole diagnosis."""


class Verdict:
    """A checker's answer: true for "Correct", false for "Not yet". It shows nothing in a
    notebook, where the checker has printed its report already, so a cell that ends with a
    checker call shows the report alone."""

    def __init__(self, correct: bool):
        self.correct = bool(correct)

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return f"Verdict({self.correct})"

    def _ipython_display_(self) -> None:
        """Displayed as nothing."""


ANSWER_TIME_LIMIT_SECONDS = 5.0  # per call; the reference answers each in milliseconds


def advise(failures: list, name: str, failure: str, words: str, advice: str) -> None:
    """Add advice to the last failure if it is case `name`'s and begins with `failure`, with
    `words` in what follows the case's name (e.g. what the learner's function raised)."""
    prefix = f"{name}: "
    if (
        failures
        and failures[-1].startswith(f"{prefix}{failure}")
        and words in failures[-1][len(prefix) :]
    ):
        failures[-1] += f"; {advice}"


def exercise_checker(check: Callable) -> Callable:
    """A checker that answers functions not written yet (their body still raises
    NotImplementedError, as a "your turn" cell's does) with one friendly line instead of a
    report of every case they failed, and a function that does not return within
    ANSWER_TIME_LIMIT_SECONDS with one line that says so. Every function passed to the checker
    is watched."""

    @functools.wraps(check)
    def checked(*answers, **options) -> Verdict:
        not_written: list[str] = []
        replaced: list[str] = []  # torch's own functions an answer replaced (put back)

        def watched(function):
            @functools.wraps(function)
            def call(*inputs, **named):
                torch_functions = _torch_functions()
                try:
                    with _time_limit(ANSWER_TIME_LIMIT_SECONDS):
                        return function(*inputs, **named)
                except NotImplementedError as error:
                    name = f"`{getattr(function, '__name__', 'your function')}`"
                    if not error.args and name not in not_written:  # the your-turn cell's bare
                        not_written.append(name)  # raise; torch's own say what they lack
                    raise
                except AnswerTimedOut as stopped:
                    stopped.name = getattr(function, "__name__", "your function")
                    raise
                except KeyboardInterrupt:
                    raise
                except BaseException as error:  # GeneratorExit, SystemExit, a class of its own
                    if isinstance(error, Exception) and _prints(error):
                        raise
                    raise _as_exception(error) from None
                finally:
                    for name in _put_back(torch_functions):
                        replaced.extend([name] if name not in replaced else [])

            return call

        not_callable = _not_a_function(check, answers)
        if not_callable:
            print(f"Not yet: {not_callable}")
            return Verdict(False)
        answers = tuple(watched(a) if callable(a) else a for a in answers)
        _PROBED.clear()
        printed = io.StringIO()
        try:  # the caller's inference mode, autocast or device would change the cases
            with contextlib.redirect_stdout(printed), plain_torch():
                verdict = check(*answers, **options)
        except AnswerTimedOut as stopped:
            print(
                f"Not yet: `{stopped.name}` did not return within "
                f"{ANSWER_TIME_LIMIT_SECONDS:g} s on one case, where the reference takes "
                f"milliseconds: look for a loop that never ends, or one that runs over every "
                f"entry of a tensor, or a call that is slow the first time it runs (a large "
                f"import, torch.use_deterministic_algorithms) and that the answer does not "
                f"need (the other cases were not run)."
            )
            return Verdict(False)
        finally:
            if not (not_written or replaced):
                print(printed.getvalue(), end="")
        if replaced and not not_written:
            print(
                f"Not yet: your function replaces {', '.join(replaced[:3])}, which torch, the "
                f"checker or the helpers call (each is put back after the call): every later "
                f"call of it would run the replacement; give your own function another name."
            )
            return Verdict(False)
        if not_written:
            names = " and ".join(not_written)
            verb, pronoun = ("is", "it") if len(not_written) == 1 else ("are", "they")
            print(
                f"Not yet: {names} {verb} not written yet ({pronoun} raised NotImplementedError)."
            )
            return Verdict(False)
        return Verdict(verdict)

    return checked


def _as_exception(error: BaseException) -> Exception:
    """An exception of the same name that `except Exception` catches and that prints, for one
    that is not an Exception (GeneratorExit, SystemExit, a class of the answer's own) or whose
    message itself raises: the checker reports it as the answer's error instead of stopping."""
    kind = type(type(error).__name__, (Exception,), {"__module__": type(error).__module__})
    if _prints(error):
        return kind(*error.args)
    return kind("(its message could not be shown: printing it raised an error too)")


def _prints(error: BaseException) -> bool:
    """Whether str(error) gives text (an answer's exception may raise in its own __str__)."""
    try:
        return isinstance(str(error), str)
    except BaseException:
        return False


TORCH_NAMESPACES = {
    "torch": torch,
    "torch.nn.functional": F,
    "torch.Tensor": torch.Tensor,
    "torch.linalg": torch.linalg,
    "torch.special": torch.special,
    "torch.fft": torch.fft,
    "torch.nn.init": torch.nn.init,
}
FOLLOWS_THE_DEFAULT_DTYPE = {("torch", "Storage")}  # torch rebinds it in set_default_dtype
_MISSING = object()


def _namespaces() -> dict:
    """The namespaces an answer must leave as they were: torch's, and every helpers module and
    class (the checkers, this framework, and the helpers and models their references use)."""
    helpers = {
        name: module
        for name, module in list(sys.modules.items())
        if name == "helpers" or name.startswith("helpers.")
    }
    classes = {
        f"{name}.{value.__qualname__}": value
        for name, module in helpers.items()
        for value in list(vars(module).values())
        if isinstance(value, type) and value.__module__ == name
    }
    return {**TORCH_NAMESPACES, **helpers, **classes}


def _torch_functions() -> dict:
    """{name of a namespace: (it, a copy of what it holds)} for _namespaces()."""
    return {space: (namespace, dict(vars(namespace))) for space, namespace in _namespaces().items()}


def _put_back(before: dict) -> list[str]:
    """The names that no longer hold what they held before, each put back; and on torch.Tensor
    and torch.nn.functional, the names an answer added (over an inherited method, say), each
    removed."""
    changed = []
    for space, (namespace, names) in before.items():
        now = vars(namespace)
        for name, value in names.items():
            if (space, name) in FOLLOWS_THE_DEFAULT_DTYPE:
                continue
            found = now.get(name, _MISSING)
            if found is not value and getattr(found, "__wrapped__", None) is not value:
                setattr(namespace, name, value)  # (torch's compiler wraps some on its import)
                changed.append(f"{space}.{name}")
        if isinstance(namespace, type) or namespace is F:  # torch.Tensor's and helpers' classes
            for name in set(now) - set(names):
                delattr(namespace, name)
                changed.append(f"{space}.{name}")
    return changed


def _not_a_function(check: Callable, answers: tuple) -> str | None:
    """What is wrong when an answer the checker calls is not a function (None, say, or what
    the function returned: check_f(f()) instead of check_f(f))."""
    parameters = list(inspect.signature(check).parameters.values())
    functions = [p for p in parameters if p.annotation in (Callable, "Callable")]
    for position, (parameter, answer) in enumerate(zip(parameters, answers, strict=False)):
        if parameter in functions and not callable(answer):
            which = f" (argument {position + 1})" if len(functions) > 1 else ""
            return (
                f"{check.__name__} takes your function itself, as in {check.__name__}"
                f"(my_function), with no brackets after its name; got {_shown(answer)}{which}"
            )
    return None


def _shown(value: object) -> str:
    """A short description of value: its repr, or its type where the repr is long."""
    try:
        text = repr(value)
    except Exception:  # the learner's object may fail in its own repr
        text = ""
    return text if text and len(text) <= 40 else f"a {type(value).__name__}"


class AnswerTimedOut(BaseException):
    """Raised inside the learner's function once it has run for the time limit. Not an
    Exception, so that an answer's own `except Exception:` does not swallow it, nor does a
    checker's handling of answers that raise."""

    name = "your function"


_limits_running = threading.local()
EXERCISES = str(Path(__file__).resolve().parent)  # the checkers' own code, never stopped


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Stop the block with AnswerTimedOut after `seconds`, and every half second after that
    (an answer may catch it with a bare `except:`). Where Python's interval timer cannot be
    used (Windows, or a thread other than the main one) a timer thread interrupts the main
    thread instead. A limit inside another limit is the outer one's."""
    if getattr(_limits_running, "active", False):
        yield
        return
    _limits_running.active = True
    try:
        if threading.current_thread() is not threading.main_thread():
            yield  # nothing can interrupt another thread: no limit there
        elif hasattr(signal, "setitimer"):
            with _interval_timer(seconds):
                yield
        else:
            with _interrupting_timer(seconds):
                yield
    finally:
        _limits_running.active = False


OWN_TRACERS = ("profile", "stop_every_line")  # the names of the checker's hook functions


def _importing(frame) -> bool:
    """Whether the answer is importing a module (between frame and the checker's own frames):
    stopped there, the import would leave the module half-made in sys.modules for the rest of
    the session. An import around the checker itself does not count. Where the time runs out
    inside one of the checker's hooks, which run on top of the answer's frames, the answer's
    frames are those below the hook."""
    hook = frame
    while hook is not None and not (
        hook.f_code.co_filename == __file__ and hook.f_code.co_name in OWN_TRACERS
    ):
        hook = hook.f_back
    if hook is not None:
        frame = hook.f_back
    while frame is not None and not frame.f_code.co_filename.startswith(EXERCISES):
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _interval_timer(seconds: float):
    """Past the limit, AnswerTimedOut is raised by the timer and then at every line the answer's
    own code runs, so that an answer's bare `except:` that swallows one meets the next at once."""
    expired = False

    def stop_every_line(frame, event, arg):
        if not expired or frame.f_code.co_filename.startswith(EXERCISES):
            return None
        if _importing(frame):  # an import's own lines run at full speed, untraced
            return None
        if event == "line":
            raise AnswerTimedOut
        return stop_every_line

    def stop(signum, frame):
        nonlocal expired
        importing = _importing(frame)
        if not expired:
            expired = True
            sys.settrace(stop_every_line)  # the frames the answer calls from now on
            while frame is not None and not frame.f_code.co_filename.startswith(EXERCISES):
                frame.f_trace, frame.f_trace_lines = stop_every_line, True  # and those running
                frame = frame.f_back
        if not importing:  # an import stopped halfway leaves its module half-made
            raise AnswerTimedOut

    previous = signal.signal(signal.SIGALRM, stop)
    previous_trace = sys.gettrace()
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if expired:
            expired = False
            sys.settrace(previous_trace)


@contextlib.contextmanager
def _interrupting_timer(seconds: float):
    """The main thread gets a KeyboardInterrupt from the timer thread; one that comes after
    the timer fired is read as the time limit, any other passes through as the learner's."""
    import _thread

    fired = threading.Event()

    def interrupt():
        fired.set()
        _thread.interrupt_main()

    timer = threading.Timer(seconds, interrupt)
    timer.start()
    try:
        yield
    except KeyboardInterrupt:
        if fired.is_set():
            raise AnswerTimedOut from None
        raise
    finally:
        timer.cancel()


def report(failures: list[str], passed: int) -> bool:
    if failures:
        print(f"Not yet: {len(failures)} of {len(failures) + passed} checks failed.")
        for failure in failures:
            print(f"  - {failure}")
        return False
    print(f"Correct: all {passed} checks passed.")
    return True


def _as_answer(got):
    """(tensor, None), or (None, what is wrong with the learner's return value)."""
    if got is None:
        return None, "returned None: did the function forget to `return` its result?"
    if isinstance(got, tuple | list) and got and isinstance(got[0], torch.Tensor):
        return None, f"returned a {type(got).__name__} of {len(got)} tensors, expected one tensor"
    if not isinstance(got, torch.Tensor):
        return None, _not_a_tensor(got)
    if got.layout != torch.strided or got.is_nested or got.is_meta or got.is_complex():
        kind = "nested" if got.is_nested else "complex" if got.is_complex() else None
        kind = kind or ("meta" if got.is_meta else "sparse")
        return None, f"returned a {kind} tensor, expected an ordinary real one"
    return got, None


def _not_a_tensor(got: object) -> str:
    if isinstance(got, np.ndarray | np.generic):
        how = "a numpy value (.numpy() leaves torch)"
    elif isinstance(got, numbers.Number):
        how = f"a Python {type(got).__name__}, {got!r:.12} (.item() or float() leave torch)"
    elif isinstance(got, list):
        how = "a list (.tolist() leaves torch)"
    else:
        how = f"a {type(got).__name__}"
    return (
        f"returned {how}, expected a tensor: keep the result in torch, where its dtype, its "
        f"shape and the gradients flowing back are kept"
    )


def _learner_inputs(args: tuple) -> tuple[tuple, list]:
    """Fresh inputs for one call: each floating tensor is a copy of a leaf that records
    gradients (a copy, so that an in-place change is the learner's to own, not autograd's
    error about leaves). Returns (inputs, leaves), leaves[i] None for other arguments."""
    inputs, leaves = [], []
    for arg in args:
        if isinstance(arg, torch.Tensor) and arg.is_floating_point():
            leaf = arg.detach().clone().requires_grad_()
            inputs.append(leaf.clone())
            leaves.append(leaf)
        else:
            inputs.append(arg.clone() if isinstance(arg, torch.Tensor) else arg)
            leaves.append(None)
    return tuple(inputs), leaves


def _code_text(code) -> tuple:
    """What a function's code does, wherever it was compiled: its name, bytecode, names and
    constants (its functions' too), not its file and lines, so that a copy of a forbidden
    function's source, run through exec, is still that function."""
    constants = tuple(
        _code_text(constant) if inspect.iscode(constant) else (type(constant), constant)
        for constant in code.co_consts
    )
    return code.co_name, code.co_code, code.co_names, code.co_varnames, constants


def forbidden_functions(module, *names: str) -> dict[str, Callable]:
    """{"<module>.<name>": the function} for those of the names the module has, for
    run_case's forbidden: a dotted name reads a class's method, and a private core is refused as
    its public door is."""
    found = {}
    for name in names:
        value = module
        for part in name.split("."):
            value = getattr(value, part, None)
        if callable(value):
            found[f"{module.__name__}.{name}"] = value
    return found


@contextlib.contextmanager
def recording_calls(forbidden: dict[str, Callable]):
    """Record which of the forbidden functions run inside the block, however they were
    imported (Python functions by their code, torch's C functions by identity)."""
    codes = {
        _code_text(f.__code__): label for label, f in forbidden.items() if hasattr(f, "__code__")
    }
    builtins = {id(f): label for label, f in forbidden.items() if not hasattr(f, "__code__")}
    seen: list[str] = []
    texts: dict = {}  # code object -> its text, each worked out once

    def profile(frame, event, arg):
        if event == "call":
            code = frame.f_code
            text = texts.get(code) or texts.setdefault(code, _code_text(code))
            if text in codes:
                seen.append(codes[text])
        elif event == "c_call" and id(arg) in builtins:
            seen.append(builtins[id(arg)])

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        if sys.getprofile() is not profile:
            seen.insert(0, PROFILE_SWITCHED)
        if previous is not None and not callable(previous) and hasattr(previous, "enable"):
            previous.enable()  # cProfile's Profile (%prun): its own hook, not a function
        else:
            sys.setprofile(previous)


PROFILE_SWITCHED = "sys.setprofile"  # an answer that switched off the watch recording_calls keeps


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal shapes and entries, NaN equal to NaN (an input may hold NaN on purpose)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)
    return torch.equal(a, b)


def _argument_name(names: tuple, index: int) -> str:
    return names[index] if index < len(names) else f"argument {index + 1}"


IN_PLACE_OPERATORS = {
    f"__i{name}__"
    for name in ("add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "and", "or")
} | {"__ixor__", "__ilshift__", "__irshift__", "__setitem__"}
NOT_WRITES = {"requires_grad_", "detach_", "share_memory_", "rename_"}  # flags, not values


class WritesToInputs(TorchFunctionMode):
    """Records which inputs an operation writes to in place, by their memory: also through an
    alias whose writes autograd's version counter does not see (x.data.mul_(1))."""

    def __init__(self, inputs: tuple):
        super().__init__()
        self.written: set[int] = set()
        self.memory = {}  # the address of each input's storage -> the input's index
        for index, x in enumerate(inputs):
            if _has_own_memory(x):
                self.memory.setdefault(x.untyped_storage().data_ptr(), index)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        in_place = name in IN_PLACE_OPERATORS or (
            name.endswith("_") and not name.endswith("__") and name not in NOT_WRITES
        )
        out = kwargs.get("out")
        targets = ([args[0]] if in_place and args else []) + (
            list(out) if isinstance(out, tuple | list) else [out]
        )
        for target in targets:
            if _has_own_memory(target):
                index = self.memory.get(target.untyped_storage().data_ptr())
                if index is not None:
                    self.written.add(index)
        return func(*args, **kwargs)


def _has_own_memory(x: object) -> bool:
    return (
        isinstance(x, torch.Tensor)
        and x.layout == torch.strided
        and not (x.is_meta or x.is_nested)
        and x.untyped_storage().nbytes() > 0
    )


def _version_and_storage(x: object) -> tuple | None:
    """A tensor's version counter (which each in-place operation bumps) and the address of its
    storage (which `.data =` and set_() replace without a bump); None for anything else."""
    if not isinstance(x, torch.Tensor):
        return None
    return x._version, x.untyped_storage().data_ptr()


def _changed_in_place(
    args: tuple, inputs: tuple, versions: list, names: tuple, written: set = frozenset()
) -> str | None:
    for index, (arg, given, version) in enumerate(zip(args, inputs, versions, strict=True)):
        if not isinstance(given, torch.Tensor):
            continue
        if not _same_tensor(given.detach(), arg) or index in written:
            pass  # named below, with the other in-place changes
        elif given.untyped_storage().data_ptr() != version[1]:
            return (
                f"replaces the storage of its input `{_argument_name(names, index)}` "
                f"({_argument_name(names, index)}.data = ..., or set_()): the caller's tensor "
                f"would no longer hold the memory it was given; work on a copy instead"
            )
        changed = not _same_tensor(given.detach(), arg)
        if changed or given._version != version[0] or index in written:
            name = _argument_name(names, index)
            how = (
                "changes its input `{}` in place"
                if changed
                else "runs an in-place operation on its input `{}`, which changes no value but "
                "still counts: autograd refuses it on a tensor that needs gradients, or whose "
                "values a backward pass needs, so the caller's tensors are not to be written to"
            ).format(name)
            return (
                f"{how} (an operation ending in _, such as masked_fill_ or clamp_, or an "
                f"assignment into it): the caller's tensor must stay as it was, so work on a "
                f"copy (masked_fill, without the underscore, returns one)"
            )
    return None


def _autograd_state(tensors: tuple | list) -> list:
    """(requires_grad, .grad) of each tensor, .grad None for a tensor that is not a leaf (it
    holds none); None for anything else."""
    return [
        (t.requires_grad, t.grad if t.is_leaf else None, tensor_hooks(t))
        if isinstance(t, torch.Tensor)
        else None
        for t in tensors
    ]


_CHECKERS_OWN_HOOKS: set[int] = set()  # the handle ids of register_checker_hook's hooks


def register_checker_hook(tensor: torch.Tensor, hook: Callable) -> None:
    """tensor.register_hook(hook) for a checker's own look at a gradient, which a learner's call
    is not blamed for leaving on its input."""
    _CHECKERS_OWN_HOOKS.add(tensor.register_hook(hook).id)


def tensor_hooks(tensor: torch.Tensor) -> tuple:
    """What a learner's call may leave registered on a caller's tensor: (retains_grad, the
    keys of its gradient hooks but the checker's own, of its post-accumulate-grad hooks)."""
    return (
        tensor.retains_grad,
        tuple(key for key in tensor._backward_hooks or () if key not in _CHECKERS_OWN_HOOKS),
        tuple(getattr(tensor, "_post_accumulate_grad_hooks", None) or ()),
    )


def _autograd_changed(tensors: tuple | list, before: list, names: tuple) -> str | None:
    """What the learner's call changed of the tensors' requires_grad or .grad, each put back
    where it can be; None where nothing changed. names: the arguments', for the messages."""
    for index, (tensor, state) in enumerate(zip(tensors, before, strict=True)):
        if state is None:
            continue
        requires_grad, grad, hooks = state
        name = _argument_name(names, index)
        if tensor_hooks(tensor) != hooks:
            return (
                f"leaves a hook on its input `{name}` (register_hook, "
                f"register_post_accumulate_grad_hook or retain_grad() on the caller's tensor): "
                f"it would run, or keep a gradient, in every later backward pass of the caller's; "
                f"look at a gradient on a tensor of your own (x.clone()), or remove the hook "
                f"before returning"
            )
        if tensor.requires_grad != requires_grad:
            if tensor.is_leaf:
                tensor.requires_grad_(requires_grad)
            return (
                f"switches requires_grad {'off' if requires_grad else 'on'} for its input "
                f"`{name}` (requires_grad_() or detach_() on the caller's tensor): whether the "
                f"caller's tensor records gradients is the caller's to decide, so leave it as it "
                f"came (x.detach() or x.clone() gives a tensor of your own to change)"
            )
        if tensor.is_leaf and tensor.grad is not grad:
            tensor.grad = grad
            return (
                f"fills the .grad of `{name}` (a backward pass inside the function: .backward() "
                f"fills the .grad of every leaf the result comes from, the caller's tensors and "
                f"weights, and a later optimizer step would apply it): return the result and "
                f"leave the backward pass to the caller (torch.autograd.grad(..., "
                f"retain_graph=True) looks at a gradient without filling any .grad)"
            )
    return None


def _value_problem(got: torch.Tensor, expected: torch.Tensor, atol: float) -> str | None:
    if got.shape != expected.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
    if got.dtype != expected.dtype:
        why = "a boolean mask" if expected.dtype == torch.bool else "keep the input's dtype"
        return f"dtype {got.dtype}, expected {expected.dtype} ({why})"
    got, expected = got.detach(), expected.detach()
    if torch.isnan(got).any() and not torch.isnan(expected).any():
        where = tuple(torch.nonzero(torch.isnan(got))[0].tolist())
        return f"NaN at index {where}"
    error = (got.double() - expected.double()).abs().nan_to_num(0.0)
    if error.numel() and error.max() > atol:
        where = tuple(torch.nonzero(error == error.max())[0].tolist())
        mine, theirs = told_apart(got[where].item(), expected[where].item())
        return f"at index {where} got {mine}, expected {theirs}"
    return None


def told_apart(got: float, expected: float) -> tuple[str, str]:
    """The two numbers to 4 significant digits, or to as many more as tell them apart."""
    for digits in range(4, 18):
        mine, theirs = f"{got:.{digits}g}", f"{expected:.{digits}g}"
        if mine != theirs:
            break
    return mine, theirs


def _input_gradients(output: torch.Tensor, upstream: torch.Tensor, inputs: list) -> tuple:
    """d(sum(output * upstream)) / d(each input); None for an input the output does not use."""
    loss = (output * upstream.to(output.dtype)).sum()
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def _gradient_problem(
    got: torch.Tensor, expected: torch.Tensor, leaves: list, reference_leaves: list, names: tuple
) -> str | None:
    """Compare the gradients that flow back to each floating input, for one fixed random
    upstream gradient."""
    if not any(leaf is not None for leaf in leaves) or not expected.requires_grad:
        return None
    if not got.requires_grad:
        return (
            "the values are right but no gradient flows back to the inputs (.detach(), "
            ".item(), numpy or torch.no_grad cut the graph): a model could not learn through it"
        )
    generator = torch.Generator().manual_seed(0)
    upstream = torch.randn(expected.shape, generator=generator, dtype=torch.float64)
    wanted = [leaf for leaf in reference_leaves if leaf is not None]
    given = [leaf for leaf in leaves if leaf is not None]
    reference = _input_gradients(expected, upstream, wanted)
    try:
        learner = _input_gradients(got, upstream, given)
    except RuntimeError as error:
        return f"the gradient cannot be computed through your function ({error})"
    floating = [i for i, leaf in enumerate(leaves) if leaf is not None]
    for index, mine, theirs, leaf in zip(floating, learner, reference, given, strict=True):
        name = _argument_name(names, index)
        theirs = torch.zeros_like(leaf) if theirs is None else theirs
        if mine is None and theirs.any():
            return (
                f"the values are right but no gradient reaches `{name}` (detached, or used "
                f"through .item(), numpy or torch.no_grad): a model could not learn it"
            )
        mine = torch.zeros_like(leaf) if mine is None else mine
        if not mine.isfinite().all():
            where = tuple(torch.nonzero(~mine.isfinite())[0].tolist())
            return (
                f"the values are right but the gradient with respect to `{name}` is "
                f"{mine[where].item()} at index {where}: training through it would fail (a NaN "
                f"or inf in the forward pass, hidden afterwards by nan_to_num or torch.where, "
                f"still reaches the gradient)"
            )
        if not torch.allclose(mine.double(), theirs.double(), atol=1e-4, rtol=1e-3):
            error = (mine.double() - theirs.double()).abs()
            where = tuple(torch.nonzero(error == error.max())[0].tolist())
            got, wanted = told_apart(mine[where].item(), theirs[where].item())
            return (
                f"the values are right but the gradient with respect to `{name}` differs at "
                f"index {where}: got {got}, expected {wanted}"
            )
    return None


def run_case(
    name: str,
    function: Callable,
    args: tuple,
    reference: Callable,
    failures: list[str],
    *,
    atol: float = 1e-5,
    hint: str = "",
    mistakes: dict | None = None,
    forbidden: dict[str, Callable] | None = None,
    names: tuple = (),
    alternatives: tuple = (),
) -> bool:
    """Run function(*args) against reference(*args): its values, the gradients flowing back to
    every floating input, no input changed in place (nor its requires_grad, nor the .grad of
    what it comes from, by a backward pass inside), and no forbidden function called.

    mistakes: {diagnosis: what that mistake returns}; a wrong answer equal to one of them is
    reported with that diagnosis instead of the general hint. alternatives: other answers that
    are right too. names: the arguments' names, for the messages.
    """
    inputs, leaves = _learner_inputs(args)
    versions = [_version_and_storage(x) for x in inputs]
    inputs_autograd, leaves_autograd = _autograd_state(inputs), _autograd_state(leaves)
    writes = WritesToInputs(inputs)
    called: list = []
    try:
        with recording_calls(forbidden or {}) as called, writes:
            got = function(*inputs)
    except Refused as refusal:  # a forbidden call is the cause, where one was made
        said = str(refusal)
        if called and called[0] != PROFILE_SWITCHED:
            said = f"calls {called[0]}, which this exercise asks you to write yourself"
        failures.append(f"{name}: {said}")
        return False
    except (Exception, SystemExit) as error:  # the learner's code may fail in any way
        if called and called[0] != PROFILE_SWITCHED:  # named first: it may be why it raised
            failures.append(
                f"{name}: calls {called[0]}, which this exercise asks you to write yourself"
            )
        else:
            said = str(error)
            said = said if len(said) <= 400 else f"{said[:400]}... ({len(said):,} characters)"
            failures.append(f"{name}: your function raised {type(error).__name__}: {said}")
        return False
    problem = (
        _changed_in_place(args, inputs, versions, names, writes.written)
        or _autograd_changed(inputs, inputs_autograd, names)
        or _autograd_changed(leaves, leaves_autograd, names)  # what the inputs come from
    )
    if called:
        problem = (
            "switches off Python's profiler (sys.setprofile), with which the checker sees what "
            "your function calls: leave it as it is"
            if called[0] == PROFILE_SWITCHED
            else f"calls {called[0]}, which this exercise asks you to write yourself"
        )
    answer, answer_problem = _as_answer(got)
    problem = problem or answer_problem
    reference_inputs, reference_leaves = _learner_inputs(args)
    expected = reference(*reference_inputs)  # after the answer: some follow its choice of ties
    if problem is None and any(
        answer.shape == other.shape and torch.equal(answer.detach(), other)
        for other in alternatives
    ):
        return True
    if problem is None:
        problem = _value_problem(answer, expected, atol)
        if problem is not None:
            diagnoses = [
                diagnosis
                for diagnosis, mistaken in (mistakes or {}).items()
                if answer.shape == mistaken.shape
                and torch.allclose(
                    answer.detach().double(), mistaken.double(), atol=atol, equal_nan=True
                )
                and _nearer(answer, mistaken, expected)
            ]
            if diagnoses:
                problem += f" ({diagnoses[-1]})"
            elif _float32_on_the_way(answer, expected):
                problem += f" ({FLOAT32_ON_THE_WAY})"
            elif hint and not problem.startswith(("shape ", "dtype ")):
                problem += f" ({hint})"  # the general hint is about values
    if problem is None and expected.is_floating_point() and expected.element_size() >= 4:
        problem = _gradient_problem(answer, expected, leaves, reference_leaves, names)
    if problem is None and function not in _PROBED:
        _PROBED.append(function)
        problem = _changed_on_other_inputs(function, args, names)
    if problem is None:
        return True
    failures.append(f"{name}: {problem}")
    return False


FLOAT32_ON_THE_WAY = (
    "within float32's rounding of the right values, not float64's: a step runs in float32 (a "
    "tensor made without dtype=, .float(), a float32 constant or model); compute in the inputs' "
    "own dtype"
)


def _float32_on_the_way(answer: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether a float64 answer is off by about what float32 rounding leaves, no more."""
    if expected.dtype != torch.float64 or answer.shape != expected.shape:
        return False
    error = (answer.detach().double() - expected.detach()).abs()
    return bool(error.isfinite().all() and (error <= 1e-6 * expected.abs().clamp(min=1)).all())


def _nearer(answer: torch.Tensor, mistaken: torch.Tensor, expected: torch.Tensor) -> bool:
    """Whether the answer lies nearer the mistake's result than the right one (a mistake that
    rounds, say, is within the tolerance of an answer wrong in another way too)."""
    if answer.shape != expected.shape:
        return True
    answer = answer.detach().double()
    gap = (answer - mistaken.double()).abs().nan_to_num(0).max()
    return bool(gap <= (answer - expected.detach().double()).abs().nan_to_num(0).max())


_PROBED: list = []  # the functions this checker's run has probed the inputs' autograd of


def _changed_on_other_inputs(function: Callable, args: tuple, names: tuple) -> str | None:
    """What the function changes of its inputs (their values, in place, or their requires_grad,
    .grad or hooks) when they come as tensors that do not record gradients, and as leaves that
    do (a case's inputs are copies of leaves, where requires_grad_() raises, detach_() has
    nothing to switch off and an answer may copy before writing); None where nothing changed.
    Run once per function in a checker's run, on its first case passed, and never where an
    argument is a function or a model, which a checker may count calls of."""
    if any(callable(arg) for arg in args):
        return None
    for records in (False, True):
        inputs = tuple(
            arg.detach().clone().requires_grad_(records)
            if isinstance(arg, torch.Tensor) and arg.is_floating_point()
            else arg.clone()
            if isinstance(arg, torch.Tensor)
            else arg
            for arg in args
        )
        if not any(isinstance(x, torch.Tensor) and x.is_floating_point() for x in inputs):
            return None
        before = _autograd_state(inputs)
        versions = [_version_and_storage(x) for x in inputs]
        writes = WritesToInputs(inputs)
        try:
            with writes:
                function(*inputs)
        except Refused as refusal:  # a checker's own wrapper found the change first
            return str(refusal)
        except (Exception, SystemExit):
            continue  # the cases themselves judge what the function does
        changed = _changed_in_place(
            args, inputs, versions, names, writes.written
        ) or _autograd_changed(inputs, before, names)
        if changed:
            return changed
    return None


def run_error_case(
    name: str, function: Callable, args: tuple, error: type, what: str, failures: list[str]
) -> bool:
    """The function must refuse these arguments with the given kind of error."""
    try:
        got = function(*args)
    except error:
        return True
    except (Exception, SystemExit) as other:
        failures.append(f"{name}: raised {type(other).__name__}: {other}; {what}")
        return False
    answer, _ = _as_answer(got)
    if answer is not None and answer.is_floating_point():
        shown = "returned [" + ", ".join(f"{v:.4g}" for v in answer.flatten().tolist()[:4]) + "]"
    else:
        shown = f"returned {got!r}"[:80]
    failures.append(f"{name}: {shown}; {what}")
    return False


# Mistakes that more than one checker names


LOWER_PRECISIONS = ((torch.float16, "about 3"), (torch.bfloat16, "about 2"))


def lower_precision_mistakes(compute: Callable, tensor: torch.Tensor, name: str) -> dict:
    """{diagnosis: what compute(tensor) returns when it runs in float16 or bfloat16, or on the
    tensor rounded to one of them}: a right computation that loses precision on the way, close
    to the right answer but outside the checker's tolerance. name: the tensor's, plural."""
    mistakes = {}
    for low, digits in LOWER_PRECISIONS:
        keep = f"which keeps {digits} significant digits: compute in the {name}' own dtype"
        mistakes[f"the {name} are rounded to {low} on the way, {keep}"] = compute(
            tensor.detach().to(low).to(tensor.dtype)
        )
        mistakes[f"the computation runs in {low}, {keep}"] = compute(tensor.detach().to(low)).to(
            tensor.dtype
        )
    return mistakes


def named_together(mistakes: dict) -> dict:
    """The mistakes with those that give one and the same answer in this case named together
    (e.g. on a square grid, (x, y) order and column-major patches)."""
    merged: dict = {}
    for diagnosis, answer in mistakes.items():
        same = next(
            (
                named
                for named, other in merged.items()
                if other.shape == answer.shape
                and torch.allclose(other.double(), answer.double(), rtol=0, atol=1e-9)
            ),
            None,
        )
        if same is None:
            merged[diagnosis] = answer
        else:
            merged[f"{same}; or {diagnosis}"] = merged.pop(same)
    return merged


# What the checkers of several chapters say about sizes and blocks

SCALED_BY_VALUE_WIDTH = (
    "the scores are divided by sqrt(d_v), the values' width: divide by sqrt(d), the width of "
    "the queries and keys whose dot product they are"
)


def not_a_multiple(n: int, size: int, unit: str, piece: str) -> str:
    """The diagnosis of an answer that assumes n is a multiple of the `unit` (tile, chunk)
    size; `piece` names the n % size rows left over (e.g. "queries make a shorter block")."""
    return (
        f"n = {n} is not a multiple of the {unit} size {size} in this case: the last "
        f"{n % size} {piece}"
    )


def whole_blocks_only(reference: Callable, args: tuple, size: int) -> torch.Tensor:
    """What an answer that assumes n is a multiple of `size` returns: the (causal) reference
    over the whole blocks of the sequence axis (-2), zeros after them."""
    n = args[0].shape[-2]
    whole = n - n % size
    answer = torch.zeros_like(reference(*args))
    if whole:
        answer[..., :whole, :] = reference(*(t[..., :whole, :] for t in args))
    return answer


def name_a_partial_last_block(
    failures: list, name: str, got, n: int, size: int, unit: str, piece: str
) -> None:
    """Add the likely cause to a failure where the learner's function raised, or returned
    fewer rows than n: n is not a multiple of `size` in this case."""
    short = isinstance(got, torch.Tensor) and got.dim() >= 2 and got.shape[-2] == n - n % size
    raised = failures[-1].startswith(f"{name}: your function raised")
    if n % size and (raised or short):
        failures[-1] += f"; {not_a_multiple(n, size, unit, piece)}"


def wrong_only(mistakes: dict, right: torch.Tensor) -> dict:
    """The mistakes that differ from the right answer in this case (where one coincides with
    it, a dtype problem would otherwise be named as that mistake)."""
    return {
        diagnosis: answer
        for diagnosis, answer in mistakes.items()
        if answer.shape != right.shape
        or not torch.allclose(answer.detach().double(), right.detach().double(), atol=1e-7)
    }


class TimedAnswers:
    """Calls the learner's function for each case: refuses an answer that is not a tensor
    (before the framework reads a number, an array or a list as one), one that leaves torch's
    global settings changed, or its inputs' requires_grad or .grad (a checker may hand it
    tensors of its own, a sampler's logits without gradients, say, which run_case does not
    see), and one that ran longer than ANSWER_TIME_LIMIT_SECONDS inside a single torch
    operation (which the time limit cannot stop), after which the remaining cases are not
    run."""

    def __init__(self, learner: Callable):
        self.learner, self.too_slow = learner, None
        try:
            parameters = inspect.signature(learner).parameters.values()
        except (TypeError, ValueError):  # a callable without a signature Python can read
            parameters = ()
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        self.names = tuple(p.name for p in parameters if p.kind in positional)  # the learner's

    def __call__(self, *inputs):
        if self.too_slow is not None:
            raise Refused(f"not run: {self.too_slow}")
        autograd = _autograd_state(inputs)
        start = time.perf_counter()
        with _torch_left_as_it_was():
            got = self.learner(*inputs)
        seconds = time.perf_counter() - start
        if seconds > ANSWER_TIME_LIMIT_SECONDS:
            self.too_slow = (
                f"one case took {seconds:.1f} s, where the reference takes milliseconds: look for "
                f"a Python loop over every entry, or the model run again for each query"
            )
            raise Refused(self.too_slow)
        changed = _autograd_changed(inputs, autograd, self.names)
        if changed is not None:
            raise Refused(changed)
        _refuse_a_non_tensor(got)
        return got


# {torch.nn.modules.module's dict of global hooks: (the function that registers one, what
# runs it)}; _global_backward_hooks holds those of two functions, told apart by
# _global_is_full_backward_hook
GLOBAL_MODULE_HOOKS = {
    "_global_forward_pre_hooks": (
        "register_module_forward_pre_hook",
        "every module's later forward passes would run it",
    ),
    "_global_forward_hooks": (
        "register_module_forward_hook",
        "every module's later forward passes would run it",
    ),
    "_global_backward_pre_hooks": (
        "register_module_full_backward_pre_hook",
        "every module's later backward passes would run it",
    ),
    "_global_backward_hooks": (
        "register_module_full_backward_hook",
        "every module's later backward passes would run it",
    ),
    "_global_parameter_registration_hooks": (
        "register_module_parameter_registration_hook",
        "every parameter any module registers later would pass through it",
    ),
    "_global_buffer_registration_hooks": (
        "register_module_buffer_registration_hook",
        "every buffer any module registers later would pass through it",
    ),
    "_global_module_registration_hooks": (
        "register_module_module_registration_hook",
        "every submodule any module registers later would pass through it",
    ),
}


def _hook_left(kind: str) -> str:
    """The refusal of an answer that left a hook of this kind registered."""
    function, runs = GLOBAL_MODULE_HOOKS[kind]
    if kind == "_global_backward_hooks" and module_hooks._global_is_full_backward_hook is False:
        function = "register_module_backward_hook"
    return (
        f"leaves a global module hook registered (torch.nn.modules.module.{function}): {runs}; "
        f"hook the one module, and remove the handle in a `finally:` block"
    )


def _anomaly_detection() -> tuple[bool, bool]:
    return torch.is_anomaly_enabled(), torch.is_anomaly_check_nan_enabled()


def _deterministic_algorithms() -> tuple[bool, bool]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
    )


def _grad_mode_left(was: bool, now: bool) -> str:
    return (
        f"leaves gradients switched {'off' if was else 'on'} for all of torch "
        f"(torch.set_grad_enabled): every later computation would be affected; "
        f"use `with torch.no_grad():`, which puts the mode back at its end"
    )


def _default_dtype_left(was: torch.dtype, now: torch.dtype) -> str:
    return (
        f"leaves torch's default dtype {now} (it was {was}): every later torch.zeros, "
        f"torch.tensor or nn.Linear would change; pass dtype= to the tensors you make instead"
    )


def _random_generator_left(was: torch.Tensor, now: torch.Tensor) -> str:
    return (
        "reseeds or draws from torch's global random generator (torch.manual_seed, "
        "torch.rand, torch.randn, ..., or building a model: its layers draw their first "
        "weights from it; copy.deepcopy(model) copies one without drawing): every later random "
        "number would change, and this function needs no randomness"
    )


def _anomaly_detection_left(was: tuple, now: tuple) -> str:
    state = f"switched {'on' if now[0] else 'off'}" if now[0] != was[0] else f"check_nan={now[1]}"
    return (
        f"leaves torch's anomaly detection {state} for all of torch "
        f"(torch.autograd.set_detect_anomaly): every later backward pass of the caller would "
        f"change with it (with it on, each runs far slower, checking every step); use `with "
        f"torch.autograd.detect_anomaly():`, which puts the mode back at its end"
    )


def _deterministic_algorithms_left(was: tuple, now: tuple) -> str:
    state = f"switched {'on' if now[0] else 'off'}" if now[0] != was[0] else f"warn_only={now[1]}"
    return (
        f"leaves torch's deterministic algorithms {state} for all of torch "
        f"(torch.use_deterministic_algorithms): every later operation of the caller that has no "
        f"deterministic version would raise or warn, or stop doing so; this function needs no "
        f"such setting, so leave it to the caller"
    )


def _thread_count_left(was: int, now: int) -> str:
    return (
        f"leaves torch's thread count {now} (torch.set_num_threads; it was {was}): every later "
        f"computation of the caller would run on {now} thread{'s' if now != 1 else ''}; leave "
        "the thread count to the caller"
    )


# (read the setting, put it back, the refusal of an answer that left it changed), in the order
# the refusals are chosen
TORCH_GLOBAL_SETTINGS = (
    (torch.is_grad_enabled, torch.set_grad_enabled, _grad_mode_left),
    (torch.get_default_dtype, torch.set_default_dtype, _default_dtype_left),
    (torch.random.get_rng_state, torch.random.set_rng_state, _random_generator_left),
    (
        _anomaly_detection,
        lambda mode: torch.autograd.set_detect_anomaly(*mode),
        _anomaly_detection_left,
    ),
    (
        _deterministic_algorithms,
        lambda mode: torch.use_deterministic_algorithms(mode[0], warn_only=mode[1]),
        _deterministic_algorithms_left,
    ),
    (torch.get_num_threads, torch.set_num_threads, _thread_count_left),
)


def _autocast() -> tuple:
    return torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")


def _autocast_left(was: tuple, now: tuple) -> str:
    if now[0] != was[0]:
        return (
            f"leaves torch's cpu autocast switched {'on' if now[0] else 'off'} for all of torch "
            f"(torch.set_autocast_enabled): every later nn.Linear and matrix product of the "
            f'caller would run in another dtype; use `with torch.autocast("cpu"):`, which puts '
            f"it back at its end, or no autocast"
        )
    return (
        f"leaves torch's cpu autocast dtype {now[1]} (torch.set_autocast_dtype; it was "
        f'{was[1]}): a later `with torch.autocast("cpu"):` of the caller would compute in it; '
        f"pass dtype= to torch.autocast instead"
    )


def _default_device() -> torch.device | None:
    """The device torch.set_default_device chose (None: none, so the cpu), read without
    torch.get_default_device, which makes a tensor there to find its index."""
    context = getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None)
    return None if context is None else context.device


def _default_device_left(was: torch.device | None, now: torch.device | None) -> str | None:
    """None where the device is the same (the cpu set as the default where none was): put
    back without a word."""
    was, now = was or torch.device("cpu"), now or torch.device("cpu")
    if was == now:
        return None
    return (
        f"leaves torch's default device {now} (torch.set_default_device; it was {was}): every "
        f"later tensor and layer the caller makes would be made there; pass device= to the "
        f"tensors you make instead"
    )


# torch's fp32_precision settings, parents before their children (a parent's is the children's
# default); torch.set_float32_matmul_precision sets some of them, and
# torch.get_float32_matmul_precision raises once they disagree
FP32_PRECISION_SETTINGS = (
    "backends",
    "backends.mkldnn",
    "backends.mkldnn.matmul",
    "backends.mkldnn.conv",
    "backends.mkldnn.rnn",
)  # the cpu's (the gpu's, cuda and cudnn, change nothing here, and put back by their new
# names they leave the legacy allow_tf32 flags unreadable)


def _fp32_precision_holder(name: str) -> object | None:
    holder = torch
    for part in name.split("."):
        holder = getattr(holder, part, None)
    return holder if hasattr(holder, "fp32_precision") else None


class _Precisions(tuple):
    """((name, fp32_precision) for each setting, the legacy getter's first): equal to another
    where the precision the cpu's matrix products, convolutions and recurrent layers get is the
    same ('none' takes the parent's; at the top it is 'ieee', full float32), whatever the
    settings' spelling or the gpu's."""

    def effective(self) -> tuple:
        settings = dict(self[1:])

        def of(name: str) -> str:
            own = settings.get(name, "none")
            if own != "none" or "." not in name:
                return "ieee" if own == "none" else own
            return of(name.rsplit(".", 1)[0])

        return tuple(of(f"backends.mkldnn.{part}") for part in ("matmul", "conv", "rnn"))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Precisions) and self.effective() == other.effective()

    __hash__ = tuple.__hash__


def _matmul_precision() -> tuple:
    """torch.get_float32_matmul_precision() (None where it raises: the legacy and the new
    settings were mixed), then every fp32_precision setting torch has."""
    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:
        legacy = None
    return _Precisions(
        (("the legacy getter", legacy),)
        + tuple(
            (name, _fp32_precision_holder(name).fp32_precision)
            for name in FP32_PRECISION_SETTINGS
            if _fp32_precision_holder(name) is not None
        )
    )


def _put_back_matmul_precision(settings: tuple) -> None:
    (_, legacy), *each = settings
    if legacy is not None:
        torch.set_float32_matmul_precision(legacy)  # sets some of the others, put back next
    for name, precision in each:
        _fp32_precision_holder(name).fp32_precision = precision


def _matmul_precision_left(was: "_Precisions", now: "_Precisions") -> str:
    parts = ("matrix products", "convolutions", "recurrent layers")
    changed = ", ".join(
        f"{part} {new!r} (it was {old!r})"
        for part, old, new in zip(parts, was.effective(), now.effective(), strict=True)
        if old != new
    )
    return (
        f"leaves the cpu's float32 precision changed for {changed} "
        f"(torch.set_float32_matmul_precision or the fp32_precision settings): every later "
        f"float32 computation of the caller there may lose digits; leave it to the caller"
    )


def _flushes_denormals() -> bool:
    """Whether the cpu flushes numbers below float32's smallest normal one to 0
    (torch.set_flush_denormal, which has no getter)."""
    return torch.tensor([1e-40], dtype=torch.float32, device="cpu").mul(2).item() == 0


def _flush_denormal_left(was: bool, now: bool) -> str:
    return (
        f"leaves the cpu's flushing of denormal numbers {'on' if now else 'off'} "
        f"(torch.set_flush_denormal): every later tiny number of the caller would change; "
        f"leave it to the caller"
    )


# Checked and put back as TORCH_GLOBAL_SETTINGS are, but not named in the prompts: settings an
# answer has no reason to touch, whose change would reach every later computation of the caller
RARER_TORCH_GLOBAL_SETTINGS = (
    (_default_device, torch.set_default_device, _default_device_left),
    (
        _autocast,
        lambda mode: (
            torch.set_autocast_enabled("cpu", mode[0]),
            torch.set_autocast_dtype("cpu", mode[1]),
        ),
        _autocast_left,
    ),
    (_matmul_precision, _put_back_matmul_precision, _matmul_precision_left),
    (_flushes_denormals, torch.set_flush_denormal, _flush_denormal_left),
    (
        lambda: torch.backends.opt_einsum.enabled,
        lambda enabled: setattr(torch.backends.opt_einsum, "enabled", enabled),
        lambda was, now: (
            f"leaves torch.backends.opt_einsum.enabled {now} (it was {was}): every later "
            f"einsum of the caller would contract in another order; leave it to the caller"
        ),
    ),
    (
        lambda: torch.backends.mkldnn.enabled,
        lambda enabled: setattr(torch.backends.mkldnn, "enabled", enabled),
        lambda was, now: (
            f"leaves torch.backends.mkldnn.enabled {now} (it was {was}): every later "
            f"convolution and matrix product of the caller would run another way; leave it to "
            f"the caller"
        ),
    ),
)
# What the prompts of chapters 12 to 14 say the answers leave as they were: one name for each
# entry of TORCH_GLOBAL_SETTINGS, and the module hooks
TORCH_GLOBAL_SETTINGS_NAMED = (
    "grad mode, default dtype, random generator, anomaly detection, deterministic-algorithms "
    "setting, thread count and module hooks"
)


def _same_setting(was: object, now: object) -> bool:
    if isinstance(was, torch.Tensor):
        return torch.equal(was, now)
    return was == now


@contextlib.contextmanager
def _torch_left_as_it_was():
    """Run the learner's call, then refuse it if it left torch's global settings changed (each
    of TORCH_GLOBAL_SETTINGS: grad mode, whose change would also switch the reference's
    gradients off, and so their check; the default dtype; the global random generator,
    reseeded or drawn from, though none of these functions needs randomness; anomaly
    detection; the deterministic-algorithms setting; the thread count), or a hook on every
    module, or a torch mode entered and never left. Each is put back first."""
    settings = [
        (read(), read, restore, left)
        for read, restore, left in TORCH_GLOBAL_SETTINGS + RARER_TORCH_GLOBAL_SETTINGS
    ]
    hooks = {kind: set(getattr(module_hooks, kind)) for kind in GLOBAL_MODULE_HOOKS}
    full_backward_hooks = module_hooks._global_is_full_backward_hook
    modes = _mode_stack_depths()
    problem = None
    timed_out = False
    try:
        yield
    except AnswerTimedOut:
        timed_out = True  # the time limit is what to say; the settings are put back all the same
        raise
    finally:
        for was, read, restore, left in settings:
            try:
                now = read()
            except Exception:  # a setting torch can no longer read: put it back all the same
                now = None
            if not _same_setting(was, now):
                restore(was)
                problem = problem or left(was, now)
            elif isinstance(was, _Precisions) and tuple(was) != tuple(now):
                restore(was)  # spelt otherwise, the same precision: put back without a word
        modes_left = _modes_left(modes)  # after the settings: set_default_device leaves its own
        problem = problem or modes_left
        for kind, before in hooks.items():
            registered = getattr(module_hooks, kind)
            for key in set(registered) - before:
                problem = problem or _hook_left(kind)
                registered.pop(key)
                for extra in ("_always_called", "_with_kwargs"):
                    getattr(module_hooks, f"{kind}{extra}", {}).pop(key, None)
        module_hooks._global_is_full_backward_hook = full_backward_hooks
        if problem is not None and not timed_out:
            raise Refused(problem)  # in place of the answer


def _mode_stack_depths() -> tuple:
    """How many torch function modes and dispatch modes are entered now, and the innermost
    saved-tensors hooks (torch.autograd.graph.saved_tensors_hooks)."""
    return (
        torch._C._len_torch_function_stack(),
        torch._C._len_torch_dispatch_stack(),
        torch._C._autograd._top_saved_tensors_default_hooks(False),
    )


def _modes_left(depths: tuple) -> str | None:
    """Pop the torch modes entered since depths were read and never left (a `with` block's
    __enter__ called without its __exit__), and say so; None where there are none."""
    function_depth, dispatch_depth, saved_hooks = depths
    left = []
    while torch._C._len_torch_function_stack() > function_depth:
        left.append(type(torch._C._pop_torch_function_stack()).__name__)
    while torch._C._len_torch_dispatch_stack() > dispatch_depth:
        left.append(type(_pop_dispatch_mode()).__name__)
    while (top := torch._C._autograd._top_saved_tensors_default_hooks(False)) is not None and (
        saved_hooks is None or top[0] is not saved_hooks[0]
    ):
        torch._C._autograd._pop_saved_tensors_default_hooks()
        left.append("saved_tensors_hooks")
    if not left:
        return None
    return (
        f"leaves {', '.join(left)} entered, a torch mode whose __enter__ ran without its "
        f"__exit__ (torch.device(...).__enter__(), say): every later torch call of the caller "
        f"would go through it; use a `with` block, which leaves it at its end"
    )


def _refuse_a_non_tensor(got: object) -> None:
    """None and sequences of tensors are left to the framework, which names them."""
    if got is None or isinstance(got, torch.Tensor):
        return
    if isinstance(got, tuple | list) and got and isinstance(got[0], torch.Tensor):
        return
    raise Refused(_not_a_tensor(got))
