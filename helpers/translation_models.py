"""The translation models stored in data/, by name, and their BLEU on the test set
(``make translation-bleu``).

It sits above the chapters that train them: ``translation`` (the data, decoding and BLEU every
translator shares) knows neither ``bahdanau`` (chapter 08) nor ``transformer_translation``
(chapter 09), which both build on it; this module knows all three.
"""

import functools
import inspect
from collections.abc import Callable

import torch

from helpers import bahdanau, transformer_translation
from helpers.translation import (
    check_beam_size,
    evaluate_bleu,
    grouped_references,
    load_tokenizer,
)


def shipped_translators() -> dict[str, Callable[[], torch.nn.Module]]:
    """Every translation model stored in data/, by name, each as a function that loads it."""
    return {
        name: functools.partial(lambda m, n: m.load_translator(n)[0], module, name)
        for module in (bahdanau, transformer_translation)
        for name in module.MODELS
    }


def print_test_bleu(beam_size: int = 4) -> None:
    """One line per shipped model: its BLEU on the whole held-out test set, greedy; and with a
    beam for the models that decode with one (chapter 09's)."""
    beam_size = check_beam_size(beam_size)  # before minutes of greedy decoding, not after
    tokenizer = load_tokenizer()
    sentences = len(grouped_references("test")[0])
    for name, load in shipped_translators().items():
        model = load()
        beams = [1]
        if "beam_size" in inspect.signature(model.translate_ids).parameters:
            beams.append(beam_size)
        for beam in beams:
            score, signature = evaluate_bleu(model, tokenizer, "test", beam_size=beam)
            how = "greedy" if beam == 1 else f"beam {beam}"
            print(
                f"{name} ({how}): BLEU {score.score:.1f} on {sentences} held-out sentences "
                f"({signature})"
            )
