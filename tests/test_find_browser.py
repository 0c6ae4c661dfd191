"""Where find_browser.py looks for a browser, and what make test's browser step does with or
without one: runs the browser tests with the browser found; without one, one line and success,
except under CI=true."""

import os
import stat
import sys
from pathlib import Path

import find_browser
import pytest


def program(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """No browser anywhere: an empty PATH, no $CHROMIUM, no Playwright browser, no CI."""
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for name in ("CHROMIUM", "CI"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(find_browser, "playwright_browser", lambda: None)
    monkeypatch.setattr(sys, "platform", "linux")
    return tmp_path


def test_no_browser_anywhere(bare_machine):
    browser, why = find_browser.find_browser()
    assert browser is None and why.startswith("no Chromium, Chrome or Edge"), why


@pytest.mark.parametrize("name", find_browser.ON_THE_PATH)
def test_a_browser_on_the_path(bare_machine, monkeypatch, name):
    chromium = program(bare_machine / "bin" / name)
    monkeypatch.setenv("PATH", str(chromium.parent))
    assert find_browser.find_browser() == (chromium, "installed")


def test_a_file_that_is_not_a_program_is_passed_over(bare_machine, monkeypatch):
    (bare_machine / "bin").mkdir()
    (bare_machine / "bin" / "chromium").write_text("not a program")
    monkeypatch.setenv("PATH", str(bare_machine / "bin"))
    assert find_browser.find_browser()[0] is None


def test_chrome_where_its_installer_puts_it_on_macos(bare_machine, monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(Path, "home", lambda: bare_machine / "home")
    chrome = program(bare_machine / "home" / "Applications" / find_browser.MACOS_APPS[0])
    assert find_browser.find_browser() == (chrome, "installed")


def test_edge_where_its_installer_puts_it_on_windows(bare_machine, monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    monkeypatch.setenv("PROGRAMFILES(X86)", str(bare_machine / "Program Files (x86)"))
    monkeypatch.delenv("PROGRAMFILES", raising=False)
    monkeypatch.delenv("LOCALAPPDATA", raising=False)
    edge = program(bare_machine / "Program Files (x86)" / find_browser.WINDOWS_PROGRAMS[2])
    assert find_browser.find_browser() == (edge, "installed")


def test_playwrights_own_chromium_when_nothing_is_installed(bare_machine, monkeypatch):
    downloaded = program(bare_machine / "ms-playwright" / "chromium-1" / "chrome")
    monkeypatch.setattr(find_browser, "playwright_browser", lambda: downloaded)
    assert find_browser.find_browser() == (downloaded, "Playwright's own")


def test_playwrights_path_where_nothing_was_downloaded_is_no_browser(bare_machine, monkeypatch):
    monkeypatch.setattr(find_browser, "playwright_browser", lambda: bare_machine / "absent")
    assert find_browser.find_browser()[0] is None


def test_an_installed_browser_comes_before_playwrights(bare_machine, monkeypatch):
    chromium = program(bare_machine / "bin" / "chromium")
    monkeypatch.setenv("PATH", str(chromium.parent))
    downloaded = program(bare_machine / "ms-playwright" / "chrome")
    monkeypatch.setattr(find_browser, "playwright_browser", lambda: downloaded)
    assert find_browser.find_browser() == (chromium, "installed")


def test_chromium_chosen_by_hand_wins_and_a_wrong_choice_is_named(bare_machine, monkeypatch):
    installed = program(bare_machine / "bin" / "chromium")
    monkeypatch.setenv("PATH", str(installed.parent))
    mine = program(bare_machine / "mine" / "chrome")
    monkeypatch.setenv("CHROMIUM", str(mine))
    assert find_browser.find_browser() == (mine, f"CHROMIUM={mine}")
    monkeypatch.setenv("CHROMIUM", str(bare_machine / "typo"))
    assert find_browser.find_browser() == (
        None,
        f"CHROMIUM={bare_machine / 'typo'} is not a program",
    )


def test_playwright_answers_a_path_or_nothing():
    found = find_browser.playwright_browser()
    assert found is None or isinstance(found, Path)


def test_without_a_browser_the_step_says_so_in_one_line_and_passes(bare_machine, capsys):
    assert find_browser.main(["tests/test_notebooks_in_browser.py"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("Skipped: the browser tests did not run"), out
    assert find_browser.GET_ONE in out


@pytest.mark.parametrize("ci", ["true", "1"])
def test_without_a_browser_the_step_fails_under_ci(bare_machine, monkeypatch, capsys, ci):
    monkeypatch.setenv("CI", ci)
    assert find_browser.main(["tests/test_notebooks_in_browser.py"]) == 1
    assert capsys.readouterr().out.startswith("FAILED: the browser tests did not run")


def test_with_a_browser_the_step_runs_the_browser_tests_with_it(bare_machine, monkeypatch):
    chromium = program(bare_machine / "bin" / "chromium")
    monkeypatch.setenv("PATH", str(chromium.parent))
    calls = []
    monkeypatch.setattr(
        find_browser.subprocess, "call", lambda command, env: calls.append((command, env)) or 3
    )
    assert find_browser.main(["-x", "tests/test_drawing_in_browser.py"]) == 3  # pytest's status
    ((command, env),) = calls
    assert command == [sys.executable, "-m", "pytest", "-x", "tests/test_drawing_in_browser.py"]
    assert env["CHROMIUM"] == str(chromium) and env["PATH"] == os.environ["PATH"]
