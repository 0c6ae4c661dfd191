"""Redraw time of every explorer in helpers.widgets: from a control's change to the
PNG being in the image widget, measured in the kernel's process (``make bench``).

Not a test: timings depend on the machine. It prints the median and the slowest
redraw per explorer and control, against the 100 ms budget of the series.
"""

import statistics
import time

import ipywidgets as widgets
import matplotlib

from helpers import widgets as explorers

matplotlib.use("Agg")
BUDGET_MS = 100
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
    raise TypeError(f"no benchmark values for {type(control).__name__}")


def explorer_classes():
    return [
        cls
        for cls in vars(explorers).values()
        if isinstance(cls, type)
        and issubclass(cls, explorers.Explorer)
        and cls is not explorers.Explorer
    ]


def main():
    print(f"{'explorer':32} {'control':12} {'median ms':>9} {'max ms':>7}")
    worst_median = 0.0
    for cls in explorer_classes():
        explorer = cls()
        for name, control in explorer.controls.items():
            times = []
            for value in control_values(control):
                if control.value == value:
                    continue
                start = time.perf_counter()
                control.value = value
                times.append((time.perf_counter() - start) * 1000)
            median = statistics.median(times)
            worst_median = max(worst_median, median)
            print(f"{cls.__name__:32} {name:12} {median:9.1f} {max(times):7.1f}")
    verdict = "within" if worst_median <= BUDGET_MS else "OVER"
    print(f"slowest median {worst_median:.1f} ms: {verdict} the {BUDGET_MS} ms budget")


if __name__ == "__main__":
    main()
