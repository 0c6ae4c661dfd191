"""The translation models stored in data/, by name, and their BLEU on the test set
(``make translation-bleu``).

It sits above the chapters that train them: ``translation`` (the data, decoding and BLEU every
translator shares) knows neither ``bahdanau`` (chapter 08), ``transformer_translation``
(chapter 09) nor ``decoder_only`` (chapter 12), which all build on it; this module knows them all.
"""

import argparse
import functools
import inspect
from collections.abc import Callable

import torch

from helpers import bahdanau, decoder_only, transformer_translation
from helpers.translation import (
    check_beam_size,
    evaluate_bleu,
    grouped_references,
)


def shipped_translators() -> dict[str, Callable[[], torch.nn.Module]]:
    """Every translation model stored in data/, by name, each as a function that loads it."""
    return {
        name: functools.partial(lambda m, n: m.load_translator(n)[0], module, name)
        for module in (bahdanau, transformer_translation, decoder_only)
        for name in module.MODELS
    }


def print_test_bleu(beam_size: int = 4) -> None:
    """One line per shipped model: its BLEU on the whole held-out test set, greedy; and with a
    beam for the models that decode with one (chapters 09 and 12). The tokenizer is chapter
    08's with chapter 12's <sep> added: the same ids, and one more that only chapter 12's
    models write."""
    beam_size = check_beam_size(beam_size)  # before minutes of greedy decoding, not after
    tokenizer = decoder_only.load_tokenizer_with_separator()[0]
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


def main() -> None:
    """python -m helpers.translation_models: every shipped translator's test BLEU."""
    argparse.ArgumentParser(
        description="Print every shipped translator's BLEU on the test set."
    ).parse_args()
    print_test_bleu()


if __name__ == "__main__":
    main()
