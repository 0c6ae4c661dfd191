"""A damaged, truncated, empty, foreign or non-finite checkpoint is refused with one clear
error naming the file; the shipped one loads."""

import io
import os
import pickle
import shutil
import subprocess
import zipfile
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from helpers import checkpoints
from helpers.checkpoints import (
    CheckpointError,
    checksum_path,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
    sha256,
)
from helpers.dates import load_date_model, new_date_model, save_date_model

WEIGHTS = Path(__file__).resolve().parents[1] / "data" / "date_transformer.pt"


@pytest.fixture
def copy(tmp_path):
    """A copy of the shipped checkpoint and its checksum, free to damage."""
    target = tmp_path / WEIGHTS.name
    shutil.copy(WEIGHTS, target)
    shutil.copy(checksum_path(WEIGHTS), checksum_path(target))
    return target


def test_the_shipped_checkpoint_loads(copy):
    model, history = load_date_model(copy)
    assert not model.training and len(history["loss"]) == history["recipe"]["steps"]


def test_corrupted_bytes_are_caught_by_the_checksum(copy):
    data = bytearray(copy.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    copy.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{copy.name} is damaged.*make date-model"):
        load_date_model(copy)


@pytest.mark.parametrize("size", [0, 1000])
def test_truncated_and_empty_files_are_refused(copy, size):
    copy.write_bytes(copy.read_bytes()[:size])
    with pytest.raises(CheckpointError, match="is damaged"):
        load_date_model(copy)


def test_a_missing_file_or_checksum_is_named(copy):
    checksum_path(copy).unlink()
    with pytest.raises(CheckpointError, match="has no checksum file"):
        load_date_model(copy)
    with pytest.raises(CheckpointError, match="does not exist"):
        load_date_model(copy.with_name("nothing.pt"))


def test_a_file_that_is_no_checkpoint_is_refused_even_with_a_checksum(tmp_path):
    path = tmp_path / "notes.pt"
    path.write_text("not a checkpoint")
    checksum_path(path).write_text(
        f"{__import__('hashlib').sha256(b'not a checkpoint').hexdigest()}  notes.pt\n"
    )
    with pytest.raises(CheckpointError, match="is not a torch checkpoint: torch.save writes"):
        load_checkpoint(path, ("config",), remake="make date-model")


class _Runs:
    """Pickles as a call of os.system: what weights_only refuses to run."""

    def __reduce__(self):
        return (os.system, ("true",))


def _archive_without(data: bytes, drop) -> bytes:
    """The zip archive `data` without the first member whose name `drop` accepts."""
    source, written = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(written, "w") as target:
        dropped = False
        for member in source.infolist():
            if not dropped and drop(member.filename):
                dropped = True
                continue
            target.writestr(member, source.read(member.filename))
    return written.getvalue()


def _zip_of(members: dict[str, bytes]) -> bytes:
    written = io.BytesIO()
    with zipfile.ZipFile(written, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return written.getvalue()


def _saved(contents) -> bytes:
    written = io.BytesIO()
    torch.save(contents, written)
    return written.getvalue()


DAMAGED = {  # name: (the file's bytes from the shipped file's, words the error must say)
    "empty": (lambda data: b"", "is empty (0 bytes), not a checkpoint"),
    "text": (lambda data: b"hello world\n", "is not a torch checkpoint: torch.save writes"),
    "json": (lambda data: b'{"weights": {}}', "is not a torch checkpoint"),
    "gzip": (lambda data: b"\x1f\x8b\x08\x00" + bytes(100), "is not a torch checkpoint"),
    "zeros": (lambda data: bytes(1000), "is not a torch checkpoint"),
    "plain pickle": (lambda data: pickle.dumps({"a": 1}), "is not a torch checkpoint"),
    "truncated": (lambda data: data[:-1], "is truncated or damaged"),
    "end zeroed": (lambda data: data[:-100] + bytes(100), "is truncated or damaged"),
    "no data.pkl": (
        lambda data: _archive_without(data, lambda name: name.endswith("data.pkl")),
        "is a zip archive torch.save did not write: it holds no data.pkl",
    ),
    "another zip": (  # torch said "[enforce fail at inline_container.cc:180] ", no reason
        lambda data: _zip_of({"a.txt": b"hello"}),
        "is a zip archive torch.save did not write: it holds no data.pkl",
    ),
    "no storage": (
        lambda data: _archive_without(data, lambda name: "/data/" in name),
        "is a damaged checkpoint",
    ),
    "code to run": (
        lambda data: _saved({"config": _Runs()}),
        f"did not write (Trying to load unsupported GLOBAL {os.system.__module__}.system",
    ),
}


def _loaders() -> dict:
    from helpers.decoder_only import load_translator
    from helpers.induction import load_training
    from helpers.vision_models import load_vision_models

    return {
        "load_checkpoint": lambda path: load_checkpoint(path, ("config",), "make date-model"),
        "load_translator": lambda path: load_translator("decoder-only", path),
        "load_training": load_training,
        "load_vision_models": load_vision_models,
    }


@pytest.mark.parametrize("loader", list(_loaders()))
@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_file_that_is_no_checkpoint_is_named_without_torchs_advice(tmp_path, loader, damage):
    """torch.load's own text was passed on: "internal miniz error", "(101)" for a text file,
    "()" for an empty one, and its advice to load with weights_only=False, which runs whatever
    code a crafted file holds."""
    make, words = DAMAGED[damage]
    path = tmp_path / "damaged.pt"
    path.write_bytes(make(WEIGHTS.read_bytes()))
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(CheckpointError) as raised:
        _loaders()[loader](path)
    message = str(raised.value)
    assert words in message and "weights_only" not in message and "miniz" not in message


def test_a_checkpoint_without_the_expected_keys_is_refused(tmp_path):
    path = tmp_path / "other.pt"
    save_checkpoint(path, {101: torch.zeros(2)})
    with pytest.raises(CheckpointError, match=r"should hold \['config', 'weights', 'history'\]"):
        load_date_model(path)


def test_non_finite_weights_are_refused(tmp_path):
    model = new_date_model()
    with torch.no_grad():
        model.output.weight[0, 0] = float("nan")
    path = tmp_path / "nan.pt"
    with pytest.raises(CheckpointError, match="refuses checkpoint.weights.output.weight"):
        save_date_model(path, model, {"loss": [1.0]})  # never saved: it could not be loaded
    assert not path.exists()
    contents = {"config": asdict(model.config), "weights": model.state_dict(), "history": {}}
    torch.save(contents, path)  # written anyway, with a valid checksum
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(
        CheckpointError, match="cannot be loaded: checkpoint.weights.output.weight holds inf or NaN"
    ):
        load_date_model(path)


def test_integer_date_weights_are_refused_not_truncated(tmp_path):
    model = new_date_model()
    weights = {name: value.round().long() for name, value in model.state_dict().items()}
    path = tmp_path / "int.pt"
    save_checkpoint(path, {"config": asdict(model.config), "weights": weights, "history": {}})
    with pytest.raises(
        CheckpointError, match="should be a floating-point tensor, found torch.int64"
    ):
        load_date_model(path)


def test_a_config_is_checked_before_the_model_is_built(tmp_path):
    model = new_date_model()
    config = {**asdict(model.config), "src_vocab_size": 400_000}
    path = tmp_path / "huge.pt"
    save_checkpoint(path, {"config": config, "weights": {}, "history": {}})
    with pytest.raises(CheckpointError, match="src_vocab_size is 400000, expected 70"):
        load_date_model(path)
    save_checkpoint(
        path, {"config": {**asdict(model.config), "d_model": 32}, "weights": {}, "history": {}}
    )
    with pytest.raises(CheckpointError, match="weights do not fit its config"):
        load_date_model(path)


def test_a_config_too_large_for_a_checkpoint_is_refused_before_it_is_built(tmp_path):
    config = {**asdict(new_date_model().config), "d_model": 4096, "num_layers": 4096}
    path = tmp_path / "huge.pt"
    save_checkpoint(path, {"config": config, "weights": {}, "history": {}})
    with pytest.raises(CheckpointError, match="more than a checkpoint of at most 16 MB"):
        load_date_model(path)


def test_a_bsd_style_or_uppercase_checksum_is_accepted(copy):
    digest = checksum_path(copy).read_text().split()[0]
    checksum_path(copy).write_text(f"SHA256 ({copy.name}) = {digest.upper()}\n")
    load_date_model(copy)


def test_a_checksum_file_that_is_not_text_is_a_checkpoint_error(copy):
    checksum_path(copy).write_bytes(b"\xff\xfe\x00 not a checksum")
    with pytest.raises(CheckpointError, match="holds bytes that are not text"):
        load_date_model(copy)


@pytest.mark.parametrize("path", [None, 123, b"/tmp/x.pt"])
def test_a_path_that_is_not_a_path_is_named(path):
    with pytest.raises(TypeError, match="path must be a file path"):
        load_checkpoint(path, ("config",), remake="make date-model")
    with pytest.raises(TypeError, match="path must be a file path"):
        save_checkpoint(path, {"config": {}})


def test_a_folder_is_not_a_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match="is a folder, not a checkpoint file"):
        load_checkpoint(tmp_path, ("config",), remake="make date-model")
    with pytest.raises(CheckpointError, match="it is a folder"):
        save_checkpoint(tmp_path, {"config": {}})


def test_contents_that_cannot_be_saved_are_named(tmp_path):
    with pytest.raises(TypeError, match="contents must be a dict, got str"):
        save_checkpoint(tmp_path / "x.pt", "text")
    with pytest.raises(CheckpointError, match="only tensors, numbers, strings"):
        save_checkpoint(tmp_path / "x.pt", {"history": {"callback": lambda: 1}})


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"w": torch.ones(2, dtype=torch.int64)}, "weight w should be a floating-point tensor"),
        ({"w": 1.0}, "weight w should be a floating-point tensor, found float"),
        ([torch.ones(2)], "weights should be a dict of tensors, found list"),
    ],
)
def test_weights_must_be_floating_point_tensors(weights, message):
    with pytest.raises(CheckpointError, match=message):
        float_weights(weights, "model.pt")


def test_float64_weights_beyond_float32_are_refused_not_loaded_as_inf():
    """Shared by every loader: chapter 12's loaded 1e39 as inf (chapters 13 and 14 refused it,
    each with its own copy of the check)."""
    with pytest.raises(
        CheckpointError,
        match=r"model.pt: its weight w holds NaN or inf in float32 \(a value beyond",
    ):
        float_weights({"w": torch.full((2,), 1e39, dtype=torch.float64)}, "model.pt")


def test_weights_named_by_something_other_than_text_are_named():
    """A key 5 gave "sequence item 0: expected str instance, int found"."""
    model = torch.nn.Linear(2, 3)
    with pytest.raises(CheckpointError, match=r"named by text .* found the key 5 \(int\)"):
        load_weights(model, {**model.state_dict(), 5: torch.zeros(1)}, "model.pt")


def test_weights_that_do_not_fit_are_named_before_loading():
    model = torch.nn.Linear(2, 3)
    with pytest.raises(CheckpointError, match=r"missing: bias; shape: weight \(2, 3\)"):
        load_weights(model, {"weight": torch.zeros(2, 3)}, "model.pt")
    with pytest.raises(CheckpointError, match="unexpected: extra"):
        load_weights(model, {**model.state_dict(), "extra": torch.zeros(1)}, "model.pt")


def test_a_name_too_long_for_the_system_is_a_checkpoint_error(tmp_path):
    from helpers.induction import load_training
    from helpers.vision_models import load_vision_models

    too_long = tmp_path / ("a" * 300)
    for load in (
        lambda: load_checkpoint(too_long, ("x",), "make x"),
        lambda: load_training(too_long),
        lambda: load_vision_models(too_long),
    ):
        with pytest.raises(CheckpointError, match="cannot read .*File name too long"):
            load()
    with pytest.raises(CheckpointError, match="cannot save .*File name too long"):
        save_checkpoint(too_long, {"x": torch.zeros(1)})


@pytest.mark.parametrize(
    ("tensor", "words"),
    [
        (torch.zeros(4).to_sparse(), "w is a torch.sparse_coo tensor, not a dense one"),
        (torch.zeros(4, device="meta"), r"w is a meta tensor \(a shape without numbers\)"),
    ],
)
def test_a_tensor_that_is_not_dense_is_named(tmp_path, tensor, words):
    path = tmp_path / "odd.pt"
    torch.save({"weights": {"w": tensor}}, path)
    (tmp_path / "odd.pt.sha256").write_text(f"{sha256(path)}  odd.pt\n")
    with pytest.raises(CheckpointError, match=words):
        load_checkpoint(path, ("weights",), "make x")


def test_a_checksum_after_a_byte_order_mark_is_read(copy):
    """An editor's UTF-8 BOM before the right digest blamed the checkpoint: "is damaged"."""
    checksum_path(copy).write_bytes(b"\xef\xbb\xbf" + checksum_path(copy).read_bytes())
    load_date_model(copy)


def test_an_empty_checksum_file_is_named_not_the_checkpoint(copy):
    checksum_path(copy).write_text("\n")
    with pytest.raises(CheckpointError, match="the checksum file holds no digest") as raised:
        load_date_model(copy)
    assert "is damaged" not in str(raised.value)


def test_a_weight_that_is_not_a_tensor_is_named():
    """It raised AttributeError: 'list' object has no attribute 'shape'."""
    weights = {"weight": [[0, 0], [0, 0]], "bias": torch.zeros(2)}
    with pytest.raises(CheckpointError, match=r"p: its weight weight should be a tensor, .*list"):
        load_weights(torch.nn.Linear(2, 2), weights, "p")


@pytest.mark.parametrize(
    ("model", "weights", "path", "words"),
    [
        (None, {"w": torch.ones(1)}, "p", "model must be a torch.nn.Module, got NoneType"),
        (torch.nn.Linear(1, 1), None, "p", "weights must be a dict of tensors, got NoneType"),
        (torch.nn.Linear(1, 1), {"w": torch.ones(1)}, None, "path must be a file path"),
    ],
    ids=["model", "weights", "path"],
)
def test_load_weights_names_an_argument_of_the_wrong_kind(model, weights, path, words):
    with pytest.raises(TypeError, match=words):
        load_weights(model, weights, path)


def test_contents_nested_too_deep_are_named_not_a_recursion_error(tmp_path):
    deep = {}
    for _ in range(1000):
        deep = {"a": deep}
    with pytest.raises(CheckpointError, match="nested more than 100 dicts or lists deep"):
        save_checkpoint(tmp_path / "x.pt", deep)
    assert not (tmp_path / "x.pt").exists()


def test_an_integer_torch_cannot_read_back_is_named(tmp_path):
    too_long = r"is an integer of more than 614 digits .*, which torch.load cannot read back"
    with pytest.raises(CheckpointError, match=r"checkpoint\.a " + too_long):
        save_checkpoint(tmp_path / "x.pt", {"a": 10**5000})
    with pytest.raises(CheckpointError, match=r"checkpoint\.b\[0\] " + too_long):
        save_checkpoint(tmp_path / "x.pt", {"b": [2**2039]})
    save_checkpoint(tmp_path / "x.pt", {"a": 2**2039 - 1, "b": -(2**2039) + 1})
    assert load_checkpoint(tmp_path / "x.pt", ("a", "b"), "make x")["a"] == 2**2039 - 1


def test_checksumming_a_name_too_long_or_empty_is_named(tmp_path):
    with pytest.raises(CheckpointError, match="cannot checksum .*File name too long"):
        sha256(tmp_path / ("a" * 5000))
    with pytest.raises(ValueError, match="path must name a file, got '.'"):
        checksum_path("")


def _tied_pair() -> torch.nn.Module:
    pair = torch.nn.Sequential(torch.nn.Linear(2, 2, bias=False), torch.nn.Linear(2, 2))
    pair[1].weight = pair[0].weight
    return pair


def test_weights_that_a_model_ties_to_one_tensor_must_be_equal():
    """A GPT's output.weight, tied to tokens.weight, silently overwrote the embedding."""
    model = _tied_pair()
    weights = {key: value.clone() for key, value in model.state_dict().items()}
    load_weights(model, weights, "model.pt")  # equal: loads
    weights["1.weight"] = weights["0.weight"] + 1.0
    with pytest.raises(CheckpointError, match=r"its weights 0.weight and 1.weight differ, but th"):
        load_weights(model, weights, "model.pt")
    assert not torch.equal(model[0].weight, weights["1.weight"])


def test_a_path_that_cannot_be_written_is_named_before_anything_is_written(tmp_path):
    """A NUL byte ('embedded null byte'), a file where the folder should be ('does not exist'),
    a checksum path that is a folder (IsADirectoryError after the checkpoint was written) and
    an unwritable folder (FileNotFoundError) failed only at the write."""
    (tmp_path / "notes.txt").write_text("a file")
    (tmp_path / "clash.pt.sha256").mkdir()
    cases = {
        str(tmp_path / "a\0b.pt"): "a file name holds no NUL byte",
        tmp_path / "notes.txt" / "x.pt": "notes.txt is a file, not a folder",
        tmp_path / "clash.pt": "its checksum would go to " + str(tmp_path / "clash.pt.sha256"),
    }
    if Path("/proc").is_dir():
        cases[Path("/proc/x.pt")] = "the folder /proc cannot be written to"
    for path, words in cases.items():
        with pytest.raises(CheckpointError) as raised:
            save_checkpoint(path, {"x": torch.zeros(1)})
        assert words in str(raised.value), str(raised.value)
    assert not (tmp_path / "clash.pt").exists()


# Files no checkpoint can be: pipes and devices, oversized checksum files, packed archives


def _with_checksum(path: Path) -> Path:
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    return path


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX feature")
def test_a_pipe_is_refused_for_saving_and_loading_without_waiting_for_a_reader(tmp_path):
    pipe = tmp_path / "pipe.pt"
    os.mkfifo(pipe)
    with pytest.raises(CheckpointError, match=r"cannot save .*pipe.pt is not a regular file"):
        save_checkpoint(pipe, {"x": 1})
    with pytest.raises(CheckpointError, match=r"pipe.pt is not a regular file .*, not a"):
        load_checkpoint(pipe, ("x",), "make it")
    os.mkfifo(checksum_path(tmp_path / "kept.pt"))
    with pytest.raises(CheckpointError, match=r"kept.pt.sha256 is not a regular file"):
        save_checkpoint(tmp_path / "kept.pt", {"x": 1})


@pytest.mark.skipif(not Path("/dev/null").exists(), reason="a POSIX device")
def test_a_device_is_named_as_one_not_as_missing():
    with pytest.raises(CheckpointError, match=r"/dev/null is not a regular file"):
        load_checkpoint("/dev/null", ("x",), "make it")


def test_a_checksum_file_too_long_to_be_one_is_refused_without_reading_it(copy):
    with open(checksum_path(copy), "r+b") as file:
        file.truncate(400 * 2**20)  # sparse: 400 MiB that take no disk
    with pytest.raises(CheckpointError, match=r"holds 419,430,400 bytes, not a checksum"):
        load_date_model(copy)


def test_a_file_larger_than_any_checkpoint_is_refused_before_its_checksum(tmp_path):
    path = tmp_path / "large.pt"
    with open(path, "wb") as file:
        file.truncate(2**28)
    checksum_path(path).write_text(f"{'0' * 64}  large.pt\n")
    with pytest.raises(CheckpointError, match=r"holds 268,435,456 bytes, more than any checkpoint"):
        load_checkpoint(path, ("x",), "make it")


def _repacked(source: Path, target: Path, compression: int) -> Path:
    """source's entries written to target with another compression, with its checksum."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", compression) as new:
        for entry in old.infolist():
            new.writestr(entry.filename, old.read(entry.filename))
    return _with_checksum(target)


def test_a_compressed_archive_is_refused_before_torch_unpacks_it(copy, tmp_path):
    packed = _repacked(copy, tmp_path / "packed.pt", zipfile.ZIP_DEFLATED)
    with pytest.raises(CheckpointError, match=r"is compressed, which torch.save never does"):
        load_checkpoint(packed, ("weights",), "make date-model")


def test_a_name_that_is_not_text_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "\udcff.pt"  # a lone surrogate: utf-8 cannot write it into the checksum
    with pytest.raises(CheckpointError, match=r"holds '\\udcff', which utf-8 cannot encode"):
        savable_path(path)
    with pytest.raises(CheckpointError, match="name the file in plain characters"):
        save_checkpoint(path, {"x": torch.zeros(2)})
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "call",
    [
        lambda path: load_checkpoint(path, ("x",), "make x"),
        sha256,
        lambda path: load_date_model(path),
        savable_path,
    ],
    ids=["load_checkpoint", "sha256", "a chapter's loader", "savable_path"],
)
@pytest.mark.parametrize("name", ["\ud800.pt", "\ud800/x.pt"], ids=["file", "folder"])
def test_a_path_the_file_system_cannot_encode_is_a_checkpoint_error(tmp_path, call, name):
    """os.stat's UnicodeEncodeError came out of every loader."""
    path = tmp_path / name
    with pytest.raises(CheckpointError) as raised:
        call(path)
    assert f"{ascii(str(path))}: its name holds '\\ud800', which utf-8 cannot encode" in str(
        raised.value
    )
    assert str(raised.value).endswith("name the file in plain characters")


def test_a_checksum_files_name_is_refused_and_the_checkpoint_beside_it_still_loads(copy):
    """Saving onto name.pt.sha256 wrote a checkpoint over the checksum (and a
    name.pt.sha256.sha256), so name.pt no longer loaded."""
    checksum = checksum_path(copy)
    recorded = checksum.read_bytes()
    with pytest.raises(CheckpointError, match=r"a name ending in \.sha256 is a checksum file's"):
        save_checkpoint(checksum, {"x": torch.zeros(1)})
    assert checksum.read_bytes() == recorded
    assert not checksum_path(checksum).exists()
    load_checkpoint(copy, ("weights",), "make date-model")


# Tensors whose numbers cannot be checked, and arguments that are not what load_checkpoint reads


@pytest.mark.parametrize(
    ("tensor", "words"),
    [
        (lambda: torch.ones(1).expand(2**15, 2**15), "stretched over fewer numbers than it"),
        (lambda: torch.ones(2).to(torch.float8_e4m3fn), "a storage format torch computes nothing"),
        (
            lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged),
            "nested",
        ),
    ],
    ids=["expanded view", "float8", "nested"],
)
def test_a_tensor_whose_numbers_cannot_be_checked_is_named_not_built(tmp_path, tensor, words):
    tensor = tensor()
    with pytest.raises(CheckpointError, match=words):
        save_checkpoint(tmp_path / "x.pt", {"x": tensor})
    with pytest.raises(CheckpointError, match=f"its weight x .*{words}"):
        float_weights({"x": tensor}, "p")


def test_a_complex_nan_is_refused_as_a_float_nan_is(tmp_path):
    with pytest.raises(CheckpointError, match=r"refuses checkpoint.c, which holds inf or NaN"):
        save_checkpoint(tmp_path / "c.pt", {"c": complex("nan")})


def test_a_file_load_checkpoint_would_refuse_for_its_size_is_not_saved(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "MOST_CHECKPOINT_BYTES", 10_000)
    with pytest.raises(CheckpointError, match=r"its tensors hold more than 10,000 bytes"):
        save_checkpoint(tmp_path / "big.pt", {"x": torch.zeros(5_000)})
    with pytest.raises(CheckpointError, match=r"would hold [\d,]+ bytes, more than load_che"):
        save_checkpoint(tmp_path / "big.pt", {"x": "a" * 20_000})
    assert not (tmp_path / "big.pt").exists()


@pytest.mark.parametrize(
    ("keys", "remake", "error", "words"),
    [
        ([["x"]], "make it", ValueError, r"keys must be a tuple of the names \(str\)"),
        (
            ("x",),
            10**5000,
            TypeError,
            r"remake must be the command .* got an int too large to print",
        ),
    ],
    ids=["unhashable keys", "a remake of 5001 digits"],
)
def test_load_checkpoints_own_arguments_are_named(copy, keys, remake, error, words):
    with pytest.raises(error, match=words):
        load_checkpoint(copy, keys, remake)


def test_a_loop_of_symbolic_links_is_named_where_it_is_saved_or_read(tmp_path):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for attempt in (
        lambda: savable_path(tmp_path / "a"),
        lambda: savable_path(tmp_path / "a" / "model.pt"),
        lambda: load_checkpoint(tmp_path / "a", ("weights",), "make x"),
    ):
        with pytest.raises(CheckpointError, match="symbolic links"):
            attempt()


def test_a_file_the_system_lists_but_will_not_read_is_a_checkpoint_error(tmp_path):
    (tmp_path / "mem.pt").symlink_to("/proc/self/mem")
    (tmp_path / "mem.pt.sha256").write_text("0" * 64 + "  mem.pt\n")
    with pytest.raises(CheckpointError, match=r"cannot be read \(Input/output error\)"):
        load_checkpoint(tmp_path / "mem.pt", ("weights",), "make x")


@pytest.mark.parametrize(
    "weight, words",
    [
        (torch.zeros(2, 2, dtype=torch.complex64), "should hold real numbers, found torch.comp"),
        (torch.zeros(2, 2).to_sparse(), "ordinary dense tensor, found one torch.sparse_coo"),
        (torch.zeros(2, 2, device="meta"), "on the meta device"),
    ],
)
def test_load_weights_names_a_weight_a_model_cannot_hold(weight, words):
    model = torch.nn.Linear(2, 2)
    before = model.weight.detach().clone()
    with pytest.raises(CheckpointError, match=words):
        load_weights(model, {"weight": weight, "bias": torch.zeros(2)}, "model.pt")
    assert torch.equal(model.weight, before)


# Crafted structures: a few kilobytes that list billions of items, loops, repeated tensors


def _saved_with_checksum(path: Path, contents: dict) -> Path:
    torch.save(contents, path)
    return _with_checksum(path)


def _listed_ten_times(levels: int, container=list):
    """[[...] * 10] * 10 ...: 10 ** (levels + 1) zeros, each list stored once."""
    nested = container([0] * 10)
    for _ in range(levels):
        nested = container([nested] * 10)
    return nested


@pytest.mark.parametrize(
    "contents",
    [
        lambda: {"x": _listed_ten_times(8)},
        lambda: {"x": {_listed_ten_times(6, tuple): 1}},
    ],
    ids=["a billion zeros", "a tuple key of ten million"],
)
def test_a_few_kilobytes_that_list_millions_of_items_are_refused_at_once(tmp_path, contents):
    """A 1,447-byte file listing one list ten times, which lists one list ten times, and so on
    (10^9 zeros) kept load_checkpoint walking every zero; a tuple like it as a dict's key keeps
    torch.load itself hashing it for seconds to minutes."""
    contents = contents()
    path = _saved_with_checksum(tmp_path / "laughs.pt", contents)
    assert path.stat().st_size < 5000
    with pytest.raises(CheckpointError, match="refers to more than 1,048,576 items, counting"):
        load_checkpoint(path, ("x",), "make x")
    with pytest.raises(CheckpointError, match="more than 1,048,576 items, counting each"):
        save_checkpoint(tmp_path / "again.pt", contents)
    assert not (tmp_path / "again.pt").exists()


def test_a_record_longer_than_any_checkpoints_is_refused_before_torch_reads_it(tmp_path):
    """A list of a million zeros (a 2 MB file) took torch.load and the checks 3 s and 120 MB;
    four million, 10 s and 500 MB."""
    zeros = [0] * (checkpoints.MOST_CHECKPOINT_ITEMS + 1)
    path = _saved_with_checksum(tmp_path / "zeros.pt", {"x": zeros})
    with pytest.raises(CheckpointError, match=r"its record of what it holds \(.*data.pkl\) takes"):
        load_checkpoint(path, ("x",), "make x")
    with pytest.raises(CheckpointError, match=r"checkpoint\.x holds more than 1,048,576 items"):
        save_checkpoint(tmp_path / "again.pt", {"x": zeros})


def test_a_tensor_listed_thousands_of_times_is_counted_each_time_but_read_once(tmp_path):
    """One 4 MB tensor listed 3,000 times was checked 3,000 times (6.6 s), and every loader's
    float32 copy of each would take 24 GB."""
    weight = torch.zeros(2**20)
    path = _saved_with_checksum(tmp_path / "many.pt", {"x": [weight] * 3000})
    with pytest.raises(CheckpointError, match=r"its tensors hold more than 134,217,728 bytes, c"):
        load_checkpoint(path, ("x",), "make x")
    with pytest.raises(CheckpointError, match=r"its tensors hold more than 134,217,728 bytes, c"):
        save_checkpoint(tmp_path / "again.pt", {"x": [weight] * 3000})
    save_checkpoint(tmp_path / "tied.pt", {"x": [weight, weight]})  # a weight tied: loads
    loaded = load_checkpoint(tmp_path / "tied.pt", ("x",), "make x")["x"]
    assert loaded[0] is loaded[1] and torch.equal(loaded[0], weight)


def test_a_list_that_holds_itself_is_named_as_a_loop(tmp_path):
    """It was called "nested more than 100 dicts or lists deep"."""
    loop = {}
    loop["me"] = loop
    with pytest.raises(CheckpointError, match=r"checkpoint\.v\.me is a dict or list that holds"):
        save_checkpoint(tmp_path / "loop.pt", {"v": loop})


def test_a_list_read_once_is_still_too_deep_where_it_is_listed_again_deeper(tmp_path):
    """Each list is read once: where it is listed again, deeper, its depth is counted again."""
    chain = _wrapped(0, 60)
    save_checkpoint(tmp_path / "x.pt", {"a": chain, "b": chain})
    with pytest.raises(CheckpointError, match=r"checkpoint\.b(\[0\])+ is nested more than 100"):
        save_checkpoint(tmp_path / "x.pt", {"a": chain, "b": _wrapped(chain, 45)})


def _wrapped(value, times: int):
    for _ in range(times):
        value = [value]
    return value


# Where a checkpoint goes, and what its refusals say


def test_a_symbolic_link_into_a_missing_folder_is_refused_before_anything_is_written(tmp_path):
    """save_checkpoint (and train_and_save, after all its training) raised a bare
    FileNotFoundError; a checksum path linking there left the checkpoint without a checksum."""
    from helpers.vision_models import train_and_save

    (tmp_path / "model.pt").symlink_to(tmp_path / "gone" / "model.pt")
    for save in (
        lambda: save_checkpoint(tmp_path / "model.pt", {"x": 1}),
        lambda: train_and_save(tmp_path / "model.pt"),
    ):
        with pytest.raises(CheckpointError, match=r"model.pt is a symbolic link to .*gone/model"):
            save()
    (tmp_path / "kept.pt.sha256").symlink_to(tmp_path / "gone" / "kept.sha256")
    with pytest.raises(CheckpointError, match=r"kept.pt.sha256 is a symbolic link to .*, and th"):
        save_checkpoint(tmp_path / "kept.pt", {"x": 1})
    assert not (tmp_path / "kept.pt").exists()
    (tmp_path / "elsewhere.pt").symlink_to(tmp_path / "target.pt")  # a folder that exists
    save_checkpoint(tmp_path / "elsewhere.pt", {"x": 1})
    assert load_checkpoint(tmp_path / "elsewhere.pt", ("x",), "make x") == {"x": 1}


@pytest.mark.parametrize(
    ("value", "infinite"),
    [
        (torch.empty(2, device="meta"), False),
        (float("nan"), False),
        (torch.tensor([1.0, float("inf")], dtype=torch.float16), True),
    ],
    ids=["meta", "nan", "inf"],
)
def test_the_float16_note_is_added_only_to_a_refusal_of_inf(tmp_path, value, infinite):
    with pytest.raises(CheckpointError, match="load_checkpoint refuses checkpoint.w") as raised:
        save_checkpoint(tmp_path / "w.pt", {"w": value})
    assert ("float16 makes inf" in str(raised.value)) == infinite


def test_a_small_view_of_a_large_storage_is_named_before_it_is_written(tmp_path):
    """A 2-number slice of 2^25 + 16 zeros was refused as "it would hold 134,218,496 bytes",
    after torch.save had written the whole storage into memory."""
    view = torch.zeros(2**25 + 16)[:2]
    with pytest.raises(
        CheckpointError,
        match=r"checkpoint\.w is a view of 2 numbers into a storage of 134,217,792 bytes, all "
        r"of which torch.save writes.*save a copy, \.clone\(\)",
    ):
        save_checkpoint(tmp_path / "w.pt", {"w": view})
    save_checkpoint(tmp_path / "w.pt", {"w": view.clone()})


# The checksum file: every line sha256sum writes or reads


@pytest.mark.parametrize(
    "line",
    [
        lambda digest, name: f"{digest}\t{name}\n",
        lambda digest, name: f"{digest} {name}\n",
        lambda digest, name: f"{digest} *{name}\n",
        lambda digest, name: f"\\{digest}  back\\\\slash.pt\n",
        lambda digest, name: f"{'0' * 64}  other.pt\n{digest}  {name}\n",
        lambda digest, name: f"# made by hand\n\n  {digest}  ./{name}\r\n",
        lambda digest, name: f"\\SHA256 (new\\nline.pt) = {digest}\n",
    ],
    ids=["tab", "one space", "binary", "escaped name", "second line", "comment", "bsd escaped"],
)
def test_every_checksum_line_sha256sum_reads_is_read(copy, line):
    """sha256sum's tab, its escaped line for a name with a backslash or a line break, and a
    checksum file of two lines with the right one second were all called damaged."""
    checksum_path(copy).write_text(line(sha256(copy), copy.name))
    load_date_model(copy)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("hello\n", r"is malformed: its line 1 \('hello'\) is not one sha256sum writes"),
        (f"{'a' * 32}  x.pt\n", "is malformed: its line 1"),
        (f"\\{'a' * 64}  a\\b.pt\n", "is malformed: its line 1"),
        (f"{'0' * 64}  a.pt\n{'1' * 64}  b.pt\n", "holds 2 checksums, none of them of date_tr"),
    ],
    ids=["words", "md5 length", "bad escape", "other files"],
)
def test_a_malformed_checksum_file_is_named_not_the_checkpoint(copy, text, words):
    checksum_path(copy).write_text(text)
    with pytest.raises(CheckpointError, match=words) as raised:
        load_date_model(copy)
    assert "is damaged" not in str(raised.value)


@pytest.mark.skipif(shutil.which("sha256sum") is None, reason="GNU coreutils' sha256sum")
@pytest.mark.parametrize("name", ["new\nline.pt", "back\\slash.pt", "carriage\rreturn.pt"])
def test_a_name_sha256sum_escapes_is_written_as_sha256sum_writes_it(tmp_path, name):
    """A name with a line break was written on two lines, which sha256sum -c cannot read."""
    save_checkpoint(tmp_path / name, {"x": 1})
    checked = subprocess.run(
        ["sha256sum", "-c", checksum_path(name).name], cwd=tmp_path, capture_output=True
    )
    assert checked.returncode == 0, checked.stderr
    assert load_checkpoint(tmp_path / name, ("x",), "make x") == {"x": 1}


def test_a_numpy_number_inside_a_checkpoint_is_named_as_one(tmp_path):
    """It was called a damaged checkpoint, with torch's 'Unsupported global' text."""
    import numpy as np

    path = tmp_path / "numpy.pt"
    torch.save({"step": [np.int64(0)]}, path)
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(CheckpointError, match="holds a numpy number or array where a checkpoint"):
        load_checkpoint(path, ("step",), "make x")


def test_a_set_and_a_non_finite_key_are_refused_on_saving(tmp_path):
    """NaN in a set, or inf as a dict key, was saved and loaded back (an eighth hostile pass)."""
    with pytest.raises(CheckpointError, match="is a set: a checkpoint holds"):
        save_checkpoint(tmp_path / "set.pt", {"a": {float("nan")}})
    with pytest.raises(CheckpointError, match="holds inf or NaN"):
        save_checkpoint(tmp_path / "key.pt", {"b": {float("inf"): 1}})


def test_load_weights_names_a_nan_weight():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match="its weight weight holds NaN or inf"):
        load_weights(
            model, {"weight": torch.full((2, 2), float("nan")), "bias": torch.ones(2)}, "p"
        )


def test_a_record_that_fails_its_crc_and_an_overlong_integer_are_named(tmp_path):
    buffer = io.BytesIO()
    torch.save({"a": torch.ones(4)}, buffer)
    damaged = bytearray(buffer.getvalue())
    damaged[damaged.find(b"_rebuild_tensor")] ^= 1
    path = tmp_path / "crc.pt"
    path.write_bytes(bytes(damaged))
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(CheckpointError, match="is damaged"):
        load_checkpoint(path, ("a",), "make x")
    path = tmp_path / "long.pt"
    torch.save({"a": 10**700}, path)
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(CheckpointError, match="an integer of more than 614 digits"):
        load_checkpoint(path, ("a",), "make x")


def test_numpy_values_are_named_with_their_place_and_type_before_anything_is_written(tmp_path):
    """torch.save wrote them and the check read them back with torch's 'Unsupported global:
    GLOBAL numpy._core.multiarray.scalar', naming neither the value nor where it lay."""
    import numpy as np

    path = tmp_path / "numpy.pt"
    contents = {
        "history": {"device": np.str_("cpu"), "loss": [np.float64(1.5)], "ids": np.arange(3)},
        "config": {np.int64(2): 1},
    }
    with pytest.raises(CheckpointError) as raised:
        save_checkpoint(path, contents)
    for named in (
        "checkpoint.history.device, which is a numpy.str_: use str()",
        "checkpoint.history.loss[0], which is a numpy.float64: use .item()",
        "checkpoint.history.ids, which is a numpy.ndarray: save torch.from_numpy(it)",
    ):
        assert named in str(raised.value), str(raised.value)
    with pytest.raises(CheckpointError, match=r"checkpoint.config.2, which is a numpy.int64"):
        save_checkpoint(path, {"config": contents["config"]})
    assert not list(tmp_path.iterdir())


def test_loading_a_checksum_file_names_the_checkpoint_it_checks(tmp_path):
    """It said the checksum file had no checksum file of its own, and to rebuild it (a twelfth
    hostile pass)."""
    with pytest.raises(CheckpointError, match=r"is a checksum file: load the checkpoint it checks"):
        load_checkpoint(tmp_path / "model.pt.sha256", ("weights",), "make models")


def test_a_name_damaged_in_a_records_local_header_is_a_checkpoint_error(tmp_path):
    """A byte of an entry's name changed after writing, its checksum recomputed: zipfile's
    directory still reads, the entry's own header does not (UnicodeDecodeError)."""
    path = tmp_path / "model.pt"
    save_checkpoint(path, {"weights": {"w": torch.ones(3)}})
    raw = bytearray(path.read_bytes())
    raw[30 + 10] = 0x8B  # the 11th byte of the first entry's name, after its 30-byte header
    path.write_bytes(bytes(raw))
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")
    with pytest.raises(CheckpointError, match="damaged"):
        load_checkpoint(path, ("weights",), "make it")
