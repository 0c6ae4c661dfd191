"""Drive JupyterLab in headless Chromium as a learner would: open a notebook, Run All,
then move every control of every explorer and check that what it drives changed.

Used by test_notebooks_in_browser.py. JupyterLab runs from this environment on a free
localhost port with a random token, with its configuration and caches in a temporary
folder; the browser is the one find_browser.py finds (Chromium, Chrome or Edge).
"""

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from find_browser import GET_ONE, find_browser

CHROMIUM, CHROMIUM_FOUND = find_browser()
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def skip_without_a_browser() -> None:
    """At the top of each browser test module: no browser skips the module, except under
    CI=true, where it is a failure."""
    if CHROMIUM is None:
        message = f"the browser tests did not run ({CHROMIUM_FOUND}); to run them: {GET_ONE}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            raise RuntimeError(message)
        pytest.skip(message, allow_module_level=True)


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_OUTPUT = ".jp-OutputArea-output:has(> .jupyter-widgets)"
# the kernel's status in the status bar, in English or in Chinese (make lab-zh)
KERNEL_IDLE = ".jp-StatusBar-Item:has-text('| Idle'), .jp-StatusBar-Item:has-text('| 空闲')"
TIMEOUT_MS = 360_000  # only for hangs: a loaded machine is slow, not stuck (chapter 09 needs
# about a minute alone, and took over three on a machine running two test suites at once)
# What an explorer's controls drive: the sources of its images (a new blob URL on every
# redraw), or else the text of its output and HTML widgets and of the readouts of the widgets
# you drag or draw on. Installed in every page.
VIEW_SIGNATURE_JS = """
window.__viewSignature = (element) => {
    const images = [...element.querySelectorAll('img.widget-image')];
    if (images.length) return images.map(i => i.getAttribute('src') || '').join('|');
    return [...element.querySelectorAll(
        '.widget-output, .widget-html-content, .attention-direct-readout')]
        .map(e => e.innerText).join('|');
};
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


ROOT = Path(__file__).resolve().parents[1]
# What `make lab-zh` adds to `make lab` (the Makefile's lab-zh recipe; tests/test_zh_edition.py
# holds the two together): JupyterLab's user settings from this folder, which set the Chinese
# locale, and the Chinese chapter 01 to open on.
CHINESE_SETTINGS = ROOT / "jupyter-env/share/jupyter/lab/user-settings-zh-CN"
CHINESE_FIRST_CHAPTER = "zh/01_attention_pooling.ipynb"


@contextmanager
def jupyterlab(
    root_dir: Path, scratch: Path, settings: Path | None = None, lab_args=(), env_changes=None
):
    """Start JupyterLab serving root_dir as `make lab` does, from this environment and with its
    Jupyter configuration (the default URL, no news prompt: see jupyter-env/), with a fresh
    user configuration, as on a learner's first start (or a copy of the user settings in
    settings, with lab_args added to the command line and env_changes to the environment, as
    `make lab-zh` starts it); yield its base URL and token; always stop it."""
    port, token = free_port(), secrets.token_urlsafe(24)
    dirs = {
        name: scratch / name
        for name in ("config", "data", "runtime", "ipython", "matplotlib", "settings", "workspaces")
    }
    for folder in dirs.values():
        folder.mkdir(parents=True, exist_ok=True)
    if settings is not None:
        shutil.copytree(settings, dirs["settings"], dirs_exist_ok=True)
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        "IPYTHONDIR": str(dirs["ipython"]),
        "MPLCONFIGDIR": str(dirs["matplotlib"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        "JUPYTER_TOKEN": token,  # in the environment: a command line is readable through ps
        **(env_changes or {}),
    }
    env.pop("MPLBACKEND", None)  # the kernel must use the inline backend, as in a learner's lab
    command = [
        str(Path(sys.executable).with_name("jupyter-lab")),
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root_dir}",
        *lab_args,
    ]
    if os.geteuid() == 0:
        command.append("--allow-root")
    log_path = scratch / "jupyterlab.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        base_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"JupyterLab exited early:\n{log_path.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{base_url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    log = log_path.read_text()
                    raise RuntimeError(f"JupyterLab did not answer in 60 s:\n{log}") from None
                time.sleep(0.2)
        yield base_url, token
    finally:
        # the server's process group holds its kernels too
        try:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(timeout=10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


NEWS_PROMPT_WAIT_MS = 15_000  # JupyterLab asks about news once its layout is restored and two
# settings requests have answered, and draws the toast later still: after the kernel is idle on a
# loaded machine


def news_prompts(page, wait_ms: int = NEWS_PROMPT_WAIT_MS) -> list[str]:
    """The texts of notifications that ask about or bring Jupyter news (toasts over the page),
    once one has appeared or wait_ms have passed without one."""
    toasts = page.locator(".Toastify__toast", has_text=re.compile("notified|news", re.IGNORECASE))
    try:
        toasts.first.wait_for(timeout=wait_ms)
    except Exception:  # playwright's TimeoutError: no toast came
        pass
    return toasts.all_text_contents()


def open_first_view(page, base_url: str, token: str, path: str = "/") -> str:
    """Open the address `make lab` prints (or path), as a learner does, and wait until
    JupyterLab has restored its layout and shown what it opens on, a notebook with its kernel
    started (the news prompt, when enabled, appears as soon as the layout is restored);
    return the label of the current tab."""
    separator = "&" if "?" in path else "?"
    page.goto(f"{base_url}{path}{separator}token={token}")
    # a notebook's kernel is idle, or the launcher is all there is to show
    page.locator(f"{KERNEL_IDLE}, .jp-Launcher").first.wait_for(timeout=TIMEOUT_MS)
    return page.locator("#jp-main-dock-panel .lm-TabBar-tab.lm-mod-current").inner_text()


def set_user_setting(base_url: str, token: str, plugin: str, raw: str):
    """Store a user's settings of one JupyterLab plugin (raw JSON text) through the server."""
    request = urllib.request.Request(
        f"{base_url}/lab/api/settings/{plugin}",
        data=json.dumps({"raw": raw}).encode(),
        headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        method="PUT",
    )
    urllib.request.urlopen(request, timeout=30)


def stored_widget_count(notebook: Path) -> int:
    """How many widget views the notebook's stored run displayed."""
    cells = json.loads(notebook.read_text())["cells"]
    return sum(
        WIDGET_VIEW in output.get("data", {})
        for cell in cells
        if cell["cell_type"] == "code"
        for output in cell.get("outputs", [])
    )


def open_and_run_all(page, base_url: str, token: str, name: str):
    """Open a notebook with a fresh workspace, wait for the kernel, Run All, wait for the end."""
    start = time.monotonic()
    page.goto(f"{base_url}/lab/tree/{name}?reset&token={token}")
    page.locator(".jp-Notebook").wait_for(timeout=TIMEOUT_MS)
    # the toolbar's indicator reads idle before a kernel exists; the status bar names it
    page.locator(KERNEL_IDLE).wait_for(timeout=TIMEOUT_MS)
    print(f"  {name}: kernel idle after {time.monotonic() - start:.1f} s")
    page.locator(".lm-MenuBar-item", has_text="Run").click()
    page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
    # finished: every code cell numbered, or an error stopped the run; nothing queued
    page.wait_for_function(
        """() => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                .map(p => p.textContent.trim());
            if (prompts.some(p => p.includes('*'))) return false;
            const failed = document.querySelector(
                '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]');
            return failed !== null || prompts.every(p => /\\[\\d+\\]/.test(p));
        }""",
        polling=250,  # ms; by default every animation frame, which keeps Chromium drawing
        timeout=TIMEOUT_MS,
    )
    page.locator(KERNEL_IDLE).wait_for(timeout=TIMEOUT_MS)


def error_outputs(page) -> list[str]:
    errors = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
    # textContent, not innerText: cells scrolled out of view are not rendered (CSS
    # content-visibility), and their innerText reads empty
    return [text[-1500:] for text in errors.all_text_contents()]


def printed_outputs(page) -> list[str]:
    """The texts the cells printed (stdout), in order."""
    printed = page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]')
    return printed.all_text_contents()


def widget_outputs(page):
    """The rendered widget views, and the texts of any that failed to render."""
    broken = page.locator(".jp-OutputArea-output", has_text="Error displaying widget")
    return page.locator(WIDGET_OUTPUT).all(), broken.all_text_contents()


def view_signature(explorer) -> str:
    """What the explorer's controls drive (see VIEW_SIGNATURE_JS), as one string."""
    return explorer.evaluate("element => window.__viewSignature(element)")


def _controls(explorer):
    """Each control as (description, function that changes it once)."""
    controls = []
    for handle in explorer.locator(".noUi-handle").all():
        if handle.evaluate("h => h.closest('[disabled]') !== null"):
            continue  # a disabled control drives nothing until the explorer enables it

        def move(handle=handle):
            at_end = handle.get_attribute("aria-valuenow") == handle.get_attribute("aria-valuemax")
            handle.focus()
            handle.press("ArrowLeft" if at_end else "ArrowRight")

        controls.append(("slider", move))
    for select in explorer.locator("select").all():
        if select.is_disabled():
            continue

        def choose(select=select):
            options = select.locator("option").all_inner_texts()
            current = select.evaluate("s => s.options[s.selectedIndex].text")
            select.select_option(label=next(o for o in options if o != current))

        controls.append(("dropdown", choose))
    for group in explorer.locator(".widget-toggle-buttons").all():

        def toggle(group=group):
            group.locator("button:not(.mod-active)").first.click()

        controls.append(("toggle buttons", toggle))
    for box in explorer.locator(".widget-checkbox input, .widget-toggle-button").all():
        if box.evaluate("e => e.closest('.widget-toggle-buttons') === null"):  # not a group's
            controls.append(("toggle", box.click))
    for field in explorer.locator(".widget-text input, .widget-textarea textarea").all():

        def type_text(field=field):
            field.fill(field.input_value() + "1")
            field.press("Enter")

        controls.append(("text", type_text))
    return controls


def exercise_explorer(page, explorer, timeout_ms: int = 10_000) -> list[str]:
    """Change every control of one explorer once; return a line per control that drove nothing."""
    explorer.scroll_into_view_if_needed()
    controls = _controls(explorer)
    # labelled controls sit in a .widget-inline-hbox; toggle-button groups and lone toggle
    # buttons do not (querySelectorAll counts an element matching several selectors once);
    # a disabled control is not counted, nor moved
    present = explorer.evaluate(
        """element => [...element.querySelectorAll(
            '.widget-inline-hbox, .widget-toggle-buttons, '
            + '.widget-toggle-button:not(.widget-toggle-buttons *)')]
            .filter(control => !control.querySelector('[disabled]')).length"""
    )
    if len(controls) != present:
        return [f"{present} controls, but the test knows how to move only {len(controls)}"]
    if not controls:
        return []
    if not view_signature(explorer):
        return ["has controls but no image, output or HTML for them to drive"]
    failures = []
    for index, (kind, change) in enumerate(controls):
        before = view_signature(explorer)
        change()
        try:
            page.wait_for_function(
                "([element, signature]) => window.__viewSignature(element) !== signature",
                arg=[explorer.element_handle(), before],
                timeout=timeout_ms,
            )
        except Exception:  # playwright's TimeoutError
            failures.append(f"{kind} {index}: the view it drives did not change")
    return failures


def write_notebook(path: Path, *sources: str):
    """A notebook of code cells with the sources, for the kernel this environment installs."""
    cells = [nbformat.v4.new_code_cell(source) for source in sources]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    nbformat.write(notebook, path)


def show_widget(page, scratch_lab, name: str, *sources: str):
    """Write a notebook of the sources into the scratch lab's folder, open it, Run All, and
    return the first widget you drag or draw on (helpers/widgets/direct.py) that it shows,
    scrolled into view. Raises AssertionError when a cell fails."""
    base_url, token, root = scratch_lab
    write_notebook(root / name, *sources)
    open_and_run_all(page, base_url, token, name)
    errors = error_outputs(page)
    assert errors == [], f"a cell failed: {errors}"
    widget = page.locator(".attention-direct").first
    widget.wait_for(timeout=TIMEOUT_MS)
    widget.scroll_into_view_if_needed()
    return widget


def wait_until_settled(page, widget, timeout_ms: int = 30_000) -> None:
    """Wait until every move made on the widget has been answered by the kernel and drawn
    (js/protocol.js keeps data-settled on the widget's element)."""
    page.wait_for_function(
        "el => el.dataset.settled === 'true'", arg=widget.element_handle(), timeout=timeout_ms
    )


def point_centre(widget, name: str) -> tuple[float, float]:
    """Where on the page a draggable point of a plane widget is (js/plane.js)."""
    box = widget.locator(f'.attention-direct-point[data-name="{name}"] circle').bounding_box()
    return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


def drag_point(page, widget, name: str, dx: float, dy: float, steps: int = 12) -> None:
    """Press on the point, move the mouse by (dx, dy) pixels in small steps, release, and wait
    until the kernel has answered every move."""
    x, y = point_centre(widget, name)
    page.mouse.move(x, y)
    page.mouse.down()
    for step in range(1, steps + 1):
        page.mouse.move(x + dx * step / steps, y + dy * step / steps)
        page.wait_for_timeout(16)  # a mouse reports about every 16 ms
    page.mouse.up()
    wait_until_settled(page, widget)


def readout_rows(widget) -> dict:
    """The widget's table as {first cell: {column: text}}."""
    return widget.evaluate(
        """el => {
            const table = el.querySelector('.attention-direct-table');
            const columns = [...table.querySelectorAll('th')].map(th => th.innerText);
            return Object.fromEntries([...table.querySelectorAll('tbody tr')].map(tr => {
                const cells = [...tr.querySelectorAll('td')].map(td => td.innerText);
                return [cells[0], Object.fromEntries(columns.map((c, i) => [c, cells[i]]))];
            }));
        }"""
    )
