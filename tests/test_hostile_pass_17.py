"""What a hostile pass over chapters 12-14 found, each held: checkers that answer every answer
(a nested tensor, a raised GeneratorExit, an endless loop that swallows the time limit, torch's
own functions replaced, a forbidden function copied through exec, an in-place change through
.data), checkpoints refused in plain words, and controls and explorers that refuse by name."""

import gzip
import inspect
import zipfile

import pytest
import torch
import torch.nn.functional as F
from traitlets import TraitError

import helpers.exercises.ch14_attention_across_modalities as ch14
from helpers import induction
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
    assert not verdict and "replaces torch's own torch.nn.functional.cross_entropy" in out, out


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
