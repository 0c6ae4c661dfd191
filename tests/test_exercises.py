"""Every checker passes its worked solution (solutions/), refuses typical wrong answers with the
message that names the mistake, and answers any answer at all without raising.

Each chapter's test_exercises_chNN_*.py lists its checkers with their solutions (CHECKERS) and
its typical wrong answers with the words their report must contain (WRONG)."""

import contextlib
import importlib
import inspect
import io
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_exercises_ch01_attention_pooling as ch01
import test_exercises_ch02_masked_softmax as ch02
import test_exercises_ch03_scoring_functions as ch03
import test_exercises_ch04_multi_head_attention as ch04
import test_exercises_ch05_positional_encoding as ch05
import test_exercises_ch06_masks as ch06
import test_exercises_ch07_transformer as ch07
import test_exercises_ch08_bahdanau as ch08
import test_exercises_ch09_transformer_translation as ch09
import test_exercises_ch10_efficient_attention as ch10
import test_exercises_ch11_long_context as ch11
import test_exercises_ch12_decoder_only as ch12
import test_exercises_ch13_induction_heads as ch13
import test_exercises_ch14_attention_across_modalities as ch14
import test_exercises_ch15_encoder_only as ch15
import test_exercises_ch16_todays_attention as ch16
import torch

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = (
    ch01,
    ch02,
    ch03,
    ch04,
    ch05,
    ch06,
    ch07,
    ch08,
    ch09,
    ch10,
    ch11,
    ch12,
    ch13,
    ch14,
    ch15,
    ch16,
)
CHECKERS = {name: pair for chapter in CHAPTERS for name, pair in chapter.CHECKERS.items()}
WRONG = [wrong for chapter in CHAPTERS for wrong in chapter.WRONG]
SCALAR_ANSWERS = {name for chapter in CHAPTERS for name in getattr(chapter, "SCALAR_ANSWERS", ())}


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
def test_every_solution_passes_its_checker(exercise, run_checker):
    checker, solution = CHECKERS[exercise]
    verdict, out = run_checker(checker, solution)
    assert verdict is True and out.startswith("Correct"), out


@pytest.mark.parametrize(
    ("exercise", "answer", "words"), WRONG, ids=[f"{e}: {a.__name__}" for e, a, _ in WRONG]
)
def test_a_typical_wrong_answer_is_named(exercise, answer, words, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and out.startswith("Not yet") and words in out, out


# Answers that are not answers at all: each gets "Not yet" with the reason, never a traceback.


def _none(*args):
    return None


def _raises(*args):
    raise KeyError("oops")


def _scalar(*args):
    return torch.tensor(0.5)


def _text(*args):
    return "weights"


def _exits(*args):
    raise SystemExit(1)


def _meta(*args):
    return torch.empty(2, 3, 5, device="meta")


def _complex(*args):
    return torch.zeros(2, 3, 5, dtype=torch.complex64)


def _list(*args):
    return [[0.5, 0.5], [1.0, 0.0]]


def _numpy(*args):
    return torch.zeros(2, 3, 5).numpy()


NOT_ANSWERS = {
    _none: "returned None: did the function forget to `return`",
    _raises: "your function raised KeyError: 'oops'",
    _scalar: "shape ()",
    _text: "returned a str, expected a tensor",
    _exits: "raised SystemExit",
    _meta: "meta tensor",
    _complex: "complex tensor",
    _list: "returned a list (.tolist() leaves torch), expected a tensor",
    _numpy: "returned a numpy value (.numpy() leaves torch), expected a tensor",
}


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
@pytest.mark.parametrize("answer", NOT_ANSWERS, ids=lambda f: f.__name__)
def test_every_checker_answers_anything_without_raising(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    expected = NOT_ANSWERS[answer]
    if answer is _scalar and exercise in SCALAR_ANSWERS:  # a loss: a scalar of the wrong value
        expected = "got 0.5, expected"
    if answer is _list and exercise == "beam step":  # a triple of tensors is its answer
        expected = "returned 2 items, expected three: (new_scores, beams, tokens)"
    assert verdict is False and out.startswith("Not yet") and expected in out, out


def not_written_yet(*args):
    raise NotImplementedError  # your code here


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
def test_a_function_not_written_yet_gets_one_friendly_line(exercise, run_checker):
    """What a "your turn" cell shows before the learner writes anything."""
    verdict, out = run_checker(CHECKERS[exercise][0], not_written_yet)
    assert verdict is False
    assert out == "Not yet: `not_written_yet` is not written yet (it raised NotImplementedError).\n"


def never_returns(*args):
    while True:
        pass


def catches_the_stop_and_returns_nothing(*args):
    try:
        while True:
            pass
    except BaseException:  # a learner's bare except
        return None


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
def test_an_answer_that_never_returns_gets_a_verdict(exercise, run_checker, monkeypatch):
    monkeypatch.setattr("helpers.exercises.framework.ANSWER_TIME_LIMIT_SECONDS", 0.05)
    verdict, out = run_checker(CHECKERS[exercise][0], never_returns)
    assert verdict is False
    assert out.startswith("Not yet: `never_returns` did not return within 0.05 s"), out
    assert out.count("\n") == 1, out


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
def test_an_answer_that_catches_the_stop_still_gets_a_verdict(exercise, run_checker, monkeypatch):
    from helpers.exercises.framework import _time_limit

    monkeypatch.setattr("helpers.exercises.framework.ANSWER_TIME_LIMIT_SECONDS", 0.02)
    verdict, out = run_checker(CHECKERS[exercise][0], catches_the_stop_and_returns_nothing)
    assert verdict is False and out.startswith("Not yet"), out
    with _time_limit(10.0):  # the timer and its handler were put back: nothing fires later
        time.sleep(0.6)


def test_the_time_limit_without_an_interval_timer(monkeypatch):
    """Where signal.setitimer is missing (Windows), a timer thread interrupts the main
    thread; a KeyboardInterrupt of the learner's own still passes through."""
    from helpers.exercises import framework

    monkeypatch.delattr(framework.signal, "setitimer")
    monkeypatch.setattr(framework, "ANSWER_TIME_LIMIT_SECONDS", 0.05)
    exercise = next(iter(CHECKERS))

    def interrupted(*args):
        raise KeyboardInterrupt

    # Python's own SIGINT handler, as a notebook's kernel has (pytest-xdist's workers ignore it)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            verdict = CHECKERS[exercise][0](never_returns)
        assert not verdict
        assert "did not return within 0.05 s" in out.getvalue(), out.getvalue()
        with pytest.raises(KeyboardInterrupt):
            CHECKERS[exercise][0](interrupted)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_quick_answer_leaves_no_timer_behind():
    from helpers.exercises.framework import _time_limit

    handler = signal.getsignal(signal.SIGALRM)
    with _time_limit(0.2):
        pass
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is handler


@pytest.mark.parametrize("exercise", CHECKERS, ids=list(CHECKERS))
@pytest.mark.parametrize("given", [None, torch.zeros(3), "top_p_filter"], ids=repr)
def test_a_checker_given_something_else_than_a_function_says_to_pass_the_function(
    exercise, given, run_checker
):
    """check_f(f()) or check_f(None): one line, not the same TypeError for every case."""
    checker = CHECKERS[exercise][0]
    verdict, out = run_checker(checker, given)
    assert verdict is False
    assert re.match(r"Not yet: check_\w+ takes your function itself, as in check_", out), out
    assert out.count("\n") == 1, out


def test_an_in_place_operation_that_changes_no_value_is_named_as_such(run_checker):
    from test_exercises_ch14_attention_across_modalities import patchify_clamping_in_place

    verdict, out = run_checker(CHECKERS["patchify"][0], patchify_clamping_in_place)
    assert verdict is False
    assert "runs an in-place operation on its input `images`, which changes no value" in out, out


@pytest.mark.parametrize(
    ("got", "expected", "shown"),
    [
        (10.5, 2.25, ("10.5", "2.25")),
        (10.791, 10.79, ("10.791", "10.79")),
        (2.5624, 2.5625, ("2.5624", "2.5625")),
        (1.00000001, 1.0, ("1.00000001", "1")),
        (0.1 + 0.2, 0.3, ("0.30000000000000004", "0.29999999999999999")),
        (float("nan"), 1.0, ("nan", "1")),
    ],
)
def test_two_numbers_are_shown_to_as_many_digits_as_tell_them_apart(got, expected, shown):
    from helpers.exercises.framework import told_apart

    assert told_apart(got, expected) == shown


def test_an_input_holding_nan_is_not_mistaken_for_one_changed_in_place():
    from helpers.exercises.framework import report, run_case

    scores = torch.tensor([[1.0, float("nan"), 2.0]])
    failures: list[str] = []
    passed = run_case("NaN in the input", lambda s: s * 2, (scores,), lambda s: s * 2, failures)
    assert passed and not failures and report(failures, 1)


def test_every_exercise_has_at_least_two_typical_wrong_answers():
    counts = {name: sum(wrong[0] == name for wrong in WRONG) for name in CHECKERS}
    assert min(counts.values()) >= 2, counts


def checker_names(chapter) -> list[str]:
    """The checkers that helpers.exercises.chNN_... offers the chapter's learners."""
    name = chapter.__name__.removeprefix("test_exercises_")
    return importlib.import_module(f"helpers.exercises.{name}").__all__


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda chapter: chapter.__name__)
def test_every_chapter_has_at_least_three_checked_exercises_named_in_its_notebook(chapter):
    names = checker_names(chapter)
    assert len(names) >= 3, names
    number = chapter.__name__.split("_")[2][2:]  # test_exercises_chNN_... -> NN
    (notebook,) = (Path(__file__).parents[1] / "notebooks").glob(f"{number}_*.ipynb")
    missing = [name for name in names if f"{name}(" not in notebook.read_text()]
    assert not missing, f"{notebook.name} never calls {missing}"


def test_torchs_imports_on_first_use_do_not_count_against_the_time_limit():
    """The first operation under a dispatch mode imports torch's compiler, seconds on a cold
    start: in a fresh process, with a 1 s limit, the worked solutions still pass."""
    script = """
import sys
from helpers.exercises import framework
import helpers.exercises as exercises
import solutions.ch10_efficient_attention as ch10
import solutions.ch11_long_context as ch11
framework.ANSWER_TIME_LIMIT_SECONDS = 1.0
assert "torch._dynamo" not in sys.modules
assert exercises.check_grouped_query_attention(ch10.grouped_query_attention)
assert exercises.check_causal_tiled_attention(ch10.causal_tiled_attention)
assert exercises.check_chunked_linear_attention(ch11.chunked_linear_attention)
"""
    ran = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr


# torch's global settings and module hooks an answer leaves changed: refused by name, put back
# (chapters 12-14's checkers call the learner through TimedAnswers)


def test_every_kind_of_global_module_hook_is_watched():
    from torch.nn.modules import module

    from helpers.exercises.framework import GLOBAL_MODULE_HOOKS

    kinds = {
        name
        for name, value in vars(module).items()
        if name.startswith("_global_") and name.endswith("_hooks") and isinstance(value, dict)
    }
    assert kinds == set(GLOBAL_MODULE_HOOKS)


def _hooking(register, hook):
    def answer(images, p):
        register(hook)
        return CHECKERS["patchify"][1](images, p)

    return answer


GLOBAL_HOOKS = {
    "register_module_forward_pre_hook": lambda module, inputs: None,
    "register_module_forward_hook": lambda module, inputs, output: None,
    "register_module_full_backward_pre_hook": lambda module, grad_output: None,
    "register_module_full_backward_hook": lambda module, grad_input, grad_output: None,
    "register_module_backward_hook": lambda module, grad_input, grad_output: None,
    "register_module_parameter_registration_hook": lambda module, name, parameter: None,
    "register_module_buffer_registration_hook": lambda module, name, buffer: None,
    "register_module_module_registration_hook": lambda module, name, submodule: None,
}


@pytest.mark.parametrize("register", GLOBAL_HOOKS)
def test_a_global_module_hook_left_registered_is_named_and_removed(register, run_checker):
    """Only forward hooks were watched: a global backward or registration hook passed."""
    from torch.nn.modules import module

    from helpers.exercises.framework import GLOBAL_MODULE_HOOKS

    before = {kind: dict(getattr(module, kind)) for kind in GLOBAL_MODULE_HOOKS}
    full_backward = module._global_is_full_backward_hook
    answer = _hooking(getattr(module, register), GLOBAL_HOOKS[register])
    verdict, out = run_checker(CHECKERS["patchify"][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    named = f"leaves a global module hook registered (torch.nn.modules.module.{register})"
    assert all(named in line for line in failures), out
    assert {kind: dict(getattr(module, kind)) for kind in GLOBAL_MODULE_HOOKS} == before
    assert module._global_is_full_backward_hook is full_backward


def _setting(change):
    def answer(images, p):
        change()
        return CHECKERS["patchify"][1](images, p)

    return answer


SETTINGS_LEFT_CHANGED = [
    (
        lambda: torch.autograd.set_detect_anomaly(True),
        "leaves torch's anomaly detection switched on",
    ),
    (
        lambda: torch.autograd.set_detect_anomaly(False, check_nan=False),
        "leaves torch's anomaly detection check_nan=False",
    ),
    (
        lambda: torch.use_deterministic_algorithms(True),
        "leaves torch's deterministic algorithms switched on",
    ),
    (
        lambda: torch.set_num_threads(torch.get_num_threads() + 1),
        "leaves torch's thread count",
    ),
]


@pytest.mark.parametrize(
    ("change", "words"), SETTINGS_LEFT_CHANGED, ids=[words for _, words in SETTINGS_LEFT_CHANGED]
)
def test_a_global_setting_left_changed_is_named_and_put_back(change, words, run_checker):
    """Anomaly detection, deterministic algorithms and the thread count were not watched."""
    from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS

    # its first call imports torch._inductor.config (seconds), which the time limit would stop
    torch.use_deterministic_algorithms(torch.are_deterministic_algorithms_enabled())
    before = [read() for read, _, _ in TORCH_GLOBAL_SETTINGS]
    verdict, out = run_checker(CHECKERS["patchify"][0], _setting(change))
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    assert all(words in line for line in failures), out
    after = [read() for read, _, _ in TORCH_GLOBAL_SETTINGS]
    assert all(
        torch.equal(was, now) if isinstance(was, torch.Tensor) else was == now
        for was, now in zip(before, after, strict=True)
    )


def test_the_global_settings_the_prompts_list_are_those_the_checkers_watch():
    """One name in TORCH_GLOBAL_SETTINGS_NAMED for each setting put back, and the hooks."""
    from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS, TORCH_GLOBAL_SETTINGS_NAMED

    named = TORCH_GLOBAL_SETTINGS_NAMED.replace(" and ", ", ").split(", ")
    assert len(named) == len(TORCH_GLOBAL_SETTINGS) + 1 and named[-1] == "module hooks"


# The inputs' autograd state: a backward pass inside an answer, or requires_grad switched on
# the caller's tensor, is refused in every checker's case (run_case)


def test_a_backward_pass_inside_an_answer_is_refused():
    from helpers.exercises.framework import run_case

    def doubled_after_a_backward_pass(x):
        doubled = x * 2
        doubled.sum().backward(retain_graph=True)  # BUG: fills the caller's .grad
        return doubled

    failures: list[str] = []
    passed = run_case(
        "case", doubled_after_a_backward_pass, (torch.ones(3),), lambda t: t * 2, failures
    )
    assert not passed and len(failures) == 1
    assert failures[0].startswith("case: fills the .grad of `argument 1` (a backward pass"), (
        failures
    )


@pytest.mark.parametrize(
    "leave",
    [lambda x: x.register_hook(lambda grad: grad), lambda x: x.retain_grad()],
    ids=["register_hook", "retain_grad"],
)
def test_an_answer_that_leaves_a_hook_on_its_input_is_refused(leave):
    """Each was judged Correct: the input's values and requires_grad were as they came (an
    eighth learner's pass)."""
    from helpers.exercises.framework import run_case

    def doubled_leaving_a_hook(x):
        leave(x)  # BUG: the hook stays on the caller's tensor
        return x * 2

    for given in (torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True) * 1):
        failures: list[str] = []
        passed = run_case("case", doubled_leaving_a_hook, (given,), lambda t: t * 2, failures)
        assert not passed and "leaves a hook on its input `argument 1`" in failures[0], failures


def test_a_hook_removed_before_returning_is_accepted():
    from helpers.exercises.framework import run_case

    def doubled_with_a_hook_removed(x):
        handle = x.register_hook(lambda grad: grad)
        try:
            return x * 2
        finally:
            handle.remove()

    failures: list[str] = []
    given = torch.ones(3, requires_grad=True)
    assert run_case("case", doubled_with_a_hook_removed, (given,), lambda t: t * 2, failures)


def test_an_input_detached_in_place_is_refused():
    from helpers.exercises.framework import run_case

    def doubled_after_detaching_in_place(x):
        x.detach_()  # BUG: cuts the caller's tensor from its graph, changing no value
        return x * 2

    failures: list[str] = []
    passed = run_case(
        "case",
        doubled_after_detaching_in_place,
        (torch.ones(3),),
        lambda t: t * 2,
        failures,
        names=("x",),
    )
    assert not passed
    assert failures[0].startswith("case: switches requires_grad off for its input `x`"), failures


def _switching_requires_grad_on(solution):
    def answer(*args):
        for arg in args:
            if isinstance(arg, torch.Tensor) and arg.is_floating_point() and arg.is_leaf:
                arg.requires_grad_(True)  # BUG: the caller's tensor now records gradients
        return solution(*args)

    answer.__signature__ = inspect.signature(solution)
    return answer


def _switching_requires_grad_off(solution):
    def answer(*args):
        for arg in args:
            if isinstance(arg, torch.Tensor) and arg.is_leaf and arg.requires_grad:
                arg.requires_grad_(False)  # BUG: the caller's leaf stops recording gradients
        return solution(*args)

    answer.__signature__ = inspect.signature(solution)
    return answer


NO_TENSOR_TO_SWITCH = {
    "leave one out": "a kernel function beside the tensors, whose calls the checker counts",
    "greedy decoding": "a model and token ids",
    "prefix-LM mask": "integer lengths",
    "logits with a head zeroed": "a model and token ids",
    "2-D sinusoidal encoding": "sizes only",
    "segment ids": "integer token ids",
    "whole-word masking": "integer token and word ids",
}
ON_LEAVES_THAT_RECORD_NONE = {"top-p filter"}  # a sampler's logits, never recording gradients


@pytest.mark.parametrize("exercise", [e for e in CHECKERS if e not in NO_TENSOR_TO_SWITCH])
@pytest.mark.parametrize("switch", [_switching_requires_grad_on, _switching_requires_grad_off])
def test_an_answer_that_switches_its_inputs_requires_grad_is_refused(exercise, switch, run_checker):
    """The cases hand each answer copies of leaves that record gradients, where
    requires_grad_() raises and a leaf's switch has nothing to act on: answers that switched it
    on a tensor without gradients, or off a leaf, were judged Correct (a ninth learner's
    pass)."""
    checker, solution = CHECKERS[exercise]
    verdict, out = run_checker(checker, switch(solution))
    if switch is _switching_requires_grad_off and exercise in ON_LEAVES_THAT_RECORD_NONE:
        assert verdict is True, out
        return
    assert "switches requires_grad" in out, out


def _changing_an_input_without_gradients(solution):
    def answer(*args):
        got = solution(*args)
        for arg in args:
            if isinstance(arg, torch.Tensor) and arg.is_floating_point() and not arg.requires_grad:
                arg.mul_(2)  # BUG: where autograd would not complain, the caller's tensor changes
        return got

    answer.__signature__ = inspect.signature(solution)
    return answer


@pytest.mark.parametrize("exercise", [e for e in CHECKERS if e not in NO_TENSOR_TO_SWITCH])
def test_an_answer_that_changes_an_input_without_gradients_is_refused(exercise, run_checker):
    """The probe's inputs without gradients were checked for their autograd state only: an
    answer writing into them where autograd allows it was judged Correct (a twelfth learner's
    pass)."""
    checker, solution = CHECKERS[exercise]
    verdict, out = run_checker(checker, _changing_an_input_without_gradients(solution))
    assert verdict is False and "in place" in out, out
