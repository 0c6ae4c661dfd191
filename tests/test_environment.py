"""requirements.txt (pip) and environment.yml (conda) must describe the same set."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONDA_TO_PIP = {"pytorch": "torch"}
CONDA_ONLY = {"python", "pip"}


def pip_requirements() -> dict:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"requirements.txt: pin {line!r} with =="
            pins[name.lower()] = version
    return pins


def conda_dependencies() -> dict:
    environment = yaml.safe_load((ROOT / "environment.yml").read_text())
    pins = {}
    for entry in environment["dependencies"]:
        assert isinstance(entry, str), f"environment.yml: unexpected entry {entry!r}"
        name, _, version = re.split(r"(=+)", entry, maxsplit=1) if "=" in entry else (entry, "", "")
        name = CONDA_TO_PIP.get(name.lower(), name.lower())
        if name not in CONDA_ONLY:
            pins[name] = version
    return pins


def test_same_packages_and_versions():
    assert pip_requirements() == conda_dependencies()


def test_torch_is_pinned_to_the_cpu_wheel_on_disk():
    assert pip_requirements()["torch"] == "2.13.0"
