"""The list of shipped translation models, above the chapters that train them, and the order
of those modules: helpers.translation never imports a chapter built on it."""

import ast
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import bahdanau, decoder_only, transformer_translation, translation_models
from helpers.checkpoints import CheckpointError
from helpers.translation_models import shipped_translators

HELPERS = Path(__file__).resolve().parents[1] / "helpers"


def helpers_imported_by(path: Path) -> set[str]:
    """The helpers modules a file imports anywhere, inside functions too."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "helpers":
            imported.update(f"helpers.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("helpers."):
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names if alias.name.startswith("helpers."))
    return imported


def test_translation_imports_no_module_that_imports_it():
    built_on_translation = {
        f"helpers.{path.stem}"
        for path in HELPERS.glob("*.py")
        if "helpers.translation" in helpers_imported_by(path)
    }
    chapters = {"helpers.bahdanau", "helpers.transformer_translation", "helpers.decoder_only"}
    assert chapters <= built_on_translation
    circle = helpers_imported_by(HELPERS / "translation.py") & built_on_translation
    assert not circle, f"helpers.translation imports {sorted(circle)}, which import it"


def test_importing_translation_loads_no_later_chapter():
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, helpers.translation; "
            "print(' '.join(m for m in sys.modules if m.startswith('helpers')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert set(loaded) == {"helpers", "helpers.translation", "helpers.validation"}


def test_shipped_translators_are_every_chapters_models_by_name():
    loaders = shipped_translators()
    chapters = (bahdanau, transformer_translation, decoder_only)
    assert list(loaders) == [name for chapter in chapters for name in chapter.MODELS]
    assert isinstance(loaders["rnn-bahdanau"](), bahdanau.RNNTranslator)
    assert isinstance(
        loaders["transformer-no-smoothing"](), transformer_translation.TransformerTranslator
    )


@pytest.mark.parametrize("beam_size", [0, -1, 2.5, None])
def test_print_test_bleu_checks_the_beam_before_decoding_anything(beam_size, monkeypatch):
    monkeypatch.setattr(translation_models, "evaluate_bleu", lambda *a, **k: pytest.fail())
    with pytest.raises((ValueError, TypeError), match="beam_size"):
        translation_models.print_test_bleu(beam_size)


def small_translators() -> dict:
    """One untrained small model of each chapter's, as its save_translator takes it."""
    return {
        bahdanau: bahdanau.RNNTranslator(bahdanau.RNNConfig(12, embed_size=8, hidden_size=8)),
        transformer_translation: transformer_translation.build_translator(
            12, transformer_translation.Recipe(d_model=16, num_heads=2, num_layers=1, d_ff=32)
        ),
        decoder_only: decoder_only.build_translator(
            30, 20, dataclasses.replace(decoder_only.RECIPE, num_layers=1, d_model=16, d_ff=32)
        ),
    }


@pytest.mark.parametrize("chapter", [bahdanau, transformer_translation, decoder_only])
@pytest.mark.parametrize(
    ("history", "where"),
    [
        ({"loss": [2.0, float("nan")]}, r"checkpoint\.history\.loss\[1\]"),
        ({"valid_bleu": [float("inf")]}, r"checkpoint\.history\.valid_bleu\[0\]"),
        ({"loss": torch.tensor([float("nan")])}, r"checkpoint\.history\.loss"),
    ],
)
def test_every_save_translator_refuses_what_its_load_translator_would(
    tmp_path, chapter, history, where
):
    """A non-finite history was saved, then refused by load_translator: a file that could
    never be read back. Non-finite weights are refused the same way."""
    model, path = small_translators()[chapter], tmp_path / "model.pt"
    refused, accepted = f"refuses {where}, which holds inf or NaN", {}
    if chapter is decoder_only:  # it checks the history first, as its load_translator does
        refused = "cannot save .*: its history"
        accepted = {"loss": [2.0], "valid_bleu": [9.0], "seconds": 1.0, "device": "cpu"}
        accepted["loss_over"] = "answer"
    with pytest.raises(CheckpointError, match=refused):
        chapter.save_translator(path, model, history)
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(
        CheckpointError, match=r"refuses checkpoint\.weights\..*, which holds inf or NaN"
    ):
        chapter.save_translator(path, model, accepted)
    assert not path.exists()
