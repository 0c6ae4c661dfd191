"""Check functions for the exercises, one module per chapter (``framework`` holds what they
share). Each runs a learner's function on cases with known answers and checks its values, the
gradients it passes back, that it leaves its inputs as they were, and that it does not call the
function it re-implements. It answers "Correct" or "Not yet" with the case that failed and why;
it never raises at a wrong answer.

Each chapter module names its checkers in ``__all__``; this package re-exports them, so a
notebook writes ``from helpers.exercises import check_masked_softmax``."""

from helpers.exercises.ch01_attention_pooling import *  # noqa: F403
from helpers.exercises.ch02_masked_softmax import *  # noqa: F403
from helpers.exercises.ch03_scoring_functions import *  # noqa: F403
from helpers.exercises.ch04_multi_head_attention import *  # noqa: F403
from helpers.exercises.ch05_positional_encoding import *  # noqa: F403
from helpers.exercises.ch06_masks import *  # noqa: F403
from helpers.exercises.ch07_transformer import *  # noqa: F403
from helpers.exercises.ch08_bahdanau import *  # noqa: F403
from helpers.exercises.ch09_transformer_translation import *  # noqa: F403
from helpers.exercises.ch10_efficient_attention import *  # noqa: F403
from helpers.exercises.ch11_long_context import *  # noqa: F403
from helpers.exercises.ch12_decoder_only import *  # noqa: F403
from helpers.exercises.ch13_induction_heads import *  # noqa: F403
from helpers.exercises.ch14_attention_across_modalities import *  # noqa: F403
from helpers.exercises.ch15_encoder_only import *  # noqa: F403
from helpers.exercises.ch16_todays_attention import *  # noqa: F403
