"""Chapter 08's explorer: both RNN translators' French and the attention model's alignment."""

import ipywidgets as widgets

from helpers.bahdanau import MODELS as TRANSLATORS
from helpers.bahdanau import RNNTranslator, load_translator, translate_with_alignment
from helpers.translation import MAX_SOURCE_TOKENS, MAX_WORDS, load_tokenizer, shown_tokens
from helpers.widgets.base import Explorer, alignment_figure, check_sentence, check_vocabulary

__all__ = ["TranslationExplorer"]


class TranslationExplorer(Explorer):
    """Chapter 08: type an English sentence; see both models' French, and where the attention
    model looked in the English while it wrote each French token."""

    MAX_OUTPUT = 2 * MAX_WORDS + 6  # output tokens shown

    def __init__(self, sentence: str = "Tom has a blue car.", models: dict | None = None):
        """models: {"rnn-bottleneck": model, "rnn-bahdanau": model} (default: those in data/)."""
        check_sentence(sentence)
        self.tokenizer = load_tokenizer()
        if models is None:
            models = {name: load_translator(name)[0] for name in TRANSLATORS}
        self.models = _checked_rnn_models(models, self.tokenizer.get_vocab_size())
        controls = {
            "sentence": widgets.Text(
                value=sentence,
                description="English sentence",
                placeholder=f"up to {MAX_WORDS} words",
                layout=widgets.Layout(width="60%"),
            )
        }
        figure, ax, self._map = alignment_figure(
            self.MAX_OUTPUT,
            MAX_SOURCE_TOKENS,
            "Reds",
            "attention weight",
            "the encoder's states",
            "the decoder's states",
        )
        self._ax = ax
        super().__init__(controls, figure, [*self._map.artists, ax.title])

    def draw(self, sentence: str) -> None:
        try:
            found = {
                name: translate_with_alignment(model, self.tokenizer, sentence)
                for name, model in self.models.items()
            }
        except ValueError as problem:
            self.state = {"error": str(problem)}
            self._map.hide()
            self.show_error(self._ax, problem)
            return
        attention = found["rnn-bahdanau"]
        rows = min(len(attention["output_tokens"]), self.MAX_OUTPUT)
        weights = attention["weights"][:rows]  # (output tokens, source tokens)
        self.state = {
            "translations": {name: found[name]["translation"] for name in found},
            "weights": weights,
        }
        self._map.show(
            weights.numpy(),
            shown_tokens(attention["source_tokens"]),
            shown_tokens(attention["output_tokens"][:rows]),
        )
        self._ax.set_title(
            f"with attention:      {attention['translation']}\n"
            f"without attention: {found['rnn-bottleneck']['translation']}",
            color="black",
            fontsize=11,
            parse_math=False,
        )


def _checked_rnn_models(models: object, vocab_size: int) -> dict:
    """Chapter 08's two RNN translators by name, each with its attention setting."""
    if not isinstance(models, dict) or set(models) != set(TRANSLATORS):
        found = f"the keys {list(models)}" if isinstance(models, dict) else type(models).__name__
        raise TypeError(
            f"models must be a dict with the keys {list(TRANSLATORS)} (one RNNTranslator each), "
            f"got {found}"
        )
    for name, attention in TRANSLATORS.items():
        model = models[name]
        if not isinstance(model, RNNTranslator):
            raise TypeError(
                f"models[{name!r}] must be an RNNTranslator, got {type(model).__name__}"
            )
        if model.config.attention != attention:
            raise ValueError(
                f"models[{name!r}] must be an RNNTranslator with attention={attention}, got one "
                f"with attention={model.config.attention}"
            )
        check_vocabulary(f"models[{name!r}]", model.config.vocab_size, vocab_size)
    return dict(models)
