"""Run time of every notebook from a fresh kernel, against the series' budgets
(``make bench``): the median of REPEATS runs, each a clean Restart & Run All.

Not a test: times depend on the machine and its load. It exits non-zero when a median is
over its budget, so a slow chapter is noticed before a learner notices it.
"""

import statistics
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 30
BUDGETS_S = {  # chapters that load trained models
    "07_transformer.ipynb": 60,
    "08_bahdanau_attention.ipynb": 60,
    "09_transformer_translation.ipynb": 60,
    "12_decoder_only.ipynb": 45,
    "14_attention_across_modalities.ipynb": 45,
    "15_encoder_only.ipynb": 45,
    "16_todays_attention.ipynb": 45,
}
REPEATS = 3


def run_seconds(path: Path) -> float:
    notebook = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        notebook, timeout=600, resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    return time.perf_counter() - start


def main() -> bool:
    within = True
    print(f"{'notebook':50} {'median s':>8} {'budget s':>8}")
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        median = statistics.median(run_seconds(path) for _ in range(REPEATS))
        budget = BUDGETS_S.get(path.name, BUDGET_S)
        within &= median <= budget
        print(f"{path.name:50} {median:8.1f} {budget:8}" + ("" if median <= budget else "  OVER"))
    return within


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
