"""Trained weights on disk: each file ``name.pt`` has its SHA-256 beside it in ``name.pt.sha256``
(the format of ``sha256sum``, so ``sha256sum -c`` checks it too). A file is loaded only when
its checksum matches, ``torch.load(weights_only=True)`` reads it, it holds the expected keys,
and every number in it is finite. Anything else is one clear CheckpointError.
"""

import cmath
import hashlib
import io
import math
import os
import pickle
import stat
import tempfile
import warnings
import zipfile
from pathlib import Path

import torch

from helpers import validation


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged, or not what it should be."""


# 8 times the 16 MB a file of this series may take: a crafted copy holding its float16
# weights as int64 (4 times as large) must still reach the check that names them
MOST_CHECKPOINT_BYTES = 2**27
MOST_CHECKSUM_BYTES = 4096  # a sha256sum line is 64 hex digits, two spaces and the file's name


def as_path(path: object, name: str = "path") -> Path:
    """path as a Path, if it is one or a str (bytes and numbers are refused by name)."""
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a file path (str or pathlib.Path), got {path!r}")
    return Path(path)


def checksum_path(path: str | Path) -> Path:
    path = as_path(path)
    if not path.name:
        raise ValueError(f"path must name a file, got {validation.shown(str(path))}")
    return path.with_name(path.name + ".sha256")


def sha256(path: str | Path) -> str:
    path = as_path(path)
    if _kind(path, "cannot checksum") != "file":
        raise FileNotFoundError(f"{path} is not a file: there is nothing to checksum")
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def savable_path(path: object) -> Path:
    """A file path in a folder this process can write, whose checksum file can be written
    beside it: checked by save_checkpoint, and by a training run before its minutes of work."""
    path = as_path(path)
    try:  # the checksum file records the name as UTF-8 text
        os.fsencode(path)
        path.name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise CheckpointError(
            f"cannot save {ascii(str(path))}: its name holds {ascii(error.object[error.start])}, "
            f"which {error.encoding} cannot encode (the checksum file records the name as text): "
            "name the file in plain characters"
        ) from None
    if _kind(path, "cannot save") == "folder":
        raise CheckpointError(f"cannot save {path}: it is a folder; name a file inside it")
    checksum = checksum_path(path)
    for written in (path, checksum):  # writing to a pipe would wait for a reader forever
        if _kind(written, "cannot save") == "other":
            raise CheckpointError(f"cannot save {path}: {written} {NOT_REGULAR}")
    if _kind(checksum, "cannot save") == "folder":
        raise CheckpointError(
            f"cannot save {path}: its checksum would go to {checksum}, which is a folder"
        )
    folder = _kind(path.parent, "cannot save")
    if folder != "folder":
        found = "is a file, not a folder" if folder == "file" else "does not exist"
        raise CheckpointError(f"cannot save {path}: the folder {path.parent} {found}")
    try:  # a file made and removed at once: permissions alone miss a read-only file system
        with tempfile.TemporaryFile(dir=path.parent):
            pass
    except OSError as error:
        raise CheckpointError(
            f"cannot save {path}: the folder {path.parent} cannot be written to ({error.strerror})"
        ) from None
    for existing in (path, checksum):
        if _kind(existing, "cannot save") == "file" and not os.access(existing, os.W_OK):
            raise CheckpointError(f"cannot save {path}: {existing} cannot be written to")
    return path


NOT_REGULAR = "is not a regular file (a device, a pipe or a socket)"


def _kind(path: Path, doing: str) -> str:
    """ "folder", "file", "other" (a device, a pipe, a socket) or "missing"; a path the
    system cannot look up (a name too long, a file where a folder should be, a NUL byte) is a
    CheckpointError that says why."""
    shown = f"{str(path)[:60]}... ({len(str(path))} characters)" if len(str(path)) > 80 else path
    if "\0" in str(path):  # the system reads a name up to its first NUL byte
        raise CheckpointError(f"{doing} {ascii(str(shown))}: a file name holds no NUL byte (\\x00)")
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as error:  # a loop of symbolic links, a name too long, no permission
        raise CheckpointError(f"{doing} {shown}: {error.strerror}") from None
    return "folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def save_checkpoint(path: str | Path, contents: dict) -> None:
    """torch.save(contents) to path, and its SHA-256 to path.sha256; only what load_checkpoint
    loads: tensors, numbers, strings, lists and dicts, every number finite."""
    path = savable_path(path)
    if not isinstance(contents, dict):
        raise TypeError(f"contents must be a dict, got {type(contents).__name__}")
    beyond = _beyond_limits(contents, "checkpoint", LARGEST_INT)
    if beyond:
        raise CheckpointError(f"cannot save {path}: {beyond}")
    refused = _refused(contents, "checkpoint")
    if refused:
        listed = "; ".join(f"{where}, which {what}" for where, what in refused[:3])
        raise CheckpointError(
            f"cannot save {path}: load_checkpoint refuses {listed} (float16 makes inf of "
            f"numbers beyond 65,504)"
        )
    written = io.BytesIO()
    try:
        torch.save(contents, written)
        written.seek(0)
        torch.load(written, map_location="cpu", weights_only=True)  # what loading will read
    except (AttributeError, TypeError, RuntimeError, pickle.PickleError) as error:
        raise CheckpointError(
            f"cannot save {path}: contents must hold only tensors, numbers, strings, lists and "
            f"dicts, which load_checkpoint reads back ({_torch_reason(error)})"
        ) from None
    if written.tell() > MOST_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"cannot save {path}: it would hold {written.tell():,} bytes, more than "
            f"load_checkpoint reads ({MOST_CHECKPOINT_BYTES:,})"
        )
    path.write_bytes(written.getvalue())
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")


MOST_NESTING = 100  # dicts and lists inside one another: the checkpoints here nest at most 5
LARGEST_INT = 2**2039 - 1  # the largest integer pickle writes in 255 bytes (its LONG1 code), the
# most torch.load's weights-only reader reads back (614 digits)


def _beyond_limits(value, where: str, largest_int: float = math.inf, depth: int = 0) -> str:
    """What makes a nested checkpoint unreadable: nesting deeper than MOST_NESTING (the checks
    here would recurse past Python's limit), or an integer beyond largest_int (save_checkpoint
    passes LARGEST_INT: torch.load cannot read back a longer one); "" if none."""
    if depth > MOST_NESTING:
        return f"{where} is nested more than {MOST_NESTING} dicts or lists deep"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > largest_int:
        return (
            f"{where} is an integer of more than 614 digits ({validation.shown(value)}), which "
            f"torch.load cannot read back: save it as text"
        )
    inside = {}
    if isinstance(value, dict):
        inside = {f"{where}.{key}": item for key, item in value.items()}
    if isinstance(value, list | tuple):
        inside = {f"{where}[{i}]": item for i, item in enumerate(value)}
    for at, item in inside.items():
        beyond = _beyond_limits(item, at, largest_int, depth + 1)
        if beyond:
            return beyond
    return ""


def _refused(value, where: str) -> list[tuple[str, str]]:
    """(where, what) for each part of a nested checkpoint that load_checkpoint refuses: a
    tensor without numbers (meta) or not dense, a tensor or float that holds inf or NaN."""
    if isinstance(value, torch.Tensor):
        unreadable = _unreadable(value)
        if unreadable:
            return [(where, unreadable)]
        numeric = value.is_floating_point() or value.is_complex()
        finite = not numeric or bool(value.isfinite().all())
        return [] if finite else [(where, "holds inf or NaN")]
    if isinstance(value, float | complex):
        return [] if cmath.isfinite(value) else [(where, "holds inf or NaN")]
    if isinstance(value, dict):
        return [bad for key, item in value.items() for bad in _refused(item, f"{where}.{key}")]
    if isinstance(value, list | tuple):
        return [bad for i, item in enumerate(value) for bad in _refused(item, f"{where}[{i}]")]
    return []


def _unreadable(tensor: torch.Tensor) -> str:
    """Why a tensor's numbers cannot be checked as a weight's are, or "": no numbers (meta),
    not dense, float8 (torch computes nothing in it), or a view stretched over fewer numbers
    than it shows (torch.expand: checking it would build every number it shows)."""
    if tensor.is_meta:
        return "is a meta tensor (a shape without numbers)"
    if tensor.is_nested or tensor.layout != torch.strided:
        layout = "nested" if tensor.is_nested else tensor.layout
        return f"is a {layout} tensor, not a dense one (weights are dense)"
    if tensor.is_floating_point() and tensor.element_size() == 1:
        return f"is {tensor.dtype}, a storage format torch computes nothing in: save it as float16"
    if tensor.numel() * tensor.element_size() > tensor.untyped_storage().nbytes():
        return (
            f"is a view of shape {tuple(tensor.shape)} stretched over fewer numbers than it "
            f"shows (torch.expand): save a copy, .clone()"
        )
    return ""


def _torch_reason(error: BaseException) -> str:
    """The first sentence of what torch.load could not read, without the rest of its text,
    which advises loading with weights_only=False: that runs whatever code a crafted file
    holds."""
    lines = [line.strip() for line in str(error).split("Unpickler error:")[-1].splitlines()]
    said = [
        line
        for line in lines
        if line and "weights_only" not in line and not line.startswith("Check the documentation")
    ]
    return said[0].split(". ")[0].rstrip(".")[:200] if said else type(error).__name__


def _read(path: Path, fix: str) -> object:
    """torch.load(path, weights_only=True), or a CheckpointError saying that the file is not a
    checkpoint torch.save wrote, or is truncated or damaged."""
    if not path.stat().st_size:
        raise CheckpointError(f"{path} is empty (0 bytes), not a checkpoint; {fix}")
    if not zipfile.is_zipfile(path):
        with open(path, "rb") as file:
            start = file.read(8)
        if start.startswith(b"PK"):
            raise CheckpointError(
                f"{path} is truncated or damaged: it starts as the zip archive torch.save "
                f"writes, but the archive's directory at its end is missing; {fix}"
            )
        raise CheckpointError(
            f"{path} is not a torch checkpoint: torch.save writes a zip archive, and this file "
            f"is not one (it starts {start!r}); {fix}"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as error:
        raise CheckpointError(f"{path} is a damaged zip archive ({error}); {fix}") from None
    names = [entry.filename for entry in entries]
    packed = [entry.filename for entry in entries if entry.compress_type != zipfile.ZIP_STORED]
    if packed:  # a few kilobytes could unpack to gigabytes inside torch.load
        raise CheckpointError(
            f"{path} is not a checkpoint torch.save wrote: its entry {packed[0]} is compressed, "
            f"which torch.save never does; {fix}"
        )
    if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
        raise CheckpointError(
            f"{path} is a zip archive torch.save did not write: it holds no data.pkl, the record "
            f"torch.save keeps of what it saved; {fix}"
        )
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it does not expect
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file that is not a checkpoint
        raise CheckpointError(
            f"{path} is a damaged checkpoint, or a zip archive torch.save did not write "
            f"({_torch_reason(error)}); {fix}"
        ) from None


def _recorded_checksum(path: Path) -> str:
    """The hex digest in a sha256sum line ("hex  name") or a BSD one ("SHA256 (name) = hex"),
    after a UTF-8 byte-order mark, if an editor wrote one."""
    if path.stat().st_size > MOST_CHECKSUM_BYTES:
        raise CheckpointError(
            f"{path} holds {path.stat().st_size:,} bytes, not a checksum (a sha256sum line is "
            f"under {MOST_CHECKSUM_BYTES:,})"
        )
    try:
        text = path.read_bytes().decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        raise CheckpointError(f"{path} holds bytes that are not text, not a checksum") from None
    if not text:
        raise CheckpointError(f"{path}: the checksum file holds no digest")
    digest = text.rsplit("=", 1)[-1] if text.startswith("SHA256 (") else text.split(" ")[0]
    return digest.strip().lower()


def load_checkpoint(path: str | Path, keys: tuple[str, ...], remake: str) -> dict:
    """The dictionary saved by save_checkpoint, after every check above.

    keys: the top-level keys it must hold; remake: the command that rebuilds the file,
    named in every error.
    """
    path = as_path(path)
    if (
        isinstance(keys, str)
        or not isinstance(keys, tuple | list)
        or not all(isinstance(key, str) for key in keys)
    ):
        raise ValueError(
            f"keys must be a tuple of the names (str) the checkpoint holds, got "
            f"{validation.shown(keys)}"
        )
    if not isinstance(remake, str):
        raise TypeError(
            f"remake must be the command that rebuilds the file (a str), got "
            f"{validation.shown(remake)}"
        )
    fix = f"rebuild it with `{remake}`"
    kind = _kind(path, "cannot read")
    if kind == "folder":
        raise CheckpointError(f"{path} is a folder, not a checkpoint file")
    if kind == "missing":
        raise CheckpointError(f"{path} does not exist: {fix}")
    if kind == "other":
        raise CheckpointError(f"{path} {NOT_REGULAR}, not a checkpoint file")
    if path.stat().st_size > MOST_CHECKPOINT_BYTES:
        raise CheckpointError(
            f"{path} holds {path.stat().st_size:,} bytes, more than any checkpoint of this "
            f"series ({MOST_CHECKPOINT_BYTES:,}); {fix}"
        )
    checksum_kind = _kind(checksum_path(path), "cannot read")
    if checksum_kind == "other":
        raise CheckpointError(f"{path}: its checksum file {checksum_path(path)} {NOT_REGULAR}")
    if checksum_kind != "file":
        raise CheckpointError(f"{path} has no checksum file {checksum_path(path).name}: {fix}")
    try:
        if sha256(path) != _recorded_checksum(checksum_path(path)):
            raise CheckpointError(
                f"{path} is damaged: its SHA-256 differs from the one recorded when it was "
                f"saved ({checksum_path(path).name}); {fix}"
            )
        contents = _read(path, fix)
    except OSError as error:  # a file the system lists but will not read
        raise CheckpointError(f"{path} cannot be read ({error.strerror}); {fix}") from None
    if not isinstance(contents, dict) or not set(keys) <= set(contents):
        found = sorted(contents, key=str) if isinstance(contents, dict) else type(contents).__name__
        raise CheckpointError(f"{path} should hold {list(keys)}, found {found}; {fix}")
    beyond = _beyond_limits(contents, "checkpoint")
    if beyond:
        raise CheckpointError(f"{path} cannot be loaded: {beyond}; {fix}")
    refused = _refused(contents, "checkpoint")
    if refused:
        listed = "; ".join(f"{where} {what}" for where, what in refused[:3])
        raise CheckpointError(f"{path} cannot be loaded: {listed}; {fix}")
    return contents


def float_weights(weights: object, path: str | Path) -> dict[str, torch.Tensor]:
    """A checkpoint's weights as float32 tensors, after checking that they are a dict of
    dense floating-point tensors (integer weights would load as a model with truncated
    weights), each finite once in float32 (1e39 in float64 is finite, and inf in float32)."""
    if not isinstance(weights, dict):
        raise CheckpointError(
            f"{path}: its weights should be a dict of tensors, found {type(weights).__name__}"
        )
    for key, value in weights.items():
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            found = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
            raise CheckpointError(
                f"{path}: its weight {key} should be a floating-point tensor, found {found}"
            )
        if _not_dense(value):
            raise CheckpointError(f"{path}: its weight {key} {_not_dense(value)}")
        unreadable = _unreadable(value)  # float8, or a stretched view
        if unreadable:
            raise CheckpointError(f"{path}: its weight {key} {unreadable}")
    weights = {key: value.float() for key, value in weights.items()}
    for key, value in weights.items():
        if not value.isfinite().all():
            raise CheckpointError(
                f"{path}: its weight {key} holds NaN or inf in float32 (a value beyond "
                f"{torch.finfo(torch.float32).max:.4g} becomes inf)"
            )
    return weights


def _not_dense(value: torch.Tensor) -> str:
    """Why value is not an ordinary dense tensor of numbers a model can hold, or ""."""
    if value.is_meta:
        return "should be an ordinary dense tensor, found one on the meta device (no values)"
    if value.is_nested or value.layout != torch.strided:
        found = "nested" if value.is_nested else f"{value.layout}"
        return f"should be an ordinary dense tensor, found one {found}"
    return ""


def load_weights(model: torch.nn.Module, weights: dict, path: str | Path) -> None:
    """model.load_state_dict(weights), after naming any weight that is missing, unexpected or
    of the wrong shape for the model the config built."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(weights, dict):
        raise TypeError(f"weights must be a dict of tensors, got {type(weights).__name__}")
    as_path(path)
    named_otherwise = [key for key in weights if not isinstance(key, str)]
    if named_otherwise:
        key = named_otherwise[0]
        raise CheckpointError(
            f"{path}: its weights should be named by text (a parameter's name, such as "
            f"'norm.weight'), found the key {validation.shown(key)} ({type(key).__name__})"
        )
    not_tensors = [key for key, value in weights.items() if not isinstance(value, torch.Tensor)]
    if not_tensors:
        key = not_tensors[0]
        raise CheckpointError(
            f"{path}: its weight {key} should be a tensor, found "
            f"{validation.shown(weights[key]):.60} ({type(weights[key]).__name__})"
        )
    for key, value in weights.items():
        if _not_dense(value):
            raise CheckpointError(f"{path}: its weight {key} {_not_dense(value)}")
        if value.is_complex():  # loading would drop the imaginary parts with only a warning
            raise CheckpointError(
                f"{path}: its weight {key} should hold real numbers, found {value.dtype}"
            )
    misfit = weights_misfit(model, weights)
    if misfit:
        raise CheckpointError(f"{path}: {misfit}")
    model.load_state_dict(weights)


def weights_misfit(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> str:
    """What keeps weights, a dict of tensors named by text, from loading into model as they
    are, or "": a weight missing, unexpected or of the wrong shape, or two weights the model
    ties to one tensor (a GPT's tokens.weight and output.weight) that differ, of which
    load_state_dict would keep the last one read."""
    expected = {key: tuple(value.shape) for key, value in model.state_dict().items()}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = [
        f"{key} {tuple(value.shape)} (its config needs {expected[key]})"
        for key, value in weights.items()
        if key in expected and tuple(value.shape) != expected[key]
    ]
    problems = [
        f"{label}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
        for label, names in (("missing", missing), ("unexpected", unexpected), ("shape", wrong))
        if names
    ]
    if problems:
        return f"its weights do not fit its config ({'; '.join(problems)})"
    for first, *others in _tied_keys(model):
        for other in others:
            common = torch.promote_types(weights[first].dtype, weights[other].dtype)
            if not torch.equal(weights[first].to(common), weights[other].to(common)):
                return (
                    f"its weights {first} and {other} differ, but the model ties them to one "
                    f"tensor: loading would keep only one of them"
                )
    return ""


def _tied_keys(model: torch.nn.Module) -> list[list[str]]:
    """The names of the model's weights that are one tensor, for each tensor named more than
    once (a GPT's [['tokens.weight', 'output.weight']])."""
    names: dict[int, list[str]] = {}
    for key, value in model.state_dict(keep_vars=True).items():
        names.setdefault(id(value), []).append(key)
    return [keys for keys in names.values() if len(keys) > 1]
