"""Find a Chromium-family browser for the browser tests, and run them with it.

    python tests/find_browser.py [pytest arguments]

runs pytest on the arguments with the browser found, or, when there is none, prints one line
that says the browser tests did not run and how to get a browser, and exits 0: a learner's
`make test` passes without one. Under CI=true a missing browser fails instead.

Where it looks, in order: $CHROMIUM (a path chosen by hand: if it is not a program, nothing
else is tried); Chromium, Chrome or Edge on the PATH or where their installers put them on
macOS and Windows; the Chromium that `playwright install chromium` downloads (no root needed).
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ON_THE_PATH = (
    "chromium",
    "chromium-browser",
    "google-chrome",
    "google-chrome-stable",
    "chrome",
    "microsoft-edge",
    "microsoft-edge-stable",
    "msedge",
)
MACOS_APPS = (
    "Google Chrome.app/Contents/MacOS/Google Chrome",
    "Chromium.app/Contents/MacOS/Chromium",
    "Microsoft Edge.app/Contents/MacOS/Microsoft Edge",
)
WINDOWS_PROGRAMS = (
    "Google/Chrome/Application/chrome.exe",
    "Chromium/Application/chrome.exe",
    "Microsoft/Edge/Application/msedge.exe",
)
GET_ONE = ".venv/bin/python -m playwright install chromium"  # no root, any system


def is_program(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def installed_browsers() -> list[Path]:
    """Where Chromium, Chrome and Edge are found without asking: the PATH, then the folders
    their installers use on macOS and Windows."""
    found = [Path(p) for name in ON_THE_PATH if (p := shutil.which(name))]
    if sys.platform == "darwin":
        roots = [Path("/Applications"), Path.home() / "Applications"]
        found += [root / app for root in roots for app in MACOS_APPS]
    if sys.platform == "win32":
        names = ("PROGRAMFILES", "PROGRAMFILES(X86)", "LOCALAPPDATA")
        roots = [Path(os.environ[name]) for name in names if os.environ.get(name)]
        found += [root / program for root in roots for program in WINDOWS_PROGRAMS]
    return found


def playwright_browser() -> Path | None:
    """The Chromium that `playwright install chromium` put in Playwright's own cache, if any."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            return Path(playwright.chromium.executable_path)
    except Exception:  # Playwright missing or its driver unable to start: no browser from it
        return None


def find_browser() -> tuple[Path | None, str]:
    """(the browser to drive, None if there is none; where it came from, or why none)."""
    chosen = os.environ.get("CHROMIUM")
    if chosen:
        if is_program(Path(chosen)):
            return Path(chosen), f"CHROMIUM={chosen}"
        return None, f"CHROMIUM={chosen} is not a program"
    for path in installed_browsers():
        if is_program(path):
            return path, "installed"
    path = playwright_browser()
    if path is not None and is_program(path):
        return path, "Playwright's own"
    return None, "no Chromium, Chrome or Edge on the PATH, in the usual places or Playwright's"


def main(pytest_arguments: list[str]) -> int:
    browser, where = find_browser()
    if browser is None:
        required = os.environ.get("CI", "").lower() in ("1", "true", "yes")
        print(
            f"{'FAILED' if required else 'Skipped'}: the browser tests did not run ({where}); "
            f"to run them: {GET_ONE}, then make test-browser"
            + (" (CI=true requires them)" if required else ""),
            flush=True,
        )
        return 1 if required else 0
    print(f"The browser tests drive {browser} ({where}).", flush=True)
    command = [sys.executable, "-m", "pytest", *pytest_arguments]
    return subprocess.call(command, env={**os.environ, "CHROMIUM": str(browser)})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
