"""What the seventeenth and eighteenth hostile passes over chapters 12-14 found, each held:
checkers that answer every answer (a nested tensor, a raised GeneratorExit, an exception whose
message raises, an endless loop that swallows the time limit, torch's functions or the
checker's own names replaced, a forbidden function copied through exec, an in-place change
through .data), checkpoints refused in plain words, and controls and explorers that refuse by
name."""

import gzip
import inspect
import zipfile

import pytest
import torch
import torch.nn.functional as F
from traitlets import TraitError

import helpers.exercises.ch14_attention_across_modalities as ch14
from helpers import attention, induction
from helpers.checkpoints import CheckpointError, load_checkpoint, save_checkpoint
from helpers.exercises import check_answer_loss, check_top_p_filter, framework
from helpers.exercises.ch13_induction_heads import check_previous_token_score
from helpers.kernel_regression import RegressionData, make_data
from helpers.vision import load_digits
from helpers.widgets.base import IntText, ToggleButtons
from helpers.widgets.ch01_attention_pooling import DragPoolingExplorer
from helpers.widgets.direct import moved_points


def patches(images, p):
    return F.unfold(images, p, stride=p).transpose(1, 2)


def test_an_answer_of_a_nested_tensor_is_named(run_checker):
    verdict, out = run_checker(
        ch14.check_patchify, lambda x, p: torch.nested.nested_tensor([torch.zeros(2, 2)])
    )
    assert not verdict and "returned a nested tensor" in out, out


def test_an_answer_of_zeros_is_not_called_a_rescaling(run_checker):
    verdict, out = run_checker(ch14.check_patchify, lambda x, p: 0 * patches(x, p))
    assert not verdict and "rescaled" not in out, out


def test_an_in_place_operation_through_data_is_seen(run_checker):
    def through_data(x, p):
        x.data.mul_(1)
        return patches(x, p)

    verdict, out = run_checker(ch14.check_patchify, through_data)
    assert not verdict and "runs an in-place operation on its input `images`" in out, out


def test_the_reference_is_worked_out_before_the_answer_runs(run_checker, monkeypatch):
    def rebinding(x, p):
        monkeypatch.setattr(ch14, "patchify", lambda a, b: torch.zeros(1))
        return torch.zeros(1)

    verdict, out = run_checker(ch14.check_patchify, rebinding)
    assert not verdict, out


def test_an_answer_that_raises_a_base_exception_is_reported(run_checker):
    class OwnStop(BaseException):
        pass

    def stop(*args):
        raise OwnStop("stopped")

    for answer in (lambda *a: (_ for _ in ()).throw(GeneratorExit()), stop):
        verdict, out = run_checker(check_top_p_filter, answer)
        assert not verdict and "your function raised" in out, out
    verdict, out = run_checker(check_previous_token_score, stop)
    assert not verdict and "your function raised OwnStop: stopped" in out, out


def test_torch_functions_an_answer_replaces_are_put_back_and_named(run_checker):
    cross_entropy = F.cross_entropy

    def replacing(logits, sequences, separator):
        F.cross_entropy = lambda *a, **k: torch.tensor(0.0, dtype=a[0].dtype)
        return torch.tensor(0.0, dtype=logits.dtype)

    verdict, out = run_checker(check_answer_loss, replacing)
    assert F.cross_entropy is cross_entropy
    assert not verdict and "replaces torch.nn.functional.cross_entropy" in out, out


def test_a_copy_of_a_forbidden_function_is_still_forbidden(run_checker):
    copied = {}
    exec(inspect.getsource(induction.previous_token_score), vars(induction).copy(), copied)
    verdict, out = run_checker(check_previous_token_score, copied["previous_token_score"])
    assert not verdict and "calls helpers.induction.previous_token_score" in out, out


def test_an_answer_that_swallows_the_time_limit_is_stopped(run_checker, monkeypatch):
    monkeypatch.setattr(framework, "ANSWER_TIME_LIMIT_SECONDS", 0.3)

    def retrying(weights):
        while True:
            try:
                return undefined_name  # noqa: F821
            except:  # noqa: E722
                continue

    verdict, out = run_checker(check_previous_token_score, retrying)
    assert not verdict and "did not return within" in out, out


def test_a_damaged_gzip_of_digits_is_refused_by_name(tmp_path):
    good = (framework.Path(__file__).parents[1] / "data" / "digits.csv.gz").read_bytes()
    damaged = tmp_path / "digits.csv.gz"
    damaged.write_bytes(good[:100] + bytes(50) + good[150:])
    with pytest.raises(ValueError, match="cannot read the digits from"):
        load_digits(damaged)
    assert gzip.decompress(good)  # the shipped file itself reads


def test_the_drag_explorer_refuses_data_without_numbers():
    data = make_data()
    meta = RegressionData(data.x_train.to("meta"), data.y_train, data.x_test, data.y_test)
    with pytest.raises(ValueError, match="data.x_train must be an ordinary dense tensor"):
        DragPoolingExplorer(meta)


@pytest.mark.parametrize("bounds", [[5, 0], [0, float("nan")], [0, float("inf")]])
def test_moved_points_refuses_a_plane_without_bounds(bounds):
    plane = {"x": bounds, "y": [0, 5], "step": 0.1}
    with pytest.raises(ValueError, match="the plane's 'x' must be its bounds"):
        moved_points({"points": {"a": [1, 2]}}, {"a": (0.0, 0.0)}, plane)


def test_save_checkpoint_names_what_it_cannot_save(tmp_path):
    for contents, kind in (
        ({"a": lambda: 1}, r"the function .*<lambda>"),
        ({"a": [object()]}, "an object"),
    ):
        with pytest.raises(CheckpointError, match=f"reads back \\(checkpoint.a.* is {kind}\\)"):
            save_checkpoint(tmp_path / "x.pt", contents)


def test_load_checkpoint_says_plainly_why_a_crafted_record_cannot_be_read(tmp_path):
    path = tmp_path / "x.pt"
    save_checkpoint(path, {"a": torch.zeros(2)})
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    record = next(name for name in entries if name.endswith("data.pkl"))
    entries[record] = b""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    from helpers.checkpoints import _sha256sum_line, checksum_path, sha256

    checksum_path(path).write_text(_sha256sum_line(sha256(path), path.name))
    with pytest.raises(CheckpointError, match=r"ends early: empty or cut short") as refusal:
        load_checkpoint(path, ("a",), "make x")
    assert "EOFError" not in str(refusal.value)


def test_choice_controls_take_a_numpy_string_as_the_option():
    import numpy as np

    control = ToggleButtons(options=["a", "b"], value="a", description="tb")
    control.value = np.str_("b")
    assert control.value == "b" and type(control.value) is str


@pytest.mark.parametrize("value", [2**53, -(2**60), 10**5000], ids=["2^53", "-2^60", "10^5000"])
def test_a_number_box_refuses_whole_numbers_a_browser_would_round(value):
    box = IntText(value=0, description="seed")
    with pytest.raises(TraitError, match=r"seed must be a whole number from -\(2\^53 - 1\)"):
        box.value = value
    box.value = 2**53 - 1


# The eighteenth pass


@pytest.mark.parametrize(
    "name", ["PATCHIFY", "report"], ids=["the checker's reference", "the checker's report"]
)
def test_an_answer_that_rebinds_the_checkers_own_names_is_not_called_right(run_checker, name):
    def zeros(x, p):
        return torch.zeros(x.shape[0], (x.shape[2] // p) * (x.shape[3] // p), x.shape[1] * p * p)

    original = getattr(ch14, name)

    def rebinding(x, p):
        setattr(ch14, name, lambda *args: True if name == "report" else zeros(*args))
        return zeros(x, p).to(x.dtype)

    verdict, out = run_checker(ch14.check_patchify, rebinding)
    assert getattr(ch14, name) is original
    assert (
        not verdict and f"replaces helpers.exercises.ch14_attention_across_modalities.{name}" in out
    )


def test_a_tensor_method_an_answer_adds_is_removed(run_checker):
    verdict, out = run_checker(
        ch14.check_patchify,
        lambda x, p: (setattr(torch.Tensor, "permute", lambda self, *a: self), patches(x, p))[1],
    )
    assert "permute" not in vars(torch.Tensor)
    assert not verdict and "replaces torch.Tensor.permute" in out, out


def test_an_exception_whose_message_raises_is_reported(run_checker):
    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError("str fails")

    def raising(*args):
        raise Unprintable()

    verdict, out = run_checker(ch14.check_attention_centroid, raising)
    assert not verdict and "your function raised Unprintable: (its message could not" in out, out


def test_a_step_too_small_for_a_tenth_of_it_still_snaps():
    plane = {"x": [0, 5], "y": [0, 5], "step": 5e-324}
    assert moved_points({"points": {"a": [1, 1]}}, {"a": (0.0, 0.0)}, plane) == {"a": (1.0, 1.0)}


# The eighteenth pass: attention's doors


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda: attention.scaled_dot_scores(None, None), "queries must be a torch.Tensor"),
        (
            lambda: attention.scaled_dot_scores(torch.randn(2, 3, 8), torch.randn(2, 5, 7)),
            "queries and keys of one size",
        ),
        (lambda: attention.allowed_keys(None), "scores must be a floating-point tensor"),
        (lambda: attention.allowed_keys(torch.tensor(1.0)), "at least one axis"),
        (
            lambda: attention.weighted_sum(torch.rand(2, 3, 4), torch.randn(3, 4, 5)),
            "must share their leading axes",
        ),
        (
            lambda: attention.masked_softmax(torch.randn(2, 3).to_sparse()),
            "scores must be an ordinary dense tensor",
        ),
        (
            lambda: attention.DotProductAttention()(*(torch.randn(2, 3, 4, device="meta"),) * 3),
            "queries must be an ordinary dense tensor",
        ),
        (
            lambda: attention.masked_softmax(
                torch.randn(2, 3, 4), mask=torch.ones(3, 4, dtype=torch.bool, device="meta")
            ),
            "mask must be an ordinary dense tensor",
        ),
        (
            lambda: attention.masked_softmax(torch.randn(2, 3, 4).to(torch.float8_e4m3fn)),
            "a storage format",
        ),
        (
            lambda: attention.masked_softmax(torch.randn(2, 3, 4), [2**63, 1]),
            r"valid_lens must be whole numbers from 0 to 2\^63 - 1",
        ),
        (lambda: attention.AdditiveAttention(8, 6, 2**40), r"more than 2\^28"),
        (lambda: attention.MultiHeadAttention(10**5000, 1), r"more than 2\^28"),
    ],
    ids=[
        "scores of nothing",
        "scores of two sizes",
        "allowed keys of nothing",
        "allowed keys of a number",
        "weights and values of two batches",
        "sparse scores",
        "meta queries",
        "a meta mask",
        "float8 scores",
        "a length past int64",
        "a layer of 2^43 weights",
        "a size of 5000 digits",
    ],
)
def test_attention_refuses_at_its_doors(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def test_lengths_past_the_keys_mean_every_key():
    scores = torch.randn(2, 3, 4)
    every = attention.masked_softmax(scores)
    for lengths in (torch.tensor([1e19, 4.0]), torch.tensor([2**63 - 1, 4], dtype=torch.uint64)):
        torch.testing.assert_close(attention.masked_softmax(scores, lengths), every)


def test_refused_constructors_leave_the_random_numbers_alone():
    state = torch.random.get_rng_state()
    for build in (
        lambda: attention.MultiHeadAttention(8, 2, dropout=1.5),
        lambda: attention.AdditiveAttention(8, 6, 10, dropout=float("nan")),
    ):
        with pytest.raises(ValueError, match="dropout must be a probability"):
            build()
    assert torch.equal(torch.random.get_rng_state(), state)


def test_copying_from_torch_refuses_what_does_not_fit_before_copying_anything():
    from torch import nn

    with pytest.raises(ValueError, match="rope=True"):
        attention.copy_weights_from_torch(
            attention.MultiHeadAttention(8, 2, rope=True), nn.MultiheadAttention(8, 2)
        )
    ours, theirs = attention.MultiHeadAttention(8, 2), nn.MultiheadAttention(8, 2)
    theirs.out_proj.bias = None
    before = ours.W_q.weight.clone()
    with pytest.raises(ValueError, match="theirs' out_proj is not the layer"):
        attention.copy_weights_from_torch(ours, theirs)
    assert torch.equal(ours.W_q.weight, before)


def test_a_cache_of_another_layer_or_batch_is_refused_in_the_layers_words():
    layer = attention.MultiHeadAttention(8, 2).eval()
    cache = attention.KeyValueCache()
    x = torch.randn(2, 1, 8)
    layer(x, x, x, cache=cache)
    other = torch.randn(3, 1, 8)
    with pytest.raises(ValueError, match="the cache holds 2 rows of 2 key/value heads of size 4"):
        layer(other, other, other, cache=cache)
    assert len(cache) == 1


# The eighteenth pass: checkers, controls, models, checkpoints


def test_the_private_computations_of_forbidden_helpers_are_forbidden_too(run_checker):
    from helpers.exercises import check_masked_softmax

    verdict, out = run_checker(check_previous_token_score, induction._previous_token_score)
    assert not verdict and "calls helpers.induction._previous_token_score" in out, out
    verdict, out = run_checker(
        check_masked_softmax, lambda scores, mask: attention._masked_softmax(scores, None, mask)
    )
    assert not verdict and "calls helpers.attention._masked_softmax" in out, out


def test_an_answer_that_switches_off_the_profiler_is_told(run_checker):
    import sys

    def unwatched(weights):
        sys.setprofile(None)
        return induction.previous_token_score(weights)

    verdict, out = run_checker(check_previous_token_score, unwatched)
    assert not verdict and "switches off Python's profiler" in out, out


def test_a_function_of_torch_linalg_an_answer_replaces_is_put_back(run_checker):
    norm = torch.linalg.norm

    def replacing(weights):
        torch.linalg.norm = None
        return torch.diagonal(weights, -1, -2, -1).mean(-1)

    verdict, out = run_checker(check_previous_token_score, replacing)
    assert torch.linalg.norm is norm
    assert not verdict and "replaces torch.linalg.norm" in out, out


def test_a_slider_built_past_its_end_is_refused():
    from helpers.widgets.base import IntSlider

    with pytest.raises(TraitError, match="s must be a whole number from 0 to 5; got 9"):
        IntSlider(min=0, max=5, value=9, description="s")


def test_a_refused_pass_leaves_the_attention_maps_as_they_were():
    from helpers.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(11, 16, 8, 2, 1, 16)).eval()
    ids = torch.tensor([[1, 2]])
    model(ids)
    maps = model.attention_maps()[0].clone()
    with torch.no_grad():
        model.tokens.weight.mul_(1e30)
    with pytest.raises(ValueError, match="logits hold NaN"):
        model(ids)
    assert torch.equal(model.attention_maps()[0], maps)


def test_a_nested_top_p_answer_is_refused_by_name(run_checker):
    verdict, out = run_checker(
        check_top_p_filter, lambda logits, top_p: torch.nested.nested_tensor([logits])
    )
    assert not verdict and "nested" in out, out


# The nineteenth pass


def test_an_answer_that_keeps_its_results_by_shape_is_named(run_checker):
    kept = {}

    def keeping(images, p):
        return kept.setdefault((tuple(images.shape), p), patches(images, p))

    verdict, out = run_checker(ch14.check_patchify, keeping)
    assert not verdict and "keeps nothing between calls" in out, out


def test_a_top_p_filter_that_stops_cutting_near_one_is_not_called_right(run_checker):
    def off_near_one(logits, top_p):
        if top_p >= 0.95:
            return logits.clone()
        return induction_free_top_p(logits, top_p)

    verdict, out = run_checker(check_top_p_filter, off_near_one)
    assert not verdict and "top_p = 0.97" in out, out


def induction_free_top_p(logits, top_p):
    probabilities, order = logits.softmax(-1).sort(-1, descending=True)
    keep = (probabilities.cumsum(-1) - probabilities) < top_p
    keep = torch.zeros_like(keep).scatter(-1, order, keep)
    return logits.masked_fill(~keep, float("-inf"))


def test_a_mistake_is_named_only_when_the_answer_lies_nearer_its_result():
    expected = torch.tensor([100.0, 200.0], dtype=torch.float64)
    failures = []
    framework.run_case(
        "case",
        lambda x: x + 1e-4,  # within the tolerance of the mistake's result, nearer the right one
        (expected,),
        lambda x: x,
        failures,
        atol=1e-6,
        hint="the general hint",
        mistakes={"a named mistake": expected + 2.5e-4},
    )
    assert failures and "the general hint" in failures[0] and "named" not in failures[0]


def test_a_vision_log_with_a_loss_no_float32_holds_is_refused(tmp_path):
    import hashlib

    from helpers import vision_models

    saved = torch.load(vision_models.SAVED_MODELS, weights_only=True)
    saved["logs"]["vit"]["loss"][0] = 1e39
    path = tmp_path / "x.pt"
    torch.save(saved, path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.with_name("x.pt.sha256").write_text(f"{digest}  x.pt\n")
    with pytest.raises(CheckpointError, match="cross-entropies of float32"):
        vision_models.load_vision_models(path)


def test_a_loss_whose_softmax_overflows_is_not_called_right(run_checker):
    def overflowing(logits, sequences, separator):
        targets = sequences[:, 1:]
        scored = ((sequences == separator).cumsum(1)[:, :-1] > 0) & (targets != 0)
        probabilities = logits.exp() / logits.exp().sum(-1, keepdim=True)
        chosen = probabilities.gather(-1, targets[..., None])[..., 0]
        return -(chosen.log() * scored).sum() / scored.sum()

    verdict, out = run_checker(check_answer_loss, overflowing)
    assert not verdict and "logits about 95" in out, out


def test_a_2d_encoding_that_holds_only_six_positions_is_not_called_right(run_checker):
    from helpers.exercises import check_sinusoidal_2d
    from helpers.positional import sinusoidal_encoding

    def six_only(rows, cols, d_model):
        table = sinusoidal_encoding(6, d_model // 2)
        return torch.cat([table[:rows].repeat_interleave(cols, 0), table[:cols].repeat(rows, 1)], 1)

    verdict, out = run_checker(check_sinusoidal_2d, six_only)
    assert not verdict, out


def test_a_loss_whose_probabilities_underflow_is_not_called_right(run_checker):
    def underflowing(logits, sequences, separator):
        targets = sequences[:, 1:]
        scored = ((sequences == separator).cumsum(1)[:, :-1] > 0) & (targets != 0)
        log_probabilities = logits.softmax(-1).log()  # -inf where a probability is 0
        chosen = log_probabilities.gather(-1, targets[..., None])[..., 0]
        return -chosen[scored].mean()

    verdict, out = run_checker(check_answer_loss, underflowing)
    assert not verdict and out.count("\n  - ") == 1 and "the log of the softmax" in out, out


@pytest.mark.parametrize("exercise", ["previous token", "induction"])
def test_a_float64_score_computed_in_float32_is_not_called_right(exercise, run_checker):
    from helpers.exercises import check_induction_score, check_previous_token_score

    def previous_in_float32(weights):
        stripe = torch.diagonal(weights.float(), offset=-1, dim1=-2, dim2=-1)
        return stripe.mean(-1).to(weights.dtype)

    def induction_in_float32(weights, length):
        stripe = torch.diagonal(weights.float(), offset=1 - length, dim1=-2, dim2=-1)
        return stripe[..., 1:].mean(-1).to(weights.dtype)

    checker, answer = {
        "previous token": (check_previous_token_score, previous_in_float32),
        "induction": (check_induction_score, induction_in_float32),
    }[exercise]
    verdict, out = run_checker(checker, answer)
    assert not verdict and out.count("\n  - ") == 1 and "within float32's rounding" in out, out
