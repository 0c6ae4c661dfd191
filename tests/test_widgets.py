import importlib
import io
import pkgutil
import re
from pathlib import Path

import ipywidgets
import numpy as np
import PIL.Image
import pytest
import torch

import helpers.widgets
from helpers.dates import load_date_model
from helpers.kernel_regression import gaussian_kernel, kernel_pooling
from helpers.widgets import (
    DateExplorer,
    DirectExplorer,
    Explorer,
    KernelRegressionExplorer,
    MaskBuilderExplorer,
    MaskedSoftmaxExplorer,
    PositionalExplorer,
)
from helpers.widgets.base import png_bytes


@pytest.mark.parametrize("shape", [(1, 1, 4), (3, 5, 4), (37, 2, 4), (2, 300, 4)])
def test_png_bytes_is_a_png_of_exactly_the_pixels_given(shape):
    pixels = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    pixels[0, 0] = (255, 0, 0, 0)  # a transparent pixel keeps its colour and its alpha
    decoded = PIL.Image.open(io.BytesIO(png_bytes(pixels)))
    assert decoded.mode == "RGBA" and decoded.size == (shape[1], shape[0])
    assert np.array_equal(np.asarray(decoded), pixels)


def test_an_explorers_png_is_its_canvas_as_drawn():
    explorer = MaskedSoftmaxExplorer()
    png = explorer.render_png()
    canvas = np.asarray(explorer.figure.canvas.buffer_rgba())
    assert np.array_equal(np.asarray(PIL.Image.open(io.BytesIO(png))), canvas)
    assert len(png) < canvas.nbytes / 10  # compressed: a figure is mostly flat colour


def test_kernel_regression_explorer_follows_its_sliders():
    explorer = KernelRegressionExplorer(width=0.5, query=2.5)
    data = explorer.data
    first_image = bytes(explorer.image.value)
    assert first_image.startswith(b"\x89PNG")
    expected, weights = kernel_pooling(
        torch.tensor([2.5]), data.x_train, data.y_train, gaussian_kernel, 0.5
    )
    assert explorer.state["prediction"] == pytest.approx(expected.item())
    torch.testing.assert_close(explorer.state["weights"], weights[0])

    explorer.controls["query"].value = 4.0
    heaviest_key = data.x_train[explorer.state["weights"].argmax()].item()
    assert abs(heaviest_key - 4.0) < 0.3
    assert bytes(explorer.image.value) != first_image

    narrow_fit = explorer.state["fit"]
    explorer.controls["width"].value = 3.0
    assert explorer.state["fit"].std() < narrow_fit.std()  # a wide kernel smooths the fit
    assert explorer.state["weights"].max() < 0.1


def test_masked_softmax_explorer_follows_its_sliders():
    explorer = MaskedSoftmaxExplorer(valid_len=4, query=0)
    assert (explorer.state["weights"][:, 4:] == 0).all()
    first_image = bytes(explorer.image.value)

    explorer.controls["valid_len"].value = 2
    assert (explorer.state["weights"][:, 2:] == 0).all()
    torch.testing.assert_close(explorer.state["weights"].sum(1), torch.ones(4))
    assert bytes(explorer.image.value) != first_image

    explorer.controls["valid_len"].value = 0
    assert (explorer.state["weights"] == 0).all()

    explorer.controls["valid_len"].value = 6
    explorer.controls["query"].value = 3
    torch.testing.assert_close(explorer.state["row"], torch.softmax(explorer.scores[3], dim=0))


def test_explorer_shows_itself_as_a_static_picture_with_a_stable_repr():
    explorer = MaskedSoftmaxExplorer(valid_len=3, query=1)
    assert explorer._repr_png_().startswith(b"\x89PNG")
    assert repr(explorer) == "MaskedSoftmaxExplorer(valid_len=3, query=1)"


def test_weight_axis_grows_to_fit_the_largest_weight():
    explorer = KernelRegressionExplorer(width=0.3)
    top_before = explorer._bottom.get_ylim()[1]
    explorer.controls["width"].value = 0.04  # one key takes most of the weight: taller axis
    assert explorer._bottom.get_ylim()[1] > top_before
    assert explorer.state["weights"].max() <= explorer._bottom.get_ylim()[1]


def test_scaling_explorer_follows_its_controls():
    from helpers.widgets import ScalingExplorer

    explorer = ScalingExplorer(d_k=256, scaled=True)
    scaled = explorer.state["max_weight"]
    explorer.controls["scaled"].value = False
    assert explorer.state["max_weight"] > scaled + 0.4
    assert explorer.state["scores"].std() > 10
    explorer.controls["scaled"].value = True
    explorer.controls["temperature"].value = 10.0
    assert explorer.state["entropy"] > 2.2  # nearly uniform over 10 keys (log 10 = 2.30)
    explorer.controls["d_k"].value = 4
    assert explorer.state["weights"].shape == (6, 8)
    assert repr(explorer) == "ScalingExplorer(d_k=4, scaled=True, temperature=10)"


def test_head_explorer_switches_head_and_example():
    from helpers.neighbour_task import NeighbourModel, make_neighbour_batch
    from helpers.widgets import HeadExplorer

    torch.manual_seed(0)
    model = NeighbourModel()
    tokens, _, _ = make_neighbour_batch(5, generator=torch.Generator().manual_seed(0))
    explorer = HeadExplorer(model, tokens)
    first = explorer.state["weights"]
    explorer.controls["head"].value = 1
    assert not torch.equal(explorer.state["weights"], first)
    torch.testing.assert_close(explorer.state["weights"], model.attention.attention_weights[0, 1])
    explorer.controls["example"].value = 3
    assert explorer.state["tokens"] == tokens[3].tolist()


def test_positional_explorer_rotates_every_position_by_the_same_angle():
    explorer = PositionalExplorer(offset=3, pair=2)
    first_image = bytes(explorer.image.value)
    assert explorer.state["max_error"] < 1e-5
    explorer.controls["offset"].value = 30
    explorer.controls["pair"].value = 15
    assert explorer.state["max_error"] < 1e-5
    assert explorer.state["angle"] == pytest.approx(30 * 10000 ** (-30 / 32))
    assert bytes(explorer.image.value) != first_image
    explorer.controls["offset"].value = 0
    torch.testing.assert_close(explorer.state["rotation"], torch.eye(2))


def test_mask_builder_follows_tokens_and_kind():
    explorer = MaskBuilderExplorer(tokens="<pad> <pad> the cat sat", kind="padding + causal")
    assert explorer.state["fully_masked_rows"] == ["<pad> (0)", "<pad> (1)"]
    weights = explorer.state["weights"]
    torch.testing.assert_close(weights.sum(-1), torch.tensor([0.0, 0, 1, 1, 1]))
    first_image = bytes(explorer.image.value)

    explorer.controls["tokens"].value = "the cat _ sat"  # a pad in the middle
    explorer.controls["kind"].value = "padding"
    assert explorer.state["mask"][:, 2].sum() == 0 and explorer.state["mask"].sum() == 12
    assert bytes(explorer.image.value) != first_image

    explorer.controls["kind"].value = "causal"
    assert torch.equal(explorer.state["mask"], torch.tril(torch.ones(4, 4)).bool())

    explorer.controls["kind"].value = "cross-attention"
    explorer.controls["source"].value = "le chat <pad>"
    assert explorer.state["mask"].shape == (4, 3)
    assert (explorer.state["weights"][:, 2] == 0).all()


@pytest.mark.parametrize(
    ("field", "text", "message"),
    [
        ("tokens", "", "at least one target token"),
        ("tokens", "a " * 13, "at most 12"),
        ("tokens", "a" * 16, "at most 15 characters"),
        ("tokens", "a" * 10_000, "at most 192 characters"),
        ("tokens", "a \ud800", "cannot be drawn (U+D800)"),
        ("source", "\ud800", "cannot be drawn (U+D800)"),
        ("tokens", "a \x1b[31m", "cannot be drawn (U+001B)"),
    ],
)
def test_mask_builder_answers_bad_input_with_a_message(field, text, message):
    explorer = MaskBuilderExplorer()
    before = bytes(explorer.image.value)
    explorer.controls[field].value = text
    assert message in explorer.state["error"]
    assert bytes(explorer.image.value) != before
    explorer.controls[field].value = "a b"
    assert "error" not in explorer.state


def test_mask_builder_draws_dollar_signs_as_text():
    """Matplotlib would parse $...$ as a formula, and a broken one fails the redraw."""
    explorer = MaskBuilderExplorer()
    before = bytes(explorer.image.value)
    explorer.controls["tokens"].value = r"$x$ $\frac{a b$ _"
    assert "error" not in explorer.state and explorer.state["mask"].shape == (4, 4)
    assert bytes(explorer.image.value) != before


def test_explorers_compute_on_one_thread_and_give_the_threads_back():
    before = torch.get_num_threads()
    seen = []

    class Probe(MaskBuilderExplorer):
        def draw(self, **values):
            seen.append(torch.get_num_threads())
            super().draw(**values)

    Probe().controls["tokens"].value = "a b"
    assert seen == [1, 1] and torch.get_num_threads() == before


@pytest.fixture(scope="module")
def date_model():
    return load_date_model()[0]


def test_date_explorer_follows_its_controls(date_model):
    explorer = DateExplorer(date_model)
    assert explorer.state["prediction"] == "2015-03-03"
    first_image = bytes(explorer.image.value)
    cross = explorer.state["weights"]
    assert cross.shape == (11, len("Tuesday, March 3rd 2015"))  # 10 characters and <eos>
    torch.testing.assert_close(cross.sum(-1), torch.ones(11))

    explorer.controls["kind"].value = "decoder self-attention"
    assert explorer.state["weights"].shape == (11, 11)
    assert (explorer.state["weights"].triu(1) == 0).all()
    explorer.controls["head"].value = 3
    explorer.controls["layer"].value = 0
    assert bytes(explorer.image.value) != first_image

    explorer.controls["date"].value = "the 5th of May, 1997"
    assert explorer.state["prediction"] == "1997-05-05"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("3 März 2015", "unknown character"),
        ("", "the date is empty"),
        ("1" * 41, "at most 40"),
        ("February 30, 2015", "cannot read 'February 30, 2015'"),
        ("March 3, 2050", "1950 to 2049 only"),
    ],
)
def test_date_explorer_answers_bad_input_with_a_message(date_model, text, message):
    explorer = DateExplorer(date_model)
    before = bytes(explorer.image.value)
    explorer.controls["date"].value = text
    assert message in explorer.state["error"]
    assert bytes(explorer.image.value) != before


def test_an_explorer_shows_a_setting_it_cannot_draw_instead_of_raising():
    from helpers.kernel_regression import make_data

    explorer = KernelRegressionExplorer(data=make_data(n_train=3, seed=1), width=0.5)
    width = explorer.controls["width"]
    width.value = width.base**width.min  # the narrowest the slider goes
    assert "no key lies within width" in explorer.state["error"]
    explorer.controls["width"].value = 3.0
    assert "error" not in explorer.state


@pytest.fixture(scope="module")
def translation_explorer():
    from helpers.widgets import TranslationExplorer

    return TranslationExplorer()


def test_translation_explorer_shows_both_translations_and_an_alignment(translation_explorer):
    explorer = translation_explorer
    explorer.controls["sentence"].value = "That's my favorite chair."
    assert explorer.state["translations"]["rnn-bahdanau"] == "C'est ma chaise préférée."
    weights = explorer.state["weights"]  # (French tokens, English tokens)
    torch.testing.assert_close(weights.sum(-1), torch.ones(len(weights)))
    before = bytes(explorer.image.value)
    explorer.controls["sentence"].value = "Tom has a blue car."
    assert set(explorer.state["translations"]) == {"rnn-bottleneck", "rnn-bahdanau"}
    assert bytes(explorer.image.value) != before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "type an English sentence"),
        ("   ", "type an English sentence"),
        ("word " * 13, "at most 12 words"),
        ("x" * 200, "at most 150 characters"),
        ("日本へようこそ", "never seen these characters"),
        ("<b>hi</b>", "'<' (U+003C)"),
        ("Zanzibar, Kilimanjaro, Mombasa, Dodoma and Arusha are in Tanzania.", "subword pieces"),
    ],
)
def test_translation_explorer_answers_bad_input_with_a_message(translation_explorer, text, message):
    explorer = translation_explorer
    explorer.controls["sentence"].value = "I see."
    before = bytes(explorer.image.value)
    explorer.controls["sentence"].value = text
    assert message in explorer.state["error"]
    assert bytes(explorer.image.value) != before


def test_translation_explorer_names_a_lone_surrogate_in_the_learners_words(translation_explorer):
    translation_explorer.controls["sentence"].value = "I see\ud800."
    assert "not valid text (a lone surrogate U+D800" in translation_explorer.state["error"]
    translation_explorer.controls["sentence"].value = "I see."
    assert "error" not in translation_explorer.state


@pytest.mark.parametrize(
    ("swap", "error", "message"),
    [
        ("transformer", TypeError, "models\\['rnn-bahdanau'\\] must be an RNNTranslator"),
        ("bottleneck", ValueError, "must be an RNNTranslator with attention=True"),
        ("missing", TypeError, "models must be a dict with the keys"),
    ],
)
def test_translation_explorer_names_the_models_it_needs(translation_explorer, swap, error, message):
    from helpers.transformer_translation import TransformerTranslator
    from helpers.widgets import TranslationExplorer

    models = dict(translation_explorer.models)
    if swap == "transformer":
        models["rnn-bahdanau"] = TransformerTranslator(8000, 8000, 16, 2, 1, 32)
    elif swap == "bottleneck":
        models["rnn-bahdanau"] = models["rnn-bottleneck"]
    else:
        del models["rnn-bottleneck"]
    with pytest.raises(error, match=message):
        TranslationExplorer(models=models)


def test_each_chapter_has_its_explorer_module_and_the_package_exports_every_explorer():
    chapter_names = {path.stem for path in Path(helpers.__file__).parent.glob("exercises/ch*.py")}
    modules = [info.name for info in pkgutil.iter_modules(helpers.widgets.__path__)]
    shared = {"base", "direct"}  # what the explorers, and the widgets you drag, share
    assert shared <= set(modules) and len(modules) > len(shared)
    for name in modules:
        module = importlib.import_module(f"helpers.widgets.{name}")
        own = {
            value.__name__
            for value in vars(module).values()
            if isinstance(value, type)
            and issubclass(value, Explorer | DirectExplorer)
            and value.__module__ == module.__name__
        }
        assert own <= set(module.__all__), f"{name} does not list {own - set(module.__all__)}"
        for public in module.__all__:
            assert getattr(helpers.widgets, public) is getattr(module, public)
        if name not in shared:
            assert name in chapter_names, f"{name}: not a chapter name of helpers/exercises/"
            assert own, f"{name} holds no explorer"
            for explorer in own:
                chapter = getattr(module, explorer).__doc__.split(":")[0]
                assert chapter == f"Chapter {name[2:4]}", f"{explorer} is in {name}: {chapter}"


@pytest.fixture(scope="module")
def tiny_decoder_only():
    """Two untrained one-layer DecoderOnlyTranslators ("translate", "continue") and the
    tokenizer with <sep>: fast, and enough to check what the explorer draws."""
    import dataclasses

    from helpers.decoder_only import RECIPE, build_translator, load_tokenizer_with_separator

    tokenizer, separator_id = load_tokenizer_with_separator()
    small = dataclasses.replace(RECIPE, num_layers=1, d_model=32, d_ff=32, num_heads=2)
    models = {}
    for seed, task in enumerate(("translate", "continue")):
        torch.manual_seed(seed)
        models[task] = build_translator(tokenizer.get_vocab_size(), separator_id, small)
    return models, tokenizer, separator_id


@pytest.fixture
def decoder_only_explorer(tiny_decoder_only):
    from helpers.widgets import DecoderOnlyExplorer

    return DecoderOnlyExplorer(models=tiny_decoder_only[0])


def test_decoder_only_explorer_draws_what_the_helpers_compute(
    decoder_only_explorer, tiny_decoder_only
):
    from helpers.decoder_only import text_prompt
    from helpers.gpt import next_token_probabilities

    models, tokenizer, separator_id = tiny_decoder_only
    explorer = decoder_only_explorer
    before = bytes(explorer.image.value)
    for name, value in {"temperature": 0.7, "top_k": 10, "top_p": 0.5, "head": 2}.items():
        explorer.controls[name].value = value
    assert bytes(explorer.image.value) != before
    model = models["translate"]
    assert model.training  # the explorer reads in eval mode and gives the mode back
    ids = text_prompt(tokenizer, separator_id, "Tom has a blue car.", "translate")
    model.eval()
    with torch.no_grad():
        logits = model(ids)[:, -1]
    model.train()
    expected = next_token_probabilities(logits.double(), 0.7, 10, 0.5)[0]  # as generate draws
    top_ids = logits[0].topk(10).indices
    state = explorer.state
    assert state["top_ids"] == top_ids.tolist()
    assert state["top_tokens"][0] == tokenizer.id_to_token(int(top_ids[0])).lstrip("▁")
    torch.testing.assert_close(state["probabilities"], logits[0].softmax(-1)[top_ids])
    torch.testing.assert_close(state["sampled_from"], expected[top_ids])
    assert state["kept"] == int((expected > 0).sum()) == int((state["sampled_from"] > 0).sum())
    assert 1 <= state["kept"] < 10  # top-k 10, then top-p 0.5 of those: the cut line shows
    torch.testing.assert_close(state["attention"], model.attention_maps()[0][0, 1, -1])
    assert state["prompt_tokens"] == ["<bos>", "Tom", "has", "a", "blue", "car.", "<sep>"]


def test_decoder_only_explorer_samples_with_its_seed(decoder_only_explorer, tiny_decoder_only):
    from helpers.decoder_only import sample_texts, text_prompt

    models, tokenizer, separator_id = tiny_decoder_only
    explorer = decoder_only_explorer
    explorer.controls["top_p"].value = 1.0  # off: the model's own distribution
    first = explorer.state["samples"]
    assert explorer.state["kept"] == tokenizer.get_vocab_size()
    assert len(set(first)) == 3
    ids = text_prompt(tokenizer, separator_id, "Tom has a blue car.", "translate")
    english = ids.shape[1] - 2
    assert first == sample_texts(models["translate"], tokenizer, ids, 3, 2 * english + 5, seed=0)
    explorer.controls["seed"].value = 1
    assert explorer.state["samples"] != first
    explorer.controls["seed"].value = 0
    assert explorer.state["samples"] == first

    explorer.controls["temperature"].value = 0.0  # greedy: every sample the same
    greedy = explorer.state["samples"]
    assert len(set(greedy)) == 1 and greedy[0] != first[0]
    assert explorer.state["kept"] == 1
    assert explorer.state["sampled_from"].tolist() == [1.0] + [0.0] * 9


def test_decoder_only_explorer_switches_task_layer_and_head(decoder_only_explorer):
    explorer = decoder_only_explorer
    explorer.controls["head"].value = 1
    first_head = explorer.state["attention"]
    explorer.controls["head"].value = 2
    assert not torch.equal(explorer.state["attention"], first_head)
    explorer.controls["prompt"].value = "Tom has a"
    explorer.controls["task"].value = "continue"
    assert explorer.state["prompt_tokens"] == ["<bos>", "Tom", "has", "a"]  # no <sep>
    assert len(explorer.state["attention"]) == 4
    assert "continuations" in explorer.figure.axes[0].get_title()
    assert explorer.render_png().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "type an English sentence"),
        ("word " * 40, "at most 12 words"),
        ("\ud800", "not valid text (a lone surrogate U+D800"),
    ],
)
def test_decoder_only_explorer_answers_bad_prompts_with_a_message(
    decoder_only_explorer, text, message
):
    explorer = decoder_only_explorer
    before = bytes(explorer.image.value)
    explorer.controls["prompt"].value = text
    assert message in explorer.state["error"]
    assert message in explorer.figure.axes[0].get_title()
    assert bytes(explorer.image.value) != before
    explorer.controls["prompt"].value = "I see."
    assert "error" not in explorer.state and len(explorer.state["samples"]) == 3


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"prompt": None}, TypeError, "prompt must be text \\(a str\\), got NoneType"),
        ({"task": "summarise"}, ValueError, "task must be one of \\['translate', 'continue'\\]"),
        ({"models": "translate"}, TypeError, "models must be a dict with the keys"),
        ({"drop": "continue"}, TypeError, "models must be a dict with the keys"),
        ({"swap": "string"}, TypeError, "models\\['continue'\\] must be a DecoderOnlyTranslator"),
        ({"swap": "vocabulary"}, ValueError, "has a vocabulary of 100 tokens"),
        ({"swap": "separator"}, ValueError, "reads <sep> as id 7999; the tokenizer's is 8000"),
        ({"swap": "layers"}, ValueError, "layers of heads translate: 1 of 2, continue: 2 of 2"),
    ],
)
def test_decoder_only_explorer_names_what_it_needs(tiny_decoder_only, arguments, error, message):
    import dataclasses

    from helpers.decoder_only import RECIPE, build_translator
    from helpers.widgets import DecoderOnlyExplorer

    models, arguments = dict(tiny_decoder_only[0]), dict(arguments)
    small = dataclasses.replace(RECIPE, num_layers=1, d_model=32, d_ff=32, num_heads=2)
    swaps = {
        "string": lambda: "a model",
        "vocabulary": lambda: build_translator(100, 5, small),
        "separator": lambda: build_translator(8001, 7999, small),
        "layers": lambda: build_translator(8001, 8000, dataclasses.replace(small, num_layers=2)),
    }
    if "swap" in arguments:
        models["continue"] = swaps[arguments.pop("swap")]()
    if "drop" in arguments:
        del models[arguments.pop("drop")]
    with pytest.raises(error, match=message):
        DecoderOnlyExplorer(**{"models": models, **arguments})


@pytest.mark.skipif(
    not (Path(helpers.__file__).parent.parent / "data" / "decoder-only.pt").exists(),
    reason="data/decoder-only.pt is not trained yet (make translation-models)",
)
def test_decoder_only_explorer_with_the_shipped_models():
    from helpers.decoder_only import text_prompt
    from helpers.translation import decode
    from helpers.widgets import DecoderOnlyExplorer

    explorer = DecoderOnlyExplorer()
    assert set(explorer.models) == {"translate"}  # the other model waits until it is asked for
    assert "error" not in explorer.state and len(explorer.state["samples"]) == 3
    explorer.controls["temperature"].value = 0.0
    model = explorer.models["translate"]
    ids = text_prompt(explorer.tokenizer, explorer.separator_id, "Tom has a blue car.", "translate")
    greedy = decode(explorer.tokenizer, model.translate_ids(ids[:, 1:-1]))[0]
    assert explorer.state["samples"] == [greedy] * 3
    explorer.controls["top_p"].value = 0.05
    explorer.controls["temperature"].value = 1.0
    assert explorer.state["kept"] == 1  # one token already holds more than 5% of the mass
    if (Path(helpers.__file__).parent.parent / "data" / "decoder-only-lm.pt").exists():
        explorer.controls["task"].value = "continue"
        assert "error" not in explorer.state, explorer.state.get("error")
        assert set(explorer.models) == {"translate", "continue"}
        assert explorer.state["prompt_tokens"][-1] == "car."  # no <sep>: it continues
    assert explorer.render_png().startswith(b"\x89PNG")


def test_decoder_only_explorer_shows_a_prompt_with_tabs_and_line_breaks_on_one_line():
    import dataclasses

    from helpers import decoder_only
    from helpers.widgets import DecoderOnlyExplorer

    def tiny():
        small = dataclasses.replace(
            decoder_only.RECIPE, num_layers=1, d_model=32, d_ff=32, num_heads=2, dropout=0.0
        )
        return decoder_only.build_translator(8001, 8000, small)

    explorer = DecoderOnlyExplorer(
        "Tom\thas\na car.", models={"translate": tiny(), "continue": tiny()}
    )
    assert explorer._sample_lines[0].get_text() == "prompt: Tom has a car. <sep>"


# Chapter 13: the induction explorer, on tiny untrained models with two snapshots each


def tiny_induction_training() -> dict:
    """A dict shaped as helpers.induction.load_training() returns it: two tiny attention-only
    GPTs (one and two layers, two heads, vocabulary 64, context 48), snapshots at steps 0 and
    10 (different weights), and a log of three rows whose last row makes head 1 of the last
    layer the best induction head; the recipe that builds such models and writes such logs."""
    from helpers.gpt import GPT
    from helpers.induction import Recipe, model_config

    recipe = Recipe(vocab_size=64, d_model=8, steps=10, log_every=5, snapshot_every=10)
    models, snapshots, logs = {}, {}, {}
    for layers, name in ((1, "one-layer"), (2, "two-layer")):
        config = model_config(recipe, layers)
        snapshots[name] = {}
        for step in (0, 10):
            torch.manual_seed(100 * layers + step)
            snapshots[name][step] = {k: v.clone() for k, v in GPT(config).state_dict().items()}
        models[name] = GPT(config).eval()
        models[name].load_state_dict(snapshots[name][10])
        induction = torch.full((3, layers, 2), 0.1)
        induction[-1, -1] = torch.tensor([0.2, 0.8])
        logs[name] = {
            "step": [0, 5, 10],
            "first_copy_loss": [4.2, 4.2, 4.2],
            "second_copy_loss": [4.2, 3.0, 1.0 * layers],
            "second_copy_accuracy": [0.0, 0.2, 0.5],
            "induction": induction,
            "previous_token": torch.full((3, layers, 2), 0.1),
        }
    return {
        "recipe": recipe,
        "models": models,
        "logs": logs,
        "snapshots": snapshots,
        "seconds": {"one-layer": 1.0, "two-layer": 2.0},
    }


@pytest.fixture
def induction_training():
    return tiny_induction_training()


def _snapshot_reading(training, name, step, ids):
    """The snapshot's float64 logits (n, vocab) and attention maps (layers, heads, n, n) on
    ids (1, n), computed here from the training dict."""
    from helpers.gpt import GPT

    model = GPT(training["models"][name].config).double().eval()
    model.load_state_dict(training["snapshots"][name][step])
    with torch.no_grad():
        logits = model(ids)[0]
    return logits, torch.stack([maps[0] for maps in model.attention_maps()])


def test_induction_explorer_draws_what_the_helpers_compute(induction_training):
    from helpers.induction import induction_score, placed_repeats, previous_token_score
    from helpers.widgets import InductionExplorer

    explorer = InductionExplorer(training=induction_training)
    assert explorer.values() == {
        "model": "two-layer", "step": 10, "layer": 1, "head": 1, "sequence": "repeat",
        "seed": 0, "length": 24, "start": 0, "tokens": "5 9 12 5 9 12",
    }  # fmt: skip
    ids = placed_repeats(1, 48, 0, 24, 64, torch.Generator().manual_seed(0))
    logits, maps = _snapshot_reading(induction_training, "two-layer", 10, ids)
    weights = maps[1, 1]
    losses = -logits[:-1].log_softmax(-1).gather(1, ids[0, 1:, None])[:, 0]  # (47,)
    state = explorer.state
    assert state["ids"] == ids[0].tolist() and (state["start"], state["length"]) == (0, 24)
    torch.testing.assert_close(state["attention"], weights)
    torch.testing.assert_close(state["losses"], losses)
    assert state["induction"] == pytest.approx(float(induction_score(weights, 24)))
    assert state["previous_token"] == pytest.approx(float(previous_token_score(weights)))
    assert state["first_copy_loss"] == pytest.approx(float(losses[:23].mean()))
    assert state["second_copy_loss"] == pytest.approx(float(losses[24:].mean()))
    # what is drawn: the map, the loss line, the step on the log, the caption's numbers
    drawn_map = explorer._heatmap.mesh.get_array()[:48, :48]
    assert np.allclose(np.ma.getdata(drawn_map), weights.numpy())
    assert np.allclose(explorer._loss_line.get_ydata(), losses.numpy())
    assert list(explorer._loss_line.get_xdata()) == list(range(1, 48))
    assert list(explorer._step_dot.get_ydata()) == [1.0 * 2]  # the log's last row
    caption = explorer._map_ax.get_title()
    assert f"induction score {state['induction']:.2f}" in caption
    assert f"previous-token score {state['previous_token']:.2f}" in caption
    assert "step 10" in caption and "layer 1, head 1" in caption
    assert f"second copy {state['second_copy_loss']:.2f}" in explorer._loss_ax.get_title()
    spans = [(span.get_x(), span.get_width()) for span in explorer._copy_spans]
    assert spans == [(-0.5, 24), (23.5, 24)]  # positions 0..23, then 24..47
    assert [span.get_visible() for span in explorer._copy_spans] == [True, True]
    assert induction_training["models"]["two-layer"].tokens.weight.dtype == torch.float32
    assert explorer._snapshot("two-layer", 10) is explorer._snapshot("two-layer", 10)  # cached
    handed = explorer.snapshot("two-layer", 10)  # the caller's own copy of it
    assert handed is not explorer._snapshot("two-layer", 10)
    assert all(
        torch.equal(mine, theirs)
        for mine, theirs in zip(
            handed.state_dict().values(),
            explorer._snapshot("two-layer", 10).state_dict().values(),
            strict=True,
        )
    )
    assert explorer.render_png().startswith(b"\x89PNG")


def test_induction_explorer_follows_each_control(induction_training):
    from helpers.induction import placed_repeats
    from helpers.widgets import InductionExplorer

    explorer = InductionExplorer(training=induction_training)
    repeat = placed_repeats(1, 48, 0, 24, 64, torch.Generator().manual_seed(0))
    other = placed_repeats(1, 48, 0, 24, 64, torch.Generator().manual_seed(1))
    short = placed_repeats(1, 48, 0, 6, 64, torch.Generator().manual_seed(1))
    late = placed_repeats(1, 48, 30, 6, 64, torch.Generator().manual_seed(1))

    def drawn(name: str, step: int, ids: torch.Tensor, layer: int, head: int):
        """Whether the explorer shows that snapshot's map of the layer and head on ids."""
        maps = _snapshot_reading(induction_training, name, step, ids)[1]
        return lambda state: torch.equal(state["attention"], maps[layer, head])

    changes = [
        ("step", 0, drawn("two-layer", 0, repeat, 1, 1)),
        ("layer", 0, drawn("two-layer", 0, repeat, 0, 1)),
        ("head", 0, drawn("two-layer", 0, repeat, 0, 0)),
        ("seed", 1, drawn("two-layer", 0, other, 0, 0)),
        ("tokens", "1 2 3 1 2 3", drawn("two-layer", 0, torch.tensor([[1, 2, 3] * 2]), 0, 0)),
        ("sequence", "repeat", drawn("two-layer", 0, other, 0, 0)),
        ("length", 6, drawn("two-layer", 0, short, 0, 0)),
        ("start", 30, drawn("two-layer", 0, late, 0, 0)),
        ("step", 10, drawn("two-layer", 10, late, 0, 0)),
        ("model", "one-layer", drawn("one-layer", 10, late, 0, 0)),
    ]
    for name, value, holds in changes:
        before = bytes(explorer.image.value)
        explorer.controls[name].value = value
        assert "error" not in explorer.state, (name, explorer.state)
        assert holds(explorer.state), name
        assert bytes(explorer.image.value) != before, f"{name} did not change the figure"
    assert explorer.controls["layer"].options == (0,)
    assert explorer.controls["step"].options == (0, 10)


def test_induction_explorer_edits_choose_their_sequence_and_the_model_keeps_what_it_can(
    induction_training,
):
    from helpers.widgets import InductionExplorer

    explorer = InductionExplorer(training=induction_training, step=0)
    explorer.controls["tokens"].value = "9 8 7"  # typing shows the typed tokens
    assert explorer.values()["sequence"] == "typed" and explorer.state["ids"] == [9, 8, 7]
    explorer.controls["seed"].value = 3  # a new seed shows its random repeat
    assert explorer.values()["sequence"] == "repeat" and explorer.state["length"] == 24
    assert explorer.controls["start"].max == 0  # a block of 24 and its copy fill the context
    explorer.controls["length"].value = 5
    assert explorer.controls["start"].max == 38
    explorer.controls["start"].value = 38
    assert (explorer.state["start"], explorer.state["length"]) == (38, 5)
    explorer.controls["tokens"].value = "9 8 7"
    explorer.controls["length"].value = 10  # the start moves back to where the copy fits
    assert explorer.values()["sequence"] == "repeat"
    assert (explorer.state["start"], explorer.state["length"]) == (28, 10)
    assert explorer.controls["start"].max == 28
    explorer.controls["model"].value = "one-layer"  # layer 1 is gone: the last layer, 0
    assert (explorer.values()["layer"], explorer.values()["step"]) == (0, 0)
    explorer.controls["model"].value = "two-layer"  # layer 0 stays
    assert (explorer.values()["layer"], explorer.values()["step"]) == (0, 0)


def test_induction_explorer_says_which_scores_do_not_apply_to_typed_tokens(induction_training):
    from helpers.induction import previous_token_score
    from helpers.widgets import InductionExplorer

    typed = "5 17 42 5 17"  # 5 17 comes again, but not at once after itself
    explorer = InductionExplorer(sequence="typed", tokens=typed, training=induction_training)
    state = explorer.state
    assert state["ids"] == [5, 17, 42, 5, 17] and state["length"] is None
    assert state["induction"] is None and state["second_copy_loss"] is None
    assert state["previous_token"] == pytest.approx(float(previous_token_score(state["attention"])))
    caption = explorer._map_ax.get_title()
    assert "no induction score: no block followed at once by its copy" in caption
    assert [span.get_visible() for span in explorer._copy_spans] == [False, False]
    assert [label.get_text() for label in explorer._heatmap.x_labels[:6]] == [
        "5", "17", "42", "5", "17", "",
    ]  # fmt: skip
    assert explorer._map_ax.get_xlabel() == "keys (token numbers)"
    assert explorer._loss_ax.get_xlim() == (0.5, 4.5)
    typed_view = bytes(explorer.image.value)
    explorer.controls["sequence"].value = "repeat"  # 48 positions: labelled by position
    assert explorer._map_ax.get_xlabel() == "keys (positions)"
    assert explorer._heatmap.x_labels[4].get_text() == "4"
    assert explorer._heatmap.x_labels[5].get_text() == ""
    full_draws = []
    draw = explorer.figure.canvas.draw
    explorer.figure.canvas.draw = lambda: full_draws.append(1) or draw()
    explorer.controls["sequence"].value = "typed"  # its background was kept: no full draw
    assert bytes(explorer.image.value) == typed_view and not full_draws
    explorer.controls["tokens"].value = "1 2 3"  # fewer positions: a background of its own
    explorer.controls["tokens"].value = "5 17 42 5 17"
    assert len(full_draws) == 1 and bytes(explorer.image.value) == typed_view
    explorer.controls["tokens"].value = "1 2 3"
    kept = bytes(explorer.image.value)
    explorer._backgrounds.clear()
    explorer.redraw_background()
    assert explorer.render_png() == kept and len(full_draws) == 2  # drawn anew: the same


def test_induction_explorer_grows_its_loss_axis_and_keeps_each_background(induction_training):
    from helpers.widgets import InductionExplorer

    snapshot = induction_training["snapshots"]["two-layer"][0]
    for tied in ("tokens.weight", "output.weight"):  # one matrix, stored under both names
        snapshot[tied].mul_(60)  # step 0 predicts confidently and wrongly: losses above 8
    explorer = InductionExplorer(training=induction_training)
    assert explorer._loss_ax.get_ylim() == (0, 8)
    first_view = bytes(explorer.image.value)
    explorer.controls["step"].value = 0
    assert explorer.state["losses"].max() > 8
    assert explorer._loss_ax.get_ylim()[1] > explorer.state["losses"].max()
    grown = bytes(explorer.image.value)
    explorer._backgrounds.clear()
    explorer.redraw_background()
    assert explorer.render_png() == grown  # drawn anew: the same picture
    explorer.controls["step"].value = 10
    assert explorer._loss_ax.get_ylim() == (0, 8) and bytes(explorer.image.value) == first_view


@pytest.mark.parametrize(
    ("control", "text", "message"),
    [
        ("tokens", "", "no tokens: type token numbers 0..63 separated by spaces"),
        ("tokens", "5 x 7", "'x' is not a token number"),
        ("tokens", "5 3.0", "'3.0' is not a token number"),
        ("tokens", "5 -1", "'-1' is not a token number"),
        ("tokens", "5 64", "token 64 is outside the vocabulary 0..63"),
        ("tokens", "1 " * 49, "49 tokens do not fit in the context of 48: type at most 48"),
        ("tokens", "7", "one token has no next token to predict: type at least 2"),
        ("seed", -1, "seed must be a whole number >= 0, got -1"),
    ],
)
def test_induction_explorer_answers_bad_input_with_a_message(
    induction_training, control, text, message
):
    from helpers.widgets import InductionExplorer

    explorer = InductionExplorer(sequence="typed", training=induction_training)
    before = bytes(explorer.image.value)
    explorer.controls[control].value = text
    assert message in explorer.state["error"]
    assert message in explorer._log_ax.get_title()
    assert not explorer._heatmap.mesh.get_visible()
    assert len(explorer._loss_line.get_xdata()) == 0
    assert bytes(explorer.image.value) != before
    explorer.controls["tokens"].value = "3 4 5"
    assert "error" not in explorer.state and explorer.state["ids"] == [3, 4, 5]


def _broken_training(change: str) -> object:
    training = tiny_induction_training()
    if change == "not a dict":
        return "data/induction_models.pt"
    if change == "no logs":
        del training["logs"]
    elif change == "one model":
        del training["models"]["one-layer"]
    elif change == "not a GPT":
        training["models"]["one-layer"] = "a model"
    elif change == "no snapshots":
        training["snapshots"]["two-layer"] = {}
    elif change == "snapshot of another model":
        training["snapshots"]["two-layer"][10] = training["snapshots"]["one-layer"][10]
    elif change == "log scores of another shape":
        training["logs"]["two-layer"]["induction"] = torch.zeros(3, 1, 2)
    elif change == "log steps in a tensor":
        training["logs"]["one-layer"]["step"] = torch.tensor([0, 5, 10])
    elif change == "log of unequal lists":
        training["logs"]["two-layer"]["second_copy_loss"] = [4.0]
    return training


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"model": "three-layer"}, ValueError, "model must be one of ['one-layer', 'two-layer']"),
        (
            {"step": 5},
            ValueError,
            "step 5 is not a stored snapshot of the two-layer model: one of 0, 10",
        ),
        ({"step": 2.5}, ValueError, "step must be a whole number >= 0, got 2.5"),
        (
            {"layer": 2},
            ValueError,
            "layer 2 is out of range for the two-layer model: the model has 2 layers, 0..1",
        ),
        (
            {"model": "one-layer", "layer": 1},
            ValueError,
            "layer 1 is out of range for the one-layer",
        ),
        (
            {"head": 2},
            ValueError,
            "head 2 is out of range for the two-layer model: each layer has 2 heads",
        ),
        ({"head": -1}, ValueError, "head must be a whole number >= 0, got -1"),
        ({"sequence": "random"}, ValueError, "sequence must be one of ['repeat', 'typed']"),
        ({"tokens": [5, 17]}, TypeError, "tokens must be text (a str) of token numbers"),
        ({"seed": -1}, ValueError, "seed must be a whole number >= 0, got -1"),
        ({"seed": "0"}, ValueError, "seed must be a whole number >= 0, got '0'"),
        (
            {"training": "not a dict"},
            TypeError,
            "training must be the dict helpers.induction.load_training() returns, got str",
        ),
        ({"training": "no logs"}, ValueError, "training lacks ['logs']"),
        (
            {"training": "one model"},
            ValueError,
            "training['models'] must name ['one-layer', 'two-layer'], found ['two-layer']",
        ),
        (
            {"training": "not a GPT"},
            TypeError,
            "training['models']['one-layer'] must be a GPT, got str",
        ),
        (
            {"training": "no snapshots"},
            ValueError,
            "training['snapshots']['two-layer']: its snapshots should be {step: weights}, found "
            "an empty dict",
        ),
        (
            {"training": "snapshot of another model"},
            ValueError,
            "training['snapshots']['two-layer'] snapshot 10: its weights do not fit its config",
        ),
        (
            {"training": "log scores of another shape"},
            ValueError,
            "training['logs']['two-layer']: its log's induction should be a (rows, layers, heads) "
            "= (3, 2, 2) tensor, found (3, 1, 2)",
        ),
        (
            {"training": "log of unequal lists"},
            ValueError,
            "its log's second_copy_loss should be a list of one number per logged step (3 steps), "
            "found a list of 1",
        ),
        (
            {"training": "log steps in a tensor"},
            ValueError,
            "training['logs']['one-layer']: its log's step should be a list of training steps",
        ),
    ],
)
def test_induction_explorer_names_what_it_needs(arguments, error, message):
    from helpers.widgets import InductionExplorer

    arguments = dict(arguments)
    if "training" in arguments:
        arguments["training"] = _broken_training(arguments["training"])
    else:
        arguments["training"] = tiny_induction_training()
    with pytest.raises(error, match=re.escape(message)):
        InductionExplorer(**arguments)


def test_induction_explorer_loads_the_shipped_models_by_default():
    from helpers.induction import blank_model, load_training, measure, placed_repeats
    from helpers.widgets import InductionExplorer

    explorer = InductionExplorer()
    training = load_training()
    last = max(training["snapshots"]["two-layer"])
    best = int(training["logs"]["two-layer"]["induction"][-1, 1].argmax())
    assert explorer.values()["model"] == "two-layer"
    assert (explorer.values()["step"], explorer.values()["layer"]) == (last, 1)
    assert explorer.values()["head"] == best
    state = explorer.state
    assert "error" not in state
    ids = placed_repeats(1, 48, 0, 24, 512, torch.Generator().manual_seed(0))
    snapshot = blank_model(training["models"]["two-layer"].config)
    snapshot.load_state_dict(training["snapshots"]["two-layer"][last])  # float16, as kept
    measured = measure(snapshot, ids, 24)
    assert state["second_copy_loss"] == pytest.approx(measured["second_copy_loss"])
    assert state["induction"] == pytest.approx(float(measured["induction"][1, best]))
    assert state["second_copy_loss"] < state["first_copy_loss"] / 2  # the trained circuit
    assert explorer.render_png().startswith(b"\x89PNG")


# Chapter 14: the canvas explorer, on tiny untrained models


@pytest.fixture(scope="module")
def tiny_vision_models() -> dict:
    """An untrained DigitFinder and CanvasReader (d_model 8), shaped as load_vision_models()
    names them: fast, and enough to check what the explorer draws."""
    from helpers.vision_models import CanvasReader, DigitFinder

    torch.manual_seed(14)
    return {"finder": DigitFinder(8), "reader": CanvasReader(8, 2, 1, 1, 8)}


@pytest.fixture
def canvas_explorer(tiny_vision_models):
    from helpers.widgets import CanvasExplorer

    return CanvasExplorer(models=tiny_vision_models)


def _painted(attention: torch.Tensor) -> np.ndarray:
    """(36,) patch weights -> (24, 24): each patch's weight over its 4 x 4 pixels."""
    from helpers.vision import unpatchify

    return unpatchify(attention[None, :, None].expand(1, 36, 16), 4, (24, 24))[0, 0].numpy()


def _on_cell(attention: torch.Tensor, cell: int) -> float:
    from helpers.vision import cell_patches

    return float(attention[cell_patches(cell, 3, 4)].sum())


def _finder_view(models, image, word):
    """The float64 finder's cell probabilities (9,) and attention (36,), computed here."""
    import copy

    finder = copy.deepcopy(models["finder"]).double().eval()
    with torch.no_grad():
        probabilities = finder(image, torch.tensor([word])).softmax(-1)[0]
    return probabilities, finder.attention.attention_weights[0, 0, 0]


def _reader_view(models, image):
    """The float64 reader's greedy tokens up to its first <eos> and its last block's
    cross-attention averaged over heads as each is written (T, 36), computed here."""
    import copy

    from helpers.vision_models import BOS, EOS, read_canvas

    reader = copy.deepcopy(models["reader"]).double().eval()
    with torch.no_grad():
        tokens = read_canvas(reader, image)[0].tolist()
        written = tokens[: tokens.index(EOS) + 1] if EOS in tokens else tokens
        reader(image, torch.tensor([[BOS, *written[:-1]]]))
    return written, reader.decoder[-1].cross_attention.attention_weights[0].mean(0)


def test_canvas_explorer_paints_the_finders_attention_over_the_canvas(
    canvas_explorer, tiny_vision_models
):
    from helpers.vision_models import finder_test_set

    explorer = canvas_explorer
    canvases = finder_test_set(50)[0]
    shown = " ".join("." if d < 0 else str(d) for d in canvases.digits[0].tolist())
    assert explorer.values() == {
        "mode": "find", "word": "seven", "token": 0, "source": "test", "canvas": 0,
        "layout": shown,  # the compose box holds the layout drawn
    }  # fmt: skip
    assert torch.equal(explorer.canvases.images, canvases.images)
    with_seven = next(i for i in range(50) if 7 in canvases.digits[i].tolist())
    explorer.controls["canvas"].value = with_seven
    image = canvases.images[with_seven : with_seven + 1].double()
    probabilities, attention = _finder_view(tiny_vision_models, image, 7)
    state = explorer.state
    truth = canvases.digits[with_seven].tolist().index(7)
    answer = int(probabilities.argmax())
    torch.testing.assert_close(state["attention"], attention)
    torch.testing.assert_close(state["probabilities"], probabilities)
    assert (state["true_cell"], state["answer"]) == (truth, answer)
    assert state["mass_on_true_cell"] == pytest.approx(_on_cell(attention, truth))
    # what is drawn: the weights over the image, the digits under them, the outlines, the numbers
    assert np.allclose(explorer._overlay.get_array(), _painted(attention))
    assert np.array_equal(explorer._digits_image.get_array(), image[0, 0].numpy())
    assert explorer._overlay.norm.vmax >= _painted(attention).max()
    alpha = explorer._overlay.get_alpha()  # see-through, more opaque where the weight is larger
    assert alpha.min() >= 0.2 and alpha.max() <= 0.65
    assert alpha.flat[_painted(attention).argmax()] == alpha.max()
    assert explorer._truth_box.get_xy() == ((truth % 3) * 8 - 0.5, (truth // 3) * 8 - 0.5)
    assert explorer._answer_box.get_xy() == ((answer % 3) * 8 - 0.5, (answer // 3) * 8 - 0.5)
    assert [text.get_text() for text in explorer._cell_texts] == [
        f"{_on_cell(attention, cell):.0%}" for cell in range(9)
    ]
    caption = explorer._image_ax.get_title()
    assert f"{_on_cell(attention, truth):.0%} of the query's attention on cell {truth}" in caption
    assert f"the finder answers cell {answer}" in caption
    assert f"p = {probabilities[answer]:.2f}" in caption
    assert ("right" if answer == truth else "wrong") in caption
    assert not any(text.get_visible() for text in explorer._token_texts)
    assert tiny_vision_models["finder"].embed.project.weight.dtype == torch.float32
    assert explorer.render_png().startswith(b"\x89PNG")


def test_canvas_explorer_says_when_the_words_digit_is_not_on_the_canvas(canvas_explorer):
    explorer = canvas_explorer
    digits = explorer.canvases.digits
    without_seven = next(i for i in range(50) if 7 not in digits[i].tolist())
    explorer.controls["canvas"].value = without_seven
    state = explorer.state
    assert state["true_cell"] is None and state["mass_on_true_cell"] is None
    assert not explorer._truth_box.get_visible() and explorer._answer_box.get_visible()
    caption = explorer._image_ax.get_title()
    assert caption.startswith("no seven on this canvas, yet the finder answers cell")
    assert f"{_on_cell(state['attention'], state['answer']):.0%} of the query's" in caption


def test_canvas_explorer_steps_through_what_the_reader_writes(canvas_explorer, tiny_vision_models):
    from helpers.vision_models import EOS

    explorer = canvas_explorer
    explorer.controls["mode"].value = "read"
    assert explorer.controls["word"].disabled and not explorer.controls["token"].disabled
    image = explorer.canvases.images[:1].double()
    written, attention = _reader_view(tiny_vision_models, image)
    assert explorer.state["written"] == written
    assert explorer.controls["token"].max == len(written) - 1
    filled = (explorer.canvases.digits[0] >= 0).nonzero().flatten().tolist()
    for token in range(len(written)):
        explorer.controls["token"].value = token
        state = explorer.state
        torch.testing.assert_close(state["attention"], attention[token])
        assert np.allclose(explorer._overlay.get_array(), _painted(attention[token]))
        is_digit = written[token] <= 9 and token < len(filled)
        assert state["source_cell"] == (filled[token] if is_digit else None)
        if is_digit:
            share = _on_cell(attention[token], filled[token])
            assert state["share_on_source"] == pytest.approx(share)
            assert f"{share:.0%} of its attention on that cell" in explorer._image_ax.get_title()
        shown = [text for text in explorer._token_texts if text.get_visible()]
        assert len(shown) == len(written)
        highlighted = [i for i, text in enumerate(shown) if text.get_bbox_patch() is not None]
        assert highlighted == [token]
        assert [text.get_color() == "black" for text in shown] == [
            i <= token for i in range(len(written))
        ]
        caption = explorer._image_ax.get_title()
        assert f"read-out token {token} (of 0..{len(written) - 1})" in caption
    assert EOS not in written[:-1]


def test_canvas_explorer_reads_a_trained_like_answer_with_its_captions(tiny_vision_models):
    """Captions for a reader that writes the canvas's digits, a wrong digit, <eos>: the
    reading is replaced by what a trained reader would write (the attention stays the model's)."""
    from helpers.vision_models import EOS
    from helpers.widgets import CanvasExplorer

    explorer = CanvasExplorer(mode="read", layout="7 . . . 3 . . . 1", models=tiny_vision_models)
    (reading,) = explorer._readings.values()
    reading["written"][:] = [7, 5, 1, EOS]  # the attention rows 0..3 stay the model's
    explorer.update()
    for token, expected in [
        (0, "writes 7, from cell 0 (row 0, column 0)"),
        (1, "writes 5 where the canvas's digit is 3, cell 4 (row 1, column 1)"),
        (3, "<eos>, the end, after 3 of the canvas's 3 digits"),
    ]:
        explorer.controls["token"].value = token
        assert expected in explorer._image_ax.get_title()
    assert not explorer._truth_box.get_visible()  # <eos> came from no cell


def test_canvas_explorer_composes_a_canvas_from_typed_cells(tiny_vision_models):
    from helpers.vision import load_digits
    from helpers.widgets import CanvasExplorer

    explorer = CanvasExplorer(word="three", layout="7 . . . 3 . . . 1", models=tiny_vision_models)
    assert explorer.values()["source"] == "composed" and explorer.state["canvas"] is None
    test = load_digits()[1]
    image = explorer.state["image"]
    for cell, digit in ((0, 7), (4, 3), (8, 1)):
        row, col = divmod(cell, 3)
        first = test.images[(test.labels == digit).nonzero()[0, 0], 0]
        assert torch.equal(image[row * 8 : row * 8 + 8, col * 8 : col * 8 + 8], first.double())
    assert image.sum() == pytest.approx(
        sum(float(test.images[(test.labels == d).nonzero()[0, 0]].sum()) for d in (7, 3, 1))
    )
    assert explorer.state["digits"] == [7, -1, -1, -1, 3, -1, -1, -1, 1]
    assert explorer.state["true_cell"] == 4
    _, attention = _finder_view(tiny_vision_models, image[None, None], 3)
    assert np.allclose(explorer._overlay.get_array(), _painted(attention))
    explorer.controls["canvas"].value = 3  # moving the slider shows that test canvas
    assert explorer.values()["source"] == "test" and explorer.state["canvas"] == 3
    explorer.controls["layout"].value = "1 1 . . . . . . ."  # typing shows the typed canvas
    assert explorer.values()["source"] == "composed"
    assert "the digit 1 is on the canvas twice" in explorer.state["error"]
    explorer.controls["mode"].value = "read"  # the reader reads a digit twice
    assert "error" not in explorer.state and explorer.state["digits"][:2] == [1, 1]


def test_canvas_explorer_follows_each_control(canvas_explorer):
    explorer = canvas_explorer
    changes = [
        ("word", "three"),
        ("canvas", 5),
        ("layout", "4 . 2 . . . . . 9"),
        ("source", "test"),
        ("mode", "read"),
        ("token", 1),
    ]
    for name, value in changes:
        before = bytes(explorer.image.value)
        explorer.controls[name].value = value
        assert "error" not in explorer.state, (name, explorer.state)
        assert bytes(explorer.image.value) != before, f"{name} did not change the figure"
    state = explorer.state
    assert (state["mode"], state["source"], state["canvas"], state["token"]) == (
        "read",
        "test",
        5,
        1,
    )


def test_canvas_explorer_keeps_a_background_per_mode(canvas_explorer):
    explorer = canvas_explorer
    find_view = bytes(explorer.image.value)
    explorer.controls["mode"].value = "read"
    full_draws = []
    draw = explorer.figure.canvas.draw
    explorer.figure.canvas.draw = lambda: full_draws.append(1) or draw()
    explorer.controls["mode"].value = "find"  # its background was kept: no full draw
    assert bytes(explorer.image.value) == find_view and not full_draws
    explorer._backgrounds.clear()
    explorer.redraw_background()
    assert explorer.render_png() == find_view and len(full_draws) == 1  # drawn anew: the same


@pytest.mark.parametrize(
    ("mode", "layout", "message"),
    [
        ("find", "", "0 cells, not 9: type 9 cells in reading order, each a digit 0-9 or '.'"),
        ("find", "1 2 3", "3 cells, not 9"),
        ("read", ". " * 10, "10 cells, not 9"),
        ("find", "1 x . . . . . . .", "'x' is not a digit 0-9 or '.'"),
        ("find", "12 . . . . . . . .", "'12' is not a digit 0-9 or '.'"),
        ("find", "-1 . . . . . . . .", "'-1' is not a digit 0-9 or '.'"),
        ("read", "1,2,3,4,5,6,7,8,9", "'1,2,3,4,5,6,7,8,9' is not a digit 0-9 or '.'"),
        ("read", ". . . . . . . . .", "an empty canvas: put at least one digit in it"),
        ("find", "5 . . . . . . . 5", "the digit 5 is on the canvas twice"),
    ],
)
def test_canvas_explorer_answers_bad_input_with_a_message(
    tiny_vision_models, mode, layout, message
):
    from helpers.widgets import CanvasExplorer

    explorer = CanvasExplorer(mode=mode, models=tiny_vision_models)
    before = bytes(explorer.image.value)
    explorer.controls["layout"].value = layout
    assert message in explorer.state["error"]
    title = explorer._image_ax.get_title().replace("\n", " ")
    assert message in title and explorer._image_ax.title.get_color() == "tab:red"
    hidden = (explorer._overlay, explorer._digits_image, explorer._answer_box)
    assert not any(artist.get_visible() for artist in hidden)
    assert not any(text.get_visible() for text in explorer._token_texts)
    assert bytes(explorer.image.value) != before
    explorer.controls["layout"].value = "3 . . . . . . . 4"
    assert "error" not in explorer.state and explorer.state["digits"][0] == 3
    bad = CanvasExplorer(mode=mode, layout=layout, models=tiny_vision_models)  # at the start too
    assert message in bad.state["error"]


@pytest.mark.parametrize("values", [None, "read", [("mode", "read")]], ids=repr)
def test_unused_takes_only_the_dict_of_control_values(canvas_explorer, values):
    for explorer in (canvas_explorer, MaskBuilderExplorer()):
        with pytest.raises(TypeError, match="values must be the dict of control values"):
            explorer.unused(values)
    assert canvas_explorer.unused(canvas_explorer.values() | {"mode": "read"}) == {"word"}


def _broken_vision_models(change: str, models: dict) -> object:
    from helpers.vision_models import CanvasReader, DigitFinder

    models = dict(models)
    if change == "not a dict":
        return "data/vision_models.pt"
    if change == "no reader":
        del models["reader"]
    elif change == "finder is a reader":
        models["finder"] = models["reader"]
    elif change == "a 2 x 2 finder":
        models["finder"] = DigitFinder(8, grid=2)
    elif change == "a 4 x 4 reader":
        models["reader"] = CanvasReader(8, 2, 1, 1, 8, grid=4)
    return models


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"canvas": 50}, ValueError, "canvas must be one of the first 50 test canvases, 0..49"),
        ({"canvas": -1}, ValueError, "canvas must be a whole number >= 0, got -1"),
        ({"canvas": 2.0}, ValueError, "canvas must be a whole number >= 0, got 2.0"),
        ({"word": "7"}, ValueError, "word must be one of ['zero', 'one', 'two'"),
        ({"word": "Seven"}, ValueError, "got 'Seven'"),
        ({"word": np.array([7])}, ValueError, "word must be one of ['zero', 'one', 'two'"),
        ({"mode": ["find"]}, ValueError, "mode must be one of ['find', 'read'], got ['find']"),
        ({"mode": "write"}, ValueError, "mode must be one of ['find', 'read'], got 'write'"),
        ({"layout": [7, -1]}, TypeError, "layout must be text (a str) of nine cells"),
        ({"token": -1}, ValueError, "token must be a whole number >= 0, got -1"),
        ({"token": 99}, ValueError, "token 99 is beyond the read-out: the reader writes"),
        (
            {"models": "not a dict"},
            TypeError,
            "models must be the dict helpers.vision_models.load_vision_models() returns, got str",
        ),
        ({"models": "no reader"}, ValueError, "models lacks ['reader']"),
        (
            {"models": "finder is a reader"},
            TypeError,
            "models['finder'] must be a DigitFinder, got CanvasReader",
        ),
        (
            {"models": "a 2 x 2 finder"},
            ValueError,
            "models['finder'] reads 2 x 2 canvases; the explorer shows 3 x 3",
        ),
        ({"models": "a 4 x 4 reader"}, ValueError, "models['reader'] reads 4 x 4 canvases"),
    ],
)
def test_canvas_explorer_names_what_it_needs(tiny_vision_models, arguments, error, message):
    from helpers.widgets import CanvasExplorer

    arguments = dict(arguments)
    arguments["models"] = _broken_vision_models(arguments.get("models"), tiny_vision_models)
    with pytest.raises(error, match=re.escape(message)):
        CanvasExplorer(**arguments)


def test_canvas_explorer_reads_on_one_thread_and_gives_the_threads_back(tiny_vision_models):
    from helpers.widgets import CanvasExplorer

    before = torch.get_num_threads()
    seen = []

    class Probe(CanvasExplorer):
        def reading(self, image):
            seen.append(torch.get_num_threads())
            return super().reading(image)

    torch.set_num_threads(2)  # two, even where the tests run on one
    try:
        explorer = Probe(models=tiny_vision_models)
        explorer.controls["canvas"].value = 1  # the token slider's range follows the canvas
        explorer.controls["mode"].value = "read"
        assert len(seen) >= 3 and set(seen) == {1} and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_canvas_explorer_grows_its_colour_scale_and_keeps_each_background(tiny_vision_models):
    import copy

    from helpers.widgets import CanvasExplorer

    models = dict(tiny_vision_models)
    models["finder"] = copy.deepcopy(models["finder"])
    with torch.no_grad():
        models["finder"].attention.W_q.weight.mul_(300)  # a sharp query: weights near 1
    explorer = CanvasExplorer(word="three", layout="2 . . . 3 . . . 1", models=tiny_vision_models)
    assert explorer._overlay.norm.vmax == 0.1  # untrained: weights near 1/36
    assert explorer.state["attention"].max() < 0.1
    faint = bytes(explorer.image.value)
    sharp = CanvasExplorer(word="three", layout="2 . . . 3 . . . 1", models=models)
    largest = float(sharp.state["attention"].max())
    expected = next(limit for limit in (0.25, 0.5, 1.0) if largest <= limit)
    assert largest > 0.1 and sharp._overlay.norm.vmax == expected
    assert sharp._colour_bar.norm.vmax == expected
    sharp_view = bytes(sharp.image.value)
    sharp._backgrounds.clear()
    sharp.redraw_background()
    assert sharp.render_png() == sharp_view  # drawn anew: the same picture
    assert faint != sharp_view


def test_canvas_explorer_loads_the_shipped_models_by_default():
    from helpers.vision_models import EOS, load_vision_models
    from helpers.widgets import CanvasExplorer

    explorer = CanvasExplorer()
    models = load_vision_models()
    canvases = explorer.canvases
    assert "error" not in explorer.state and explorer.values()["word"] == "seven"
    _, attention = _finder_view(models, canvases.images[:1].double(), 7)
    torch.testing.assert_close(explorer.state["attention"], attention)
    with_seven = [i for i in range(50) if 7 in canvases.digits[i].tolist()]
    explorer.controls["canvas"].value = with_seven[0]
    state = explorer.state  # the trained finder looks at the seven and answers its cell
    assert state["answer"] == state["true_cell"] and state["mass_on_true_cell"] > 0.9
    explorer.controls["mode"].value = "read"
    digits = [digit for digit in canvases.digits[with_seven[0]].tolist() if digit >= 0]
    assert explorer.state["written"] == [*digits, EOS]  # the trained reader reads it
    for token in range(len(digits)):
        explorer.controls["token"].value = token
        assert explorer.state["share_on_source"] > 0.9
    assert explorer.render_png().startswith(b"\x89PNG")


# Chapter 14's explorer under hostile input (issue 24's review)


def test_canvas_explorer_takes_models_right_after_a_training_step():
    import copy

    from helpers.vision_models import BOS, CanvasReader, DigitFinder
    from helpers.widgets import CanvasExplorer

    torch.manual_seed(0)
    models = {"finder": DigitFinder(8).train(), "reader": CanvasReader(8, 2, 1, 1, 8).train()}
    images = torch.rand(2, 1, 24, 24)
    models["finder"](images, torch.tensor([1, 2])).sum().backward()  # weights kept with grad
    models["reader"](images, torch.full((2, 1), BOS)).sum().backward()
    before = {name: copy.deepcopy(model.state_dict()) for name, model in models.items()}
    explorer = CanvasExplorer(models=models)  # deepcopy refused these models
    assert "error" not in explorer.state
    for name, model in models.items():
        assert model.training and model.state_dict().keys() == before[name].keys()
        for key, value in model.state_dict().items():
            assert torch.equal(value, before[name][key])


def test_canvas_explorer_refuses_models_with_nan_weights(tiny_vision_models):
    import copy

    from helpers.widgets import CanvasExplorer

    broken = dict(tiny_vision_models, finder=copy.deepcopy(tiny_vision_models["finder"]))
    with torch.no_grad():
        broken["finder"].attention.W_q.weight[0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"models\['finder'\] holds NaN or inf in attention.W_q"):
        CanvasExplorer(models=broken)


@pytest.mark.parametrize("token", [10, 10**9])
def test_canvas_explorer_refuses_a_token_beyond_any_read_out_under_a_bad_layout(
    tiny_vision_models, token
):
    from helpers.widgets import CanvasExplorer

    with pytest.raises(ValueError, match=rf"token must be a read-out token 0..9: .* got {token}"):
        CanvasExplorer(token=token, layout="1 2", models=tiny_vision_models)
    explorer = CanvasExplorer(token=9, layout="1 2", models=tiny_vision_models)
    assert "error" in explorer.state  # the largest token any read-out has: the layout's message


@pytest.mark.parametrize(
    ("layout", "shown"),
    [("\uff17 . . . 3 . . . 1", r"'\\uff17'"), ("7\x00 . . . 3 . . . 1", r"'7\\x00'")],
    ids=["a full-width digit", "an invisible character"],
)
def test_canvas_explorer_shows_an_unusual_character_by_its_escape(
    tiny_vision_models, layout, shown
):
    import warnings

    from helpers.widgets import CanvasExplorer

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no glyph missing from the font
        explorer = CanvasExplorer(layout=layout, models=tiny_vision_models)
        explorer.render_png()
    assert re.match(shown + " is not a digit 0-9 or '.'", explorer.state["error"])


@pytest.mark.parametrize(
    "kind, options, wrong, message",
    [
        ("Dropdown", ["off", 1, 3], 7, r"^top-k must be one of 'off', 1, 3; got 7$"),
        ("Dropdown", ["off", 1, 3], "1", r"^top-k must be one of 'off', 1, 3; got '1'$"),
        ("ToggleButtons", [("layer 0", 0), ("layer 1", 1)], 2, r"one of 0, 1; got 2$"),
        ("SelectionSlider", range(0, 3000, 100), 12345, r"1100 \(and 18 more\); got 12345$"),
        ("SelectionSlider", [0, 100], None, r"^top-k must be one of 0, 100; got None$"),
        ("SelectionSlider", [0, 100], 10**5000, r"got an int too large to print$"),
    ],
    ids=["dropdown", "dropdown-text", "toggle-labels", "slider-long", "slider-none", "slider-huge"],
)
def test_a_choice_set_from_code_to_a_value_it_does_not_offer_names_its_options(
    kind, options, wrong, message
):
    from traitlets import TraitError

    control = getattr(helpers.widgets.base, kind)(options=options, description="top-k")
    chosen = control.value
    with pytest.raises(TraitError, match=message):
        control.value = wrong
    assert (control.value, control.index) == (chosen, 0)
    control.value = control.options[-1][1] if kind == "ToggleButtons" else control.options[-1]
    assert control.index == len(control.options) - 1


def test_a_dropdown_with_no_options_left_still_stands_on_none():
    control = helpers.widgets.base.Dropdown(options=[1, 2], description="head")
    control.options = []
    assert control.value is None  # the explorer then says "choose a value for head"


def test_every_explorers_choices_name_their_options(induction_training, canvas_explorer):
    """The explorers build their choices from helpers.widgets.base, never ipywidgets' own."""
    from traitlets import TraitError

    from helpers.widgets import InductionExplorer

    for explorer in (InductionExplorer(training=induction_training), canvas_explorer):
        for name, control in explorer.controls.items():
            if isinstance(
                control, ipywidgets.Dropdown | ipywidgets.ToggleButtons | ipywidgets.SelectionSlider
            ):
                before = explorer.values()
                with pytest.raises(TraitError, match=f"^{control.description} must be one of"):
                    control.value = "nothing it offers"
                assert explorer.values() == before, name
    for path in Path(helpers.widgets.__file__).parent.glob("ch*.py"):
        assert not re.search(
            r"widgets\.(Dropdown|ToggleButtons|SelectionSlider)\(", path.read_text()
        )


@pytest.mark.parametrize(
    ("kind", "settings", "wrong", "message"),
    [
        (
            "IntSlider",
            {"min": 0, "max": 9},
            True,
            r"^seed must be a whole number from 0 to 9; got Tr",
        ),
        (
            "IntSlider",
            {"min": 0, "max": 9},
            12,
            r"^seed must be a whole number from 0 to 9; got 12$",
        ),
        ("IntSlider", {"min": 0, "max": 9}, -1, r"from 0 to 9; got -1$"),
        (
            "IntSlider",
            {"min": 0, "max": 9},
            1.5,
            r"^seed must be a whole number from 0 to 9; got 1.5$",
        ),
        (
            "IntSlider",
            {"min": 0, "max": 9},
            "3",
            r"^seed must be a whole number from 0 to 9; got '3'$",
        ),
        ("IntText", {}, True, r"^seed must be a whole number; got True$"),
        ("IntText", {}, 1.5, r"^seed must be a whole number; got 1.5$"),
        ("IntText", {}, None, r"^seed must be a whole number; got None$"),
        (
            "FloatSlider",
            {"min": 0.0, "max": 2.0},
            True,
            r"^seed must be a number a float can hold; got True$",
        ),
        (
            "FloatSlider",
            {"min": 0.0, "max": 2.0},
            None,
            r"^seed must be a number a float can hold; got None$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            True,
            r"^seed must be a number a float can hold; got True$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            10**5000,
            r"float can hold; got an int too large to print$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            1e9,
            r"^seed must be a number from 0.1 to 10; got 1000000000.0$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            0,
            r"^seed must be a number from 0.1 to 10; got 0.0$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            -1,
            r"^seed must be a number from 0.1 to 10; got -1.0$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            1e-300,
            r"^seed must be a number from 0.1 to 10; got 1e-300$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            float("inf"),
            r"^seed must be a number from 0.1 to 10; got inf$",
        ),
        (
            "FloatLogSlider",
            {"min": -1, "max": 1},
            float("nan"),
            r"^seed must be a number from 0.1 to 10; got nan$",
        ),
        (
            "FloatSlider",
            {"min": 0.0, "max": 2.0},
            7,
            r"^seed must be a number from 0 to 2; got 7.0$",
        ),
        (
            "FloatSlider",
            {"min": 0.0, "max": 2.0},
            float("nan"),
            r"^seed must be a number from 0 to 2; got nan$",
        ),
        ("Dropdown", {"options": range(3)}, True, r"^seed must be one of 0, 1, 2; got True$"),
        ("ToggleButtons", {"options": [0, 1]}, 1.0, r"^seed must be one of 0, 1; got 1.0$"),
    ],
    ids=lambda value: helpers.validation.shown(value)[:20],
)
def test_a_number_set_from_code_is_refused_rather_than_cast_or_clamped(
    kind, settings, wrong, message
):
    """ipywidgets casts 1.5 and True to 1 and moves 12 to the slider's end, quietly."""
    from traitlets import TraitError

    control = getattr(helpers.widgets.base, kind)(description="seed", **settings)
    before = control.value
    with pytest.raises(TraitError, match=message):
        control.value = wrong
    assert control.value == before and type(control.value) is type(before)


@pytest.mark.parametrize("kind", ["FloatSlider", "FloatLogSlider"])
@pytest.mark.parametrize("number", [np.float32(0.75), np.float64(0.5), np.int64(1)], ids=repr)
def test_a_float_control_takes_numpys_real_numbers_as_floats(kind, number):
    """np.float32(0.75) was refused as 'must be a number a float can hold'."""
    control = getattr(helpers.widgets.base, kind)(description="temperature", min=-1, max=1)
    control.value = number
    assert control.value == float(number) and type(control.value) is float


@pytest.mark.parametrize("kind", ["FloatSlider", "FloatLogSlider"])
def test_a_float_control_refuses_a_value_past_its_ends_when_built(kind):
    """ipywidgets moved FloatLogSlider(value=1e9, min=-1, max=1) to 10 without a word."""
    from traitlets import TraitError

    with pytest.raises(TraitError, match=r"^seed must be a number from "):
        getattr(helpers.widgets.base, kind)(value=1e9, min=-1, max=1, description="seed")


def test_a_log_slider_takes_an_end_the_browser_computed_with_a_rounding_error():
    control = helpers.widgets.base.FloatLogSlider(min=-1.5, max=0.7, step=0.02, description="σ")
    last = control.min + 110 * control.step  # the exponent the browser reaches: 0.7 give or take
    control.value = control.base**last
    assert control.value == control.base**control.max


def _log_sliders():
    """(explorer factory, control name) for every explorer with a FloatLogSlider."""
    from helpers.widgets import (
        DragPoolingExplorer,
        QueryKeyPlaneExplorer,
        RopeExplorer,
        ScalingExplorer,
    )

    return [
        (KernelRegressionExplorer, "width"),
        (DragPoolingExplorer, "width"),
        (ScalingExplorer, "temperature"),
        (QueryKeyPlaneExplorer, "temperature"),
        (RopeExplorer, "base"),
    ]


@pytest.mark.parametrize(
    "make, name", _log_sliders(), ids=lambda item: getattr(item, "__name__", item)
)
def test_every_log_slider_moves_across_its_whole_range(make, name):
    explorer = make()
    control = explorer.controls[name]
    assert isinstance(control, helpers.widgets.base.FloatLogSlider)
    steps = round((control.max - control.min) / control.step)
    for step in range(steps + 1):
        control.value = control.base ** (control.min + step * control.step)  # as the browser does
        problem = (
            explorer.live.view.get("problem")
            if isinstance(explorer, DirectExplorer)
            else explorer.state.get("error")
        )
        assert problem is None, (step, control.value, problem)


@pytest.mark.parametrize("wrong", [1.5, None, 5, True], ids=repr)
def test_a_text_control_set_from_code_to_something_else_names_the_control(wrong):
    """traitlets' message named the widget class: "The 'value' trait of a Text instance"."""
    from traitlets import TraitError

    control = helpers.widgets.base.Text(value="3 1 4", description="layout")
    with pytest.raises(TraitError, match=r"^layout must be text \(a str\); got "):
        control.value = wrong
    assert control.value == "3 1 4"


def test_every_explorer_builds_its_number_controls_from_helpers_widgets_base():
    for path in Path(helpers.widgets.__file__).parent.glob("ch*.py"):
        built = re.findall(
            r"widgets\.(IntSlider|IntText|FloatSlider|FloatLogSlider)\(", path.read_text()
        )
        assert not built, f"{path.name} builds ipywidgets' own {built}"


@pytest.mark.parametrize(
    "largest, limits, words",
    [
        (float("nan"), (1.0, 2.0), "largest must be a finite number"),
        (1.0, (), "non-empty tuple of increasing numbers"),
        (1.0, (2.0, 1.0), "non-empty tuple of increasing numbers"),
        (1.0, [1.0, 2.0], "non-empty tuple of increasing numbers"),
        (1.0, (0.0, 1.0), "positive and finite"),
        (1.0, (1.0, float("inf")), "positive and finite"),
    ],
)
def test_fit_y_limit_names_a_limit_it_cannot_choose_from(largest, limits, words):
    from helpers.widgets.base import Explorer

    with pytest.raises(ValueError, match=words):
        Explorer._check_y_limits(largest, limits)
    Explorer._check_y_limits(np.float64(1.5), (0.5, 2.0))
