"""The README's `make test`, run the way the README says, on a machine state the README allows:
a fresh copy of the project and a machine with Python and make but no browser (no Chromium,
Chrome or Edge on the PATH, none downloaded by Playwright). It must pass and end with one line
that says the browser tests did not run and how to get them; under CI=true it must fail.

The copy shares this checkout's .venv (set up already, as after a first `make test`), and runs
one small unit-test file and a notebook of one cell instead of all of them: what is under test
is the Makefile's recipe, not the chapters."""

import os
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
from find_browser import GET_ONE, ON_THE_PATH

ROOT = Path(__file__).resolve().parents[1]
ONE_CELL = "notebooks/one_cell.ipynb"
NARROWED = ["UNIT_TESTS=tests/test_timing.py", f"NOTEBOOKS={ONE_CELL}"]


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory) -> Path:
    """The files git would clone (and new ones not ignored), as they are in this checkout,
    whose set-up is done first: were it out of date, make in the copy would install into the
    shared .venv, pointing its editable install of helpers at the copy."""
    subprocess.run(["make", "setup"], cwd=ROOT, capture_output=True, check=True)
    copy = tmp_path_factory.mktemp("fresh") / "attention"
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)  # the dates too: make must see setup as done
    (copy / ".venv").symlink_to(ROOT / ".venv")
    cell = nbformat.v4.new_code_cell("print(1 + 1)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", text="2\n")]
    notebook = nbformat.v4.new_notebook(cells=[cell])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(notebook, copy / ONE_CELL)
    return copy


@pytest.fixture(scope="module")
def machine_without_a_browser(tmp_path_factory) -> dict:
    """Every program on this PATH but the browsers, a new home (no Playwright download) and
    none of this run's variables that would change the inner run."""
    programs = tmp_path_factory.mktemp("bin")
    for folder in os.environ["PATH"].split(os.pathsep):
        if not Path(folder).is_dir():
            continue
        for path in Path(folder).iterdir():
            if path.name not in ON_THE_PATH and not (programs / path.name).exists():
                (programs / path.name).symlink_to(path)
    dropped = ("CHROMIUM", "CI", "PLAYWRIGHT_BROWSERS_PATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in dropped and not name.startswith(("PYTEST_", "OMP_"))
    }
    environment.update(PATH=str(programs), HOME=str(tmp_path_factory.mktemp("home")))
    return environment


def make_test(folder: Path, environment: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "test", *NARROWED],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_make_test_passes_without_a_browser_and_says_so(fresh_copy, machine_without_a_browser):
    run = make_test(fresh_copy, machine_without_a_browser)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert " passed" in out and out.count("passed") >= 2, out  # the unit tests and the notebook
    last = out.strip().splitlines()[-1]
    assert last.startswith("Skipped: the browser tests did not run") and GET_ONE in last, out
    where = subprocess.run(
        [ROOT / ".venv/bin/python", "-c", "import helpers; print(helpers.__file__)"],
        cwd=fresh_copy.parent,
        capture_output=True,
        text=True,
    )
    assert where.stdout.strip() == str(ROOT / "helpers/__init__.py"), where.stderr  # not the copy


def test_make_test_fails_without_a_browser_under_ci(fresh_copy, machine_without_a_browser):
    run = make_test(fresh_copy, {**machine_without_a_browser, "CI": "true"})
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    lines = out.strip().splitlines()  # the last is make's own "Error 1"
    assert lines[-2].startswith("FAILED: the browser tests did not run"), out


@pytest.mark.parametrize("cores", [1, 2, 3, 4, 6, 8])
def test_make_test_and_make_test_threads_check_1_and_3_threads_on_any_machine(cores):
    """make test runs the notebooks with KERNEL_THREADS (half the cores, at least 1), make
    test-threads with the rest of 1 and 3: together, both on every machine."""
    kernel_threads = 1 if cores <= 3 else cores // 2
    variables = [f"KERNEL_THREADS={kernel_threads}"]
    dry_runs = {
        target: subprocess.run(
            ["make", "-n", target, *variables], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        for target in ("test", "test-threads")
    }
    notebook_pass = next(line for line in dry_runs["test"].splitlines() if "--nbval" in line)
    assert f"OMP_NUM_THREADS={kernel_threads} " in notebook_pass
    loop = next(line for line in dry_runs["test-threads"].splitlines() if line.startswith("for n"))
    counts = {int(n) for n in loop.removeprefix("for n in").split(";")[0].split()}
    assert counts | {kernel_threads} >= {1, 3}
    assert kernel_threads not in counts
