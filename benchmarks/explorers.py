"""Redraw time of every explorer in helpers.widgets: from a control's change to the
PNG being in the image widget, measured in the kernel's process (``make bench``).

With --under-load, a second process keeps two torch threads busy with matrix products for
the whole run, as a learner training in one notebook while exploring in another would
(``make bench-under-load``).

Not a test: timings depend on the machine. It prints the median and the slowest
redraw per explorer and control, against the budgets of the series: 100 ms for sliders and
buttons, which a learner drags and clicks through, and 150 ms for a text field, which
redraws once per submitted edit and may first run a model (chapter 07 decodes the new date).
"""

import argparse
import statistics
import subprocess
import sys
import time

import ipywidgets as widgets
import matplotlib

from helpers import widgets as explorers

matplotlib.use("Agg")
BUDGET_MS = 100
TEXT_BUDGET_MS = 150
STEPS = 15


def control_values(control):
    """STEPS values spread over the control's range (or its options)."""
    if isinstance(control, widgets.FloatLogSlider):
        exponents = [
            control.min + (control.max - control.min) * i / (STEPS - 1) for i in range(STEPS)
        ]
        return [control.base**e for e in exponents]
    if isinstance(control, widgets.IntSlider):
        span = range(control.min, control.max + 1)
        return [span[i % len(span)] for i in range(STEPS)]
    if isinstance(control, widgets.FloatSlider):
        return [control.min + (control.max - control.min) * i / (STEPS - 1) for i in range(STEPS)]
    if hasattr(control, "options"):
        options = [o[1] if isinstance(o, tuple) else o for o in control.options]
        return [options[i % len(options)] for i in range(STEPS)]
    if isinstance(control, widgets.ToggleButton | widgets.Checkbox):
        return [bool(i % 2) for i in range(STEPS)]
    if isinstance(control, widgets.IntText):  # a number box: the start value and the next ones
        return [control.value + i for i in range(STEPS)]
    if isinstance(control, widgets.Text):  # the start text, then with one more token
        return [control.value + ("" if i % 2 else f" {i % 10}") for i in range(STEPS)]
    raise TypeError(f"no benchmark values for {type(control).__name__}")


def explorer_classes():
    return [
        cls
        for cls in vars(explorers).values()
        if isinstance(cls, type)
        and issubclass(cls, explorers.Explorer)
        and cls is not explorers.Explorer
    ]


LOAD = """
import torch
torch.set_num_threads(2)
a = torch.randn(1500, 1500)
while True:
    a = torch.tanh(a @ a)
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--under-load", action="store_true", help="time beside a busy torch")
    parser.add_argument("--only", metavar="NAME", help="time one explorer class only")
    arguments = parser.parse_args()
    classes = explorer_classes()
    if arguments.only is not None:
        classes = [cls for cls in classes if cls.__name__ == arguments.only]
        if not classes:
            parser.error(f"no explorer named {arguments.only!r}")
    if arguments.under_load:
        load = subprocess.Popen([sys.executable, "-c", LOAD])
        time.sleep(3)  # let it start its threads
        try:
            return measure(classes)
        finally:
            load.kill()
    return measure(classes)


def measure(classes: list[type]) -> bool:
    print(f"{'explorer':32} {'control':12} {'median ms':>9} {'max ms':>7}")
    worst = {BUDGET_MS: 0.0, TEXT_BUDGET_MS: 0.0}
    for cls in classes:
        explorer = cls()
        for name, control in explorer.controls.items():
            times, first = [], control.value
            for value in control_values(control):
                if control.value == value:
                    continue
                start = time.perf_counter()
                control.value = value
                times.append((time.perf_counter() - start) * 1000)
            control.value = first  # the next control is timed from the explorer's first view
            if not times:  # one option only (say, one layer to choose from)
                print(f"{cls.__name__:32} {name:12} {'one value: nothing to time':>17}")
                continue
            median = statistics.median(times)
            budget = TEXT_BUDGET_MS if isinstance(control, widgets.Text) else BUDGET_MS
            worst[budget] = max(worst[budget], median)
            print(f"{cls.__name__:32} {name:12} {median:9.1f} {max(times):7.1f}")
    for budget, kind in ((BUDGET_MS, "sliders and buttons"), (TEXT_BUDGET_MS, "text fields")):
        verdict = "within" if worst[budget] <= budget else "OVER"
        print(f"{kind}: slowest median {worst[budget]:.1f} ms, {verdict} the {budget} ms budget")
    return all(worst[budget] <= budget for budget in worst)


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
