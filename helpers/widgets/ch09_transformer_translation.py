"""Chapter 09's explorer: the Transformer's French, a beam width, and one head's
cross-attention."""

import ipywidgets as widgets

from helpers.transformer_translation import TransformerTranslator, translate_with_attention
from helpers.transformer_translation import load_translator as load_transformer_translator
from helpers.translation import MAX_SOURCE_TOKENS, MAX_WORDS, load_tokenizer, shown_tokens
from helpers.widgets.base import (
    Dropdown,
    Explorer,
    alignment_figure,
    check_sentence,
    check_vocabulary,
)

__all__ = ["TransformerTranslationExplorer"]


class TransformerTranslationExplorer(Explorer):
    """Chapter 09: type an English sentence, pick the beam width, a decoder layer and a head;
    see the Transformer's French and where that head's cross-attention looked while writing
    each French token."""

    MAX_OUTPUT = 2 * MAX_WORDS + 6  # output tokens shown
    BEAMS = (1, 2, 4, 8)

    def __init__(self, sentence: str = "Tom has a blue car.", model=None):
        """model: a TransformerTranslator (default: the one in data/)."""
        check_sentence(sentence)
        self.tokenizer = load_tokenizer()
        if model is None:
            model = load_transformer_translator("transformer")[0]
        if not isinstance(model, TransformerTranslator):
            raise TypeError(f"model must be a TransformerTranslator, got {type(model).__name__}")
        check_vocabulary("model", model.config.src_vocab_size, self.tokenizer.get_vocab_size())
        self.model = model
        self._found = {}  # (sentence, beam) -> translate_with_attention's result
        layers, heads = self.model.config.num_layers, self.model.config.num_heads
        controls = {
            "sentence": widgets.Text(
                value=sentence,
                description="English sentence",
                placeholder=f"up to {MAX_WORDS} words",
                layout=widgets.Layout(width="45%"),
            ),
            "beam": Dropdown(options=self.BEAMS, value=4, description="beam width"),
            "layer": Dropdown(options=range(1, layers + 1), value=layers, description="layer"),
            "head": Dropdown(options=[*range(1, heads + 1), "mean"], value=1, description="head"),
        }
        figure, ax, self._map = alignment_figure(
            self.MAX_OUTPUT,
            MAX_SOURCE_TOKENS,
            "Blues",
            "cross-attention weight",
            "the encoder's output",
            "the decoder",
        )
        self._ax = ax
        super().__init__(controls, figure, [*self._map.artists, ax.title])

    def translation(self, sentence: str, beam: int) -> dict:
        key = (sentence, beam)
        if key not in self._found:
            found = translate_with_attention(self.model, self.tokenizer, sentence, beam)
            self._found = {key: found}  # only the latest: a learner moves on
        return self._found[key]

    def draw(self, sentence: str, beam: int, layer: int, head) -> None:
        try:
            found = self.translation(sentence, beam)
        except ValueError as problem:
            self.state = {"error": str(problem)}
            self._map.hide()
            self.show_error(self._ax, problem)
            return
        heads = found["cross_attention"][layer - 1]  # (heads, output tokens, source tokens)
        weights = heads.mean(0) if head == "mean" else heads[head - 1]
        rows = min(len(found["output_tokens"]), self.MAX_OUTPUT)
        self.state = {"translation": found["translation"], "weights": weights[:rows]}
        self._map.show(
            weights[:rows].numpy(),
            shown_tokens(found["source_tokens"]),
            shown_tokens(found["output_tokens"][:rows]),
        )
        which = "mean of the heads" if head == "mean" else f"head {head}"
        self._ax.set_title(
            f"{found['translation']}\nbeam {beam}, cross-attention of layer {layer}, {which}",
            color="black",
            fontsize=11,
            parse_math=False,
        )
