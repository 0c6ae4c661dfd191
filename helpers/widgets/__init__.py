"""Interactive explorers: controls plus a figure that redraws when a control moves.

Each explorer keeps one matplotlib figure and updates its artists in place, then
renders it to PNG into an ``ipywidgets.Image`` (no JavaScript beyond ipywidgets', so
it works offline). ``explorer.state`` holds the numbers the figure is drawn from,
so tests can set ``explorer.controls[name].value`` and check what changed without
a browser. Display ``explorer.widget`` in a notebook; ``explorer.figure`` is the
static view of the current settings.

The widgets you drag or draw on (chapters 01, 03 and 14) are anywidgets instead: the browser
draws, and sends positions or strokes to the kernel, which answers with every number to draw
(``direct`` holds what they share, and their JavaScript lives in ``js/``).

``base`` holds the Explorer class and what the explorers share; each chapter's explorers live
in ``chNN_<name>`` (the names of helpers/exercises/), and this package re-exports them, so a
notebook writes ``from helpers.widgets import KernelRegressionExplorer``."""

from helpers.widgets.base import *  # noqa: F403
from helpers.widgets.ch01_attention_pooling import *  # noqa: F403
from helpers.widgets.ch02_masked_softmax import *  # noqa: F403
from helpers.widgets.ch03_scoring_functions import *  # noqa: F403
from helpers.widgets.ch04_multi_head_attention import *  # noqa: F403
from helpers.widgets.ch05_positional_encoding import *  # noqa: F403
from helpers.widgets.ch06_masks import *  # noqa: F403
from helpers.widgets.ch07_transformer import *  # noqa: F403
from helpers.widgets.ch08_bahdanau import *  # noqa: F403
from helpers.widgets.ch09_transformer_translation import *  # noqa: F403
from helpers.widgets.ch10_efficient_attention import *  # noqa: F403
from helpers.widgets.ch11_long_context import *  # noqa: F403
from helpers.widgets.ch12_decoder_only import *  # noqa: F403
from helpers.widgets.ch13_induction_heads import *  # noqa: F403
from helpers.widgets.ch14_attention_across_modalities import *  # noqa: F403
from helpers.widgets.ch15_encoder_only import *  # noqa: F403
from helpers.widgets.ch16_todays_attention import *  # noqa: F403
from helpers.widgets.direct import *  # noqa: F403
