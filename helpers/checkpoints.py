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
import pickletools
import re
import stat
import tempfile
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from helpers import validation


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged, or not what it should be."""


# 8 times the 16 MB a file of this series may take: a crafted copy holding its float16
# weights as int64 (4 times as large) must still reach the check that names them
MOST_CHECKPOINT_BYTES = 2**27
MOST_CHECKSUM_BYTES = 4096  # a sha256sum line is 64 hex digits, two spaces and the file's name
MOST_RECORD_BYTES = 2**20  # torch.save's record of what it saved (data.pkl): 104 KB in the
# largest file here; torch.load's weights-only reader spends microseconds on each of its codes
MOST_CHECKPOINT_ITEMS = 2**20  # items a checkpoint holds, counting an item each time it is
# listed (a list listed twice, twice): torch.load builds about 19,000 objects from the largest
# file here (data/induction_models.pt)


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


NOT_REGULAR = "is not a regular file (a device, a pipe or a socket)"


def shown_path(path: Path) -> str:
    """path as a message shows it: its first 60 characters and its length, if it is long."""
    text = str(path)
    return f"{text[:60]}... ({len(text):,} characters)" if len(text) > 80 else text


def _kind(path: Path, doing: str) -> str:
    """ "folder", "file", "other" (a device, a pipe, a socket) or "missing"; a path the
    system cannot look up (a name too long, a file where a folder should be, a NUL byte) is a
    CheckpointError that says why."""
    shown = shown_path(path)
    if "\0" in str(path):  # the system reads a name up to its first NUL byte
        raise CheckpointError(f"{doing} {ascii(str(shown))}: a file name holds no NUL byte (\\x00)")
    try:  # a lone surrogate (\ud800) has no bytes in the file system's encoding
        os.fsencode(path)
    except UnicodeEncodeError as error:
        raise _unencodable(path, doing, error) from None
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as error:  # a loop of symbolic links, a name too long, no permission
        raise CheckpointError(f"{doing} {shown}: {error.strerror}") from None
    return "folder" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"


def _unencodable(
    path: Path, doing: str, error: UnicodeEncodeError, because: str = ""
) -> CheckpointError:
    """The CheckpointError for a path whose name holds a character the encoding of the error
    cannot encode; because: what needs it encoded, beyond the file system."""
    return CheckpointError(
        f"{doing} {ascii(str(path))}: its name holds {ascii(error.object[error.start])}, "
        f"which {error.encoding} cannot encode{because}: name the file in plain characters"
    )


def save_checkpoint(path: str | Path, contents: dict) -> None:
    """torch.save(contents) to path, and its SHA-256 to path.sha256; only what load_checkpoint
    loads: tensors, numbers, strings, lists and dicts, every number finite."""
    path = savable_path(path)
    if not isinstance(contents, dict):
        raise TypeError(f"contents must be a dict, got {type(contents).__name__}")
    try:
        survey = _Survey(contents, LARGEST_INT)
    except _Beyond as beyond:
        raise CheckpointError(f"cannot save {path}: {beyond}") from None
    if survey.refused:
        listed = "; ".join(f"{where}, which {what}" for where, what, _ in survey.refused[:3])
        infinite = any(infinite for _, _, infinite in survey.refused)
        raise CheckpointError(
            f"cannot save {path}: load_checkpoint refuses {listed}"
            + (" (float16 makes inf of numbers beyond 65,504)" if infinite else "")
        )
    stored = _stored_beyond_limit(survey)
    if stored:
        raise CheckpointError(f"cannot save {path}: {stored}")
    if survey.unsaved:
        where, kind = survey.unsaved[0]
        raise CheckpointError(
            f"cannot save {path}: contents must hold only tensors, numbers, strings, lists and "
            f"dicts, which load_checkpoint reads back ({where} is {kind})"
        )
    written = io.BytesIO()
    try:
        torch.save(contents, written)
        with zipfile.ZipFile(written) as archive:  # dict keys, which the survey does not read
            problem = _records_problem(archive)
        if problem:
            raise CheckpointError(f"cannot save {path}: {problem}")
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
    checksum_path(path).write_bytes(_sha256sum_line(sha256(path), path.name).encode("utf-8"))


MOST_NESTING = 100  # dicts and lists inside one another: the checkpoints here nest at most 5
LARGEST_INT = 2**2039 - 1  # the largest integer pickle writes in 255 bytes (its LONG1 code), the
# most torch.load's weights-only reader reads back (614 digits)
INF_OR_NAN = "holds inf or NaN"
SET_REFUSED = "is a set: a checkpoint holds tensors, numbers, strings, lists and dicts"
# What a checkpoint holds besides dicts, lists, tuples and tensors: torch's weights-only reader
# reads these back, and nothing else (a function, a Path or an object of a class of one's own)
PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


class _Beyond(Exception):
    """A checkpoint passes a limit of what the checks here read; the message says which."""


class _Survey:
    """One reading of a nested checkpoint, each dict, list and tensor read once however often
    it is listed. refused: (where, what, infinite) for each part that load_checkpoint refuses,
    a tensor without numbers (meta) or not dense, a tensor or float that holds inf or NaN
    (infinite: it holds inf); storages: the bytes of each storage its tensors view, which
    torch.save writes whole, and widest_view: (where, tensor) of the view of the most bytes it
    does not show. Raises _Beyond at the first limit passed: nesting deeper than MOST_NESTING,
    a dict or list that holds itself, more than MOST_CHECKPOINT_ITEMS items or tensors of more
    than MOST_CHECKPOINT_BYTES (counting each every time it is listed), or an integer beyond
    largest_int (save_checkpoint passes LARGEST_INT: torch.load cannot read back a longer one)."""

    def __init__(self, contents: dict, largest_int: float = math.inf):
        self.largest_int = largest_int
        self.refused: list[tuple[str, str, bool]] = []
        self.unsaved: list[tuple[str, str]] = []  # (where, what) torch.save cannot write back
        self.storages: dict[int, int] = {}  # a storage's address -> its bytes
        self.widest_view: tuple[str, torch.Tensor] | None = None
        self.read: dict[int, tuple[int, int]] = {}  # id -> (items, nesting) of what it holds
        self.holding: set[int] = set()  # the dicts and lists that hold the part being read
        self.tensor_bytes = 0
        self.part(contents, None, 0)

    def part(self, value: object, place: tuple | None, depth: int) -> tuple[int, int]:
        """(items, nesting) of value, found at place, depth dicts and lists deep: the items it
        holds and itself, and how many dicts and lists deep they nest."""
        if isinstance(value, np.generic | np.ndarray):  # np.str_ and np.float64 too: subclasses
            self.refused.append((_where(place), _numpy_refused(value), False))
            return 1, 0
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > self.largest_int:
            raise _Beyond(
                f"{_where(place)} is an integer of more than 614 digits "
                f"({validation.shown(value)}), which torch.load cannot read back: save it as text"
            )
        if isinstance(value, float | complex) and not cmath.isfinite(value):
            self.refused.append((_where(place), INF_OR_NAN, cmath.isinf(value)))
        if isinstance(value, torch.Tensor) and not _unreadable(value):
            self.tensor_bytes += value.numel() * value.element_size()
            if self.tensor_bytes > MOST_CHECKPOINT_BYTES:
                raise _Beyond(
                    f"its tensors hold more than {MOST_CHECKPOINT_BYTES:,} bytes, counting each "
                    f"every time it is listed (up to {_where(place)}), more than load_checkpoint "
                    "reads"
                )
        if isinstance(value, set | frozenset):
            self.refused.append((_where(place), SET_REFUSED, False))
            return 1, 0
        if not isinstance(value, torch.Tensor | dict | list | tuple):
            if not isinstance(value, PLAIN):
                self.unsaved.append((_where(place), _kind_of(value)))
            return 1, 0
        if id(value) in self.holding:
            raise _Beyond(
                f"{_where(place)} is a dict or list that holds it: a checkpoint is a tree, "
                "without loops"
            )
        if id(value) not in self.read:
            self.holding.add(id(value))
            self.read[id(value)] = (
                self._tensor(value, place)
                if isinstance(value, torch.Tensor)
                else self._inside(value, place, depth)
            )
            self.holding.discard(id(value))
        items, nesting = self.read[id(value)]
        if depth + nesting > MOST_NESTING:  # read before where it lay less deep
            raise _Beyond(f"{_where(place)} is nested more than {MOST_NESTING} dicts or lists deep")
        return items, nesting

    def _tensor(self, tensor: torch.Tensor, place: tuple | None) -> tuple[int, int]:
        unreadable = _unreadable(tensor)
        if unreadable:
            self.refused.append((_where(place), unreadable, False))
            return 1, 0
        if (tensor.is_floating_point() or tensor.is_complex()) and not tensor.isfinite().all():
            self.refused.append((_where(place), INF_OR_NAN, bool(tensor.isinf().any())))
        storage = tensor.untyped_storage()
        self.storages[storage.data_ptr()] = storage.nbytes()
        unshown = _unshown_bytes(tensor)
        if unshown > 0 and (
            self.widest_view is None or unshown > _unshown_bytes(self.widest_view[1])
        ):
            self.widest_view = (_where(place), tensor)
        return 1, 0

    def _inside(
        self, value: dict | list | tuple, place: tuple | None, depth: int
    ) -> tuple[int, int]:
        named = isinstance(value, dict)
        items, nesting = 1, 0
        for key, item in value.items() if named else enumerate(value):
            if named and isinstance(key, np.generic):
                self.refused.append((_where((place, key, True)), _numpy_refused(key), False))
            if named and isinstance(key, float | complex) and not cmath.isfinite(key):
                self.refused.append((_where((place, key, True)), INF_OR_NAN, cmath.isinf(key)))
            if depth >= MOST_NESTING:
                raise _Beyond(
                    f"{_where(place)} is nested more than {MOST_NESTING} dicts or lists deep"
                )
            held, below = self.part(item, (place, key, named), depth + 1)
            items, nesting = items + held, max(nesting, below + 1)
            if items > MOST_CHECKPOINT_ITEMS:
                raise _Beyond(
                    f"{_where(place)} holds more than {MOST_CHECKPOINT_ITEMS:,} items, counting "
                    "each every time it is listed (a list listed ten times, ten times)"
                )
        return items, nesting


def _numpy_refused(value: np.generic | np.ndarray) -> str:
    """Why load_checkpoint refuses a numpy value (its weights-only reader reads no numpy),
    and what to save instead."""
    if isinstance(value, np.ndarray):
        fix = "save torch.from_numpy(it)"
    elif isinstance(value, str):
        fix = "use str()"
    else:
        fix = "use .item() for the Python number"
    return f"is a numpy.{type(value).__name__}: {fix}"


def _unshown_bytes(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().nbytes() - tensor.nbytes


def _stored_beyond_limit(survey: _Survey) -> str:
    """Why the storages a checkpoint's tensors view, which torch.save writes whole, make a file
    larger than load_checkpoint reads, or "": a view of a few numbers writes every one it
    views."""
    stored = sum(survey.storages.values())
    if stored <= MOST_CHECKPOINT_BYTES:
        return ""
    if survey.widest_view is None:
        return (
            f"its tensors would hold {stored:,} bytes, more than load_checkpoint reads "
            f"({MOST_CHECKPOINT_BYTES:,})"
        )
    where, tensor = survey.widest_view
    return (
        f"{where} is a view of {tensor.numel():,} numbers into a storage of "
        f"{tensor.untyped_storage().nbytes():,} bytes, all of which torch.save writes, more than "
        f"load_checkpoint reads ({MOST_CHECKPOINT_BYTES:,}): save a copy, .clone()"
    )


def _where(place: tuple | None) -> str:
    """Where a part of a checkpoint lies (checkpoint.weights.w, checkpoint.log[3]), from its
    place: None for the checkpoint, or (the place of what holds it, its key or index, whether
    that is a dict's key)."""
    steps = []
    while place is not None:
        place, key, named = place
        steps.append(f".{key}" if named else f"[{key}]")
    return "checkpoint" + "".join(reversed(steps))


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


# What torch's and pickle's own words mean, for the reader of a file that is not a checkpoint
TORCH_WORDS = {
    "enforce fail at inline_container": "its zip archive is not laid out as torch.save lays "
    "it out: another format version, or a record missing",
    "Unsupported operand": "its record of what it holds, data.pkl, is not a pickle torch.save "
    "writes",
    "EOFError": "its record of what it holds, data.pkl, ends early: empty or cut short",
    "resize storage": "a tensor in it claims more numbers than its storage holds",
}
NOT_DATA = "code or an object of a class of its own, not data, which load_checkpoint never builds"


def _kind_of(value: object) -> str:
    """What value is, for a message: "the function print", "a PosixPath"."""
    if callable(value) and hasattr(value, "__qualname__"):
        what = "class" if isinstance(value, type) else "function"
        return f"the {what} {value.__qualname__}"
    kind = type(value).__qualname__
    return f"{'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}"


def _torch_reason(error: BaseException) -> str:
    """What torch.load could not read: torch's words said plainly where they are internal,
    else their first sentence without the rest, which advises loading with weights_only=False
    (that runs whatever code a crafted file holds)."""
    said = f"{type(error).__name__}: {error}"
    for words, meaning in TORCH_WORDS.items():
        if words in said:
            return meaning
    global_named = "nsupported global" in said or "nsupported GLOBAL" in said
    lines = [line.strip() for line in str(error).split("Unpickler error:")[-1].splitlines()]
    said = [
        line
        for line in lines
        if line and "weights_only" not in line and not line.startswith("Check the documentation")
    ]
    first = said[0].split(". ")[0].rstrip(".")[:200] if said else type(error).__name__
    return f"{first}: {NOT_DATA}" if global_named else first


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
    packed = [entry.filename for entry in entries if entry.compress_type != zipfile.ZIP_STORED]
    if packed:  # a few kilobytes could unpack to gigabytes inside torch.load
        raise CheckpointError(
            f"{path} is not a checkpoint torch.save wrote: its entry {packed[0]} is compressed, "
            f"which torch.save never does; {fix}"
        )
    if not any(entry.filename.split("/")[-1] == "data.pkl" for entry in entries):
        raise CheckpointError(
            f"{path} is a zip archive torch.save did not write: it holds no data.pkl, the record "
            f"torch.save keeps of what it saved; {fix}"
        )
    try:
        with zipfile.ZipFile(path) as archive:
            problem = _records_problem(archive)
    except (zipfile.BadZipFile, ValueError) as error:  # a record that fails its CRC, or a
        # local header whose name cannot be read (UnicodeDecodeError): damaged after writing
        raise CheckpointError(f"{path} is damaged ({error}); {fix}") from None
    if problem:
        raise CheckpointError(f"{path} cannot be loaded: {problem}; {fix}")
    try:
        with warnings.catch_warnings():  # torch warns of pickle protocols it does not expect
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file that is not a checkpoint
        if "Unsupported operand 139" in str(error):  # pickle's LONG4: an int of 256+ bytes
            raise CheckpointError(
                f"{path} holds an integer of more than 614 digits, which torch.load cannot read "
                f"back (save_checkpoint refuses it: save it as text); {fix}"
            ) from None
        if "GLOBAL numpy" in str(error):  # torch.save wrote it, but of numpy's numbers
            raise CheckpointError(
                f"{path} holds a numpy number or array where a checkpoint holds Python ints, "
                f"floats and tensors only (weights_only loading reads no numpy); {fix}"
            ) from None
        raise CheckpointError(
            f"{path} is a damaged checkpoint, or a zip archive torch.save did not write "
            f"({_torch_reason(error)}); {fix}"
        ) from None


def _records_problem(archive: zipfile.ZipFile) -> str:
    """Why torch.load would not read a checkpoint's records (data.pkl) in a moment, or "": one
    takes more than MOST_RECORD_BYTES, or builds more than MOST_CHECKPOINT_ITEMS objects,
    counting each every time it is referred to."""
    for record in archive.infolist():
        if record.filename.split("/")[-1] != "data.pkl":
            continue
        size = max(record.file_size, record.compress_size)
        if size > MOST_RECORD_BYTES:
            return (
                f"its record of what it holds ({record.filename}) takes {size:,} bytes, more "
                f"than a checkpoint of this series ({MOST_RECORD_BYTES:,})"
            )
        if _expanded_items(archive.read(record)) > MOST_CHECKPOINT_ITEMS:
            return (
                f"its record of what it holds refers to more than {MOST_CHECKPOINT_ITEMS:,} "
                "items, counting each every time it is referred to (a list referred to ten "
                "times, ten times)"
            )
    return ""


_MARK = object()  # where a pickle's MARK code stands on its stack
_GROWING = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}  # they fill the
# list, dict, set or object below what they take, and leave it on the stack


def _expanded_items(record: bytes) -> int:
    """How many objects torch.load builds from a record (the pickle data.pkl), counting each
    one every time the record refers to it: a few kilobytes may refer ten times to a list that
    refers ten times to another, and so on, and torch.load spends minutes hashing such a tuple
    as a dict's key. Counts up to just past MOST_CHECKPOINT_ITEMS; 0 for a record that is not a
    pickle (torch.load then says why)."""
    stack: list = []  # [count] for each object, shared by every reference to it; or _MARK
    memo: dict = {}
    largest = 0
    try:
        for opcode, argument, _ in pickletools.genops(record):
            if opcode.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if opcode.name == "MEMOIZE" else argument] = stack[-1]
                continue
            if opcode.name in ("GET", "BINGET", "LONG_BINGET"):
                stack.append(memo[argument])
                continue
            taken = _pickle_taken(stack, opcode.stack_before)
            if opcode.name in _GROWING:
                taken[-1][0] += sum(count for (count,) in taken[:-1])
                stack.append(taken[-1])
                largest = max(largest, taken[-1][0])
            else:
                built = 1 + sum(count for (count,) in taken)
                stack += [_MARK if kind is pickletools.markobject else [built] for kind in
                          opcode.stack_after]  # fmt: skip
                largest = max(largest, built if opcode.stack_after else 0)
            if largest > MOST_CHECKPOINT_ITEMS:
                return largest
    except (ValueError, IndexError, KeyError, TypeError):  # not a pickle, or a damaged one
        return 0
    return largest


def _pickle_taken(stack: list, before: list) -> list:
    """What a pickle code takes from the stack (pickletools' stack_before: what lies above the
    last MARK and the MARK, then the objects below it), the deepest last."""
    taken = []
    if pickletools.markobject in before:
        while stack[-1] is not _MARK:
            taken.append(stack.pop())
        stack.pop()
        before = before[: before.index(pickletools.markobject)]
    for _ in before:
        taken.append(stack.pop())
    return taken


SHA256SUM_LINE = re.compile(r"([0-9A-Fa-f]{64})[ \t][ *]?(.+)")  # "hex  name", "hex *name", ...
BSD_LINE = re.compile(r"SHA256 \((.+)\) = ([0-9A-Fa-f]{64})")  # sha256sum --tag
ESCAPED_NAME = re.compile(r"(?:[^\\]|\\[\\nr])+")  # the escapes sha256sum writes in a name
UNESCAPED = {"\\": "\\", "n": "\n", "r": "\r"}


def _sha256sum_line(digest: str, name: str) -> str:
    """The line sha256sum writes for a file name: "digest  name", or, for a name that holds a
    backslash or a line break, a backslash, then the line with those escaped (\\\\, \\n, \\r)."""
    escaped = name.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    start = "\\" if escaped != name else ""
    return f"{start}{digest}  {escaped}\n"


def _recorded_checksums(path: Path, name: str, fix: str) -> set[str]:
    """The digests that sha256sum -c checks the file `name` against in the checksum file at
    path: those of the lines that name it, or that of its only line, whatever name it gives. A
    UTF-8 byte-order mark, blank lines and comments (#) are skipped; a line sha256sum cannot
    read is a CheckpointError calling the checksum file malformed."""
    if path.stat().st_size > MOST_CHECKSUM_BYTES:
        raise CheckpointError(
            f"{path} holds {path.stat().st_size:,} bytes, not a checksum (a sha256sum line is "
            f"under {MOST_CHECKSUM_BYTES:,})"
        )
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path} holds bytes that are not text, not a checksum") from None
    entries = []
    for number, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        entry = _checksum_entry(line)
        if entry is None:
            raise CheckpointError(
                f"{path} is malformed: its line {number} ({validation.shown(line)}) is not one "
                f"sha256sum writes, '<64 hex digits>  <file name>' or 'SHA256 (<file name>) = "
                f"<64 hex digits>'; {fix}"
            )
        entries.append(entry)
    if not entries:
        raise CheckpointError(f"{path}: the checksum file holds no digest; {fix}")
    if len(entries) == 1:
        return {entries[0][0]}
    naming = {digest for digest, named in entries if name in (named, Path(named).name)}
    if not naming:
        names = [validation.shown(named) for _, named in entries[:3]]
        raise CheckpointError(
            f"{path} is malformed: it holds {len(entries)} checksums, none of them of {name} "
            f"(it names {', '.join(names)}{' ...' if len(entries) > 3 else ''}); {fix}"
        )
    return naming


def load_checkpoint(path: str | Path, keys: tuple[str, ...], remake: str) -> dict:
    """The dictionary saved by save_checkpoint, after every check above.

    keys: the top-level keys it must hold; remake: the command that rebuilds the file,
    named in every error.
    """
    if isinstance(path, str) and not path:  # Path("") is Path("."), the current folder
        raise CheckpointError("path is empty (''): name a checkpoint file")
    path = as_path(path)
    if path.name.endswith(".sha256"):
        raise CheckpointError(
            f"{path} is a checksum file: load the checkpoint it checks, {path.with_suffix('')}"
        )
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
    if checksum_kind == "folder":
        raise CheckpointError(
            f"{path}: {checksum_path(path).name} is a folder, not its checksum file: {fix}"
        )
    if checksum_kind != "file":
        raise CheckpointError(f"{path} has no checksum file {checksum_path(path).name}: {fix}")
    try:
        if _recorded_checksums(checksum_path(path), path.name, fix) != {sha256(path)}:
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
    try:
        refused = _Survey(contents).refused
    except _Beyond as beyond:
        raise CheckpointError(f"{path} cannot be loaded: {beyond}; {fix}") from None
    if refused:
        listed = "; ".join(f"{where} {what}" for where, what, _ in refused[:3])
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
        if value.is_floating_point() and not value.isfinite().all():
            raise CheckpointError(f"{path}: its weight {key} holds NaN or inf")
    misfit = weights_misfit(model, weights)
    if misfit:
        raise CheckpointError(f"{path}: {misfit}")
    for key, target in model.state_dict().items():  # a float64 1e39 would load as inf
        value = weights[key]
        if value.is_floating_point() and target.is_floating_point() and value.numel():
            largest = value.detach().abs().max().item()
            if largest > torch.finfo(target.dtype).max:
                raise CheckpointError(
                    f"{path}: its weight {key} holds numbers up to {largest:.3g}, beyond "
                    f"{target.dtype}'s largest, {torch.finfo(target.dtype).max:.3g}, which the "
                    f"model's weights are"
                )
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


MAX_CHECKPOINT_PARAMETERS = 8 * 2**20  # 16 MB of float16: what one file in data/ may hold


def check_name(name: object, models: dict) -> str:
    """name, if it is one of the saved models' names (the keys of models)."""
    if not isinstance(name, str) or name not in models:
        raise ValueError(f"name must be one of {list(models)}, got {name!r}")
    return name


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_folder(path: Path, written: Path) -> None:
    """The folder that `written` (the checkpoint at path, or its checksum file) goes to exists
    and can be written: its own folder, or, where it is a symbolic link, its target's."""
    target = Path(os.path.realpath(written))  # writing follows a link, even a dangling one
    folder = target.parent if os.path.islink(written) else written.parent
    via = f"{written} is a symbolic link to {target}, and " if os.path.islink(written) else ""
    kind = _kind(folder, "cannot save")
    if kind != "folder":
        found = "is a file, not a folder" if kind == "file" else "does not exist"
        raise CheckpointError(f"cannot save {path}: {via}the folder {folder} {found}")
    try:  # a file made and removed at once: permissions alone miss a read-only file system
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise CheckpointError(
            f"cannot save {path}: {via}the folder {folder} cannot be written to ({error.strerror})"
        ) from None


def _checksum_entry(line: str) -> tuple[str, str] | None:
    """(digest in lower case, file name) of one line of a checksum file, sha256sum's "hex  name"
    (also "hex *name", "hex name", "hex<TAB>name") or BSD's "SHA256 (name) = hex", either
    starting with a backslash where the name is escaped; None if sha256sum -c cannot read it."""
    escaped = line.startswith("\\")
    body = line[1:] if escaped else line
    gnu, bsd = SHA256SUM_LINE.fullmatch(body), BSD_LINE.fullmatch(body)
    if not (gnu or bsd):
        return None
    digest, name = (gnu[1], gnu[2]) if gnu else (bsd[2], bsd[1])
    if escaped:
        if not ESCAPED_NAME.fullmatch(name):
            return None
        name = re.sub(r"\\(.)", lambda escape: UNESCAPED[escape[1]], name)
    return digest.lower(), name


def as_path(path: object, name: str = "path") -> Path:
    """path as a Path, if it is one or a str (bytes and numbers are refused by name)."""
    if isinstance(path, bytes) or not isinstance(path, str | os.PathLike):
        raise TypeError(f"{name} must be a file path (str or pathlib.Path), got {path!r}")
    return Path(path)


def savable_path(path: object) -> Path:
    """A file path in a folder this process can write, whose checksum file can be written
    beside it: checked by save_checkpoint, and by a training run before its minutes of work."""
    path = as_path(path)
    if path.name.endswith(".sha256"):  # overwriting a checksum file stops its file from loading
        raise CheckpointError(
            f"cannot save {shown_path(path)}: a name ending in .sha256 is a checksum file's "
            f"(the checksum of {path.name.removesuffix('.sha256') or 'another file'}); name the "
            "checkpoint without .sha256, for example model.pt"
        )
    try:  # the checksum file records the name as UTF-8 text
        path.name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise _unencodable(
            path, "cannot save", error, " (the checksum file records the name as text)"
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
    for written in (path, checksum):
        _check_folder(path, written)
    for existing in (path, checksum):
        if _kind(existing, "cannot save") == "file" and not os.access(existing, os.W_OK):
            raise CheckpointError(f"cannot save {path}: {existing} cannot be written to")
    return path
