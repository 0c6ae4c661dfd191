"""Trained weights on disk: each file ``name.pt`` has its SHA-256 beside it in ``name.pt.sha256``
(the format of ``sha256sum``, so ``sha256sum -c`` checks it too). A file is loaded only when
its checksum matches, ``torch.load(weights_only=True)`` reads it, it holds the expected keys,
and every number in it is finite. Anything else is one clear CheckpointError.
"""

import hashlib
import math
from pathlib import Path

import torch


class CheckpointError(ValueError):
    """A checkpoint that is missing, damaged, or not what it should be."""


def checksum_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".sha256")


def sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_checkpoint(path: str | Path, contents: dict) -> None:
    """torch.save(contents) to path, and its SHA-256 to path.sha256."""
    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"cannot save {path}: the folder {path.parent} does not exist")
    torch.save(contents, path)
    checksum_path(path).write_text(f"{sha256(path)}  {path.name}\n")


def _non_finite(value, where: str) -> list[str]:
    """Where in a nested checkpoint a tensor or float holds inf or NaN."""
    if isinstance(value, torch.Tensor):
        numeric = value.is_floating_point() or value.is_complex()
        finite = not numeric or bool(value.isfinite().all())
        return [] if finite else [where]
    if isinstance(value, float):
        return [] if math.isfinite(value) else [where]
    if isinstance(value, dict):
        return [bad for key, item in value.items() for bad in _non_finite(item, f"{where}.{key}")]
    if isinstance(value, list | tuple):
        return [bad for i, item in enumerate(value) for bad in _non_finite(item, f"{where}[{i}]")]
    return []


def _recorded_checksum(path: Path) -> str:
    """The hex digest in a sha256sum line ("hex  name") or a BSD one ("SHA256 (name) = hex")."""
    text = path.read_text().strip()
    digest = text.rsplit("=", 1)[-1] if text.startswith("SHA256 (") else text.split(" ")[0]
    return digest.strip().lower()


def load_checkpoint(path: str | Path, keys: tuple[str, ...], remake: str) -> dict:
    """The dictionary saved by save_checkpoint, after every check above.

    keys: the top-level keys it must hold; remake: the command that rebuilds the file,
    named in every error.
    """
    path = Path(path)
    if isinstance(keys, str) or not isinstance(keys, tuple | list):
        raise ValueError(f"keys must be a tuple of the names the checkpoint holds, got {keys!r}")
    fix = f"rebuild it with `{remake}`"
    if not path.is_file():
        raise CheckpointError(f"{path} does not exist: {fix}")
    if not checksum_path(path).is_file():
        raise CheckpointError(f"{path} has no checksum file {checksum_path(path).name}: {fix}")
    if sha256(path) != _recorded_checksum(checksum_path(path)):
        raise CheckpointError(
            f"{path} is damaged: its SHA-256 differs from the one recorded when it was saved "
            f"({checksum_path(path).name}); {fix}"
        )
    try:
        contents = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds for a file that is not a checkpoint
        raise CheckpointError(f"{path} is not a readable checkpoint ({error}); {fix}") from None
    if not isinstance(contents, dict) or not set(keys) <= set(contents):
        found = sorted(contents) if isinstance(contents, dict) else type(contents).__name__
        raise CheckpointError(f"{path} should hold {list(keys)}, found {found}; {fix}")
    bad = _non_finite(contents, "checkpoint")
    if bad:
        raise CheckpointError(f"{path} holds inf or NaN in {', '.join(bad[:3])}; {fix}")
    return contents
