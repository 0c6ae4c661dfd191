"""Chapter 08: an RNN encoder–decoder for translation, with and without Bahdanau attention.

Both models share everything but what the decoder sees of the source: the bottleneck model
sees one fixed vector (the encoder's last states), the attention model a new weighted average
of all the encoder's states at every step (Bahdanau, Cho and Bengio, 2015).
"""

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from helpers import validation
from helpers.attention import AdditiveAttention
from helpers.checkpoints import (
    MAX_CHECKPOINT_PARAMETERS,
    CheckpointError,
    as_path,
    check_name,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
)
from helpers.contexts import evaluating
from helpers.training import check_deadline
from helpers.translation import (
    DATA_DIR,
    PAD_ID,
    SPECIALS,
    check_device,
    check_previous_ids,
    decode,
    load_tokenizer,
    sentence_ids,
    train_translator,
    translate,
)

RECIPE_EPOCHS = 16  # Adam 1e-3, batches of about 2,000 source tokens, dropout 0.2


@dataclass(frozen=True)
class RNNConfig:
    vocab_size: int  # one BPE vocabulary shared by English and French
    embed_size: int = 256  # also the output layer's width: its weights are the embeddings'
    hidden_size: int = 256  # each direction of the encoder, and the decoder
    dropout: float = 0.2  # on embeddings and before the output layer: 160k pairs overfit
    attention: bool = True  # False: the decoder sees only the encoder's last states

    def __post_init__(self):
        validation.coerce_fields(
            self,
            {
                "vocab_size": validation.at_least(len(SPECIALS)),  # <pad> <bos> <eos> <unk>
                "embed_size": validation.whole_number,
                "hidden_size": validation.whole_number,
                "dropout": validation.probability,
                "attention": validation.flag,
            },
        )


class Encoder(nn.Module):
    """A bidirectional GRU: embedded source (B, S, e) and lengths (B,) -> states (B, S, 2h)
    and a summary (B, 2h), the last state of each direction."""

    def __init__(self, config: RNNConfig):
        super().__init__()
        self.gru = nn.GRU(
            config.embed_size, config.hidden_size, batch_first=True, bidirectional=True
        )

    def forward(
        self, embedded: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        packed = nn.utils.rnn.pack_padded_sequence(
            embedded, lengths.cpu(), batch_first=True, enforce_sorted=False
        )
        states, last = self.gru(packed)  # last: (2, B, h), each direction after its last token
        states, _ = nn.utils.rnn.pad_packed_sequence(
            states, batch_first=True, total_length=embedded.shape[1]
        )  # (B, S, 2h), zeros at the pads
        return states, torch.cat([last[0], last[1]], dim=-1)  # (B, S, 2h), (B, 2h)


class RNNTranslator(nn.Module):
    """forward(source (B, S), target_in (B, T)) -> logits (B, T, V), teacher-forced."""

    def __init__(self, config: RNNConfig):
        if not isinstance(config, RNNConfig):
            raise TypeError(f"config must be an RNNConfig, got {type(config).__name__}")
        super().__init__()
        self.config = config
        e, h = config.embed_size, config.hidden_size
        self.embedding = nn.Embedding(config.vocab_size, e, padding_idx=PAD_ID)
        nn.init.normal_(self.embedding.weight, std=e**-0.5)  # logits start near 0: loss ln(V)
        self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.encoder = Encoder(config)
        self.init_state = nn.Linear(2 * h, h)
        self.attention = AdditiveAttention(key_size=2 * h, query_size=h, num_hiddens=h)
        self.cell = nn.GRUCell(e + 2 * h, h)
        self.pre_output = nn.Linear(h + 2 * h + e, e)
        self.dropout = nn.Dropout(config.dropout)
        self.attention_weights: list[torch.Tensor] = []

    def check_source(self, source: torch.Tensor) -> torch.Tensor:
        """Source ids (B, S), B and S >= 1, every row padded on the right only, with a token."""
        validation.token_ids(source, "source", self.config.vocab_size, "(B, S)")
        if not source.numel():
            raise ValueError(f"source holds no tokens: shape {tuple(source.shape)}")
        real = source != PAD_ID  # (B, S)
        empty = (~real.any(1)).nonzero()
        if len(empty):
            raise ValueError(f"source row {empty[0].item()} holds only <pad>: nothing to translate")
        left = (real[:, 1:] & ~real[:, :-1]).any(1).nonzero()  # a token right after a pad
        if len(left):
            raise ValueError(
                f"source row {left[0].item()} has a <pad> before a token: the RNN reads each row "
                f"up to its length, so pads must come last (right padding, as encode makes it)"
            )
        return source

    def encode(self, source: torch.Tensor) -> dict:
        self.check_source(source)
        return self._encode(source)

    def _encode(self, source: torch.Tensor) -> dict:
        lengths = (source != PAD_ID).sum(1)  # (B,)
        states, summary = self.encoder(self.dropout(self.embedding(source)), lengths)
        return {
            "states": states,  # (B, S, 2h)
            "summary": summary,  # (B, 2h)
            "lengths": lengths,
            "hidden": torch.tanh(self.init_state(summary)),  # (B, h)
        }

    def context(self, memory: dict) -> torch.Tensor:
        """What the decoder sees of the source at this step: (B, 2h)."""
        if not self.config.attention:
            return memory["summary"]
        query = memory["hidden"].unsqueeze(1)  # (B, 1, h): the previous decoder state
        context = self.attention(query, memory["states"], memory["states"], memory["lengths"])
        self.attention_weights.append(self.attention.attention_weights[:, 0])  # (B, S)
        return context.squeeze(1)  # (B, 2h)

    def decode_step(self, memory: dict, previous: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """One step: previous ids (B,) -> logits (B, V) and the memory with the new state."""
        check_previous_ids(previous, len(memory["hidden"]), self.embedding.num_embeddings)
        return self._decode_step(memory, previous)

    def _decode_step(self, memory: dict, previous: torch.Tensor) -> tuple[torch.Tensor, dict]:
        embedded = self.dropout(self.embedding(previous))  # (B, e)
        context = self.context(memory)  # (B, 2h)
        hidden = self.cell(torch.cat([embedded, context], -1), memory["hidden"])  # (B, h)
        features = torch.tanh(self.pre_output(torch.cat([hidden, context, embedded], -1)))
        logits = self.dropout(features) @ self.embedding.weight.T + self.output_bias  # (B, V)
        return logits, {**memory, "hidden": hidden}

    def forward(self, source: torch.Tensor, target_in: torch.Tensor) -> torch.Tensor:
        self.check_source(source)
        _check_target_in(target_in, source, self.config.vocab_size)
        self.attention_weights = []
        memory = self._encode(source)
        logits = []
        for t in range(target_in.shape[1]):
            step_logits, memory = self._decode_step(memory, target_in[:, t])
            logits.append(step_logits)
        return torch.stack(logits, 1)  # (B, T, V)

    @torch.no_grad()
    def translate_ids(self, source: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
        """Greedy translation of source ids (B, S), padded on the right -> ids (B, <= max_len);
        max_len defaults to 2 S + 5."""
        max_len = None if max_len is None else validation.whole_number(max_len, "max_len")
        with evaluating(self):
            self.attention_weights = []
            memory = self.encode(source)  # checks the source
            steps = 2 * source.shape[1] + 5 if max_len is None else max_len
            return translate(self._decode_step, memory, len(source), steps, source.device)


MODELS = {"rnn-bottleneck": False, "rnn-bahdanau": True}  # name -> attention


def model_path(name: str) -> Path:
    return DATA_DIR / f"{name}.pt"


def save_translator(path: str | Path, model: RNNTranslator, history: dict) -> None:
    """Float16 weights (half the bytes), the configuration and the training history."""
    if not isinstance(model, RNNTranslator):
        raise TypeError(f"model must be an RNNTranslator, got {type(model).__name__}")
    if not isinstance(history, dict):
        raise TypeError(f"history must be a dict, got {type(history).__name__}")
    weights = {key: tensor.half() for key, tensor in model.state_dict().items()}
    save_checkpoint(path, {"config": asdict(model.config), "weights": weights, "history": history})


def load_translator(name: str, path: str | Path | None = None) -> tuple[RNNTranslator, dict]:
    """(model in eval mode, history), after the checksum and the configuration are checked."""
    check_name(name, MODELS)
    path = model_path(name) if path is None else as_path(path)
    saved = load_checkpoint(path, ("config", "weights", "history"), "make translation-models")
    if not isinstance(saved["config"], dict):
        raise CheckpointError(f"{path}: its config is not an RNNConfig: {saved['config']!r}")
    try:
        config = RNNConfig(**saved["config"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: its config is not an RNNConfig ({error})") from None
    if config.attention != MODELS[name]:
        raise CheckpointError(f"{path}: attention={config.attention}, expected {MODELS[name]}")
    if not isinstance(saved["history"], dict):
        raise CheckpointError(f"{path}: its history should be a dict, found {saved['history']!r}")
    weights = float_weights(saved["weights"], path)
    with torch.device("meta"):  # sizes only: nothing is allocated
        parameters = sum(p.numel() for p in RNNTranslator(config).parameters())
    if parameters > MAX_CHECKPOINT_PARAMETERS:
        raise CheckpointError(
            f"{path}: its config asks for {parameters:,} parameters, more than a checkpoint of "
            f"at most 16 MB in float16 can hold ({MAX_CHECKPOINT_PARAMETERS:,})"
        )
    model = RNNTranslator(config)
    load_weights(model, weights, path)
    return model.eval(), saved["history"]


def train_and_save(
    name: str,
    epochs: int = RECIPE_EPOCHS,
    device: str | None = None,
    path: str | Path | None = None,
    deadline_minutes: float | None = None,
) -> dict:
    """Train one of MODELS with the chapter's recipe and save it (after every epoch, so a run
    stopped by its deadline keeps what it finished). device None: a GPU if torch sees one."""
    check_name(name, MODELS)
    epochs = validation.whole_number(epochs, "epochs")
    device = check_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    path = model_path(name) if path is None else as_path(path)
    check_deadline(deadline_minutes)
    path = savable_path(path)  # before the epochs of training, not after the first
    tokenizer = load_tokenizer()
    torch.manual_seed(0)  # the recipe's seed fixes the initial weights too
    model = RNNTranslator(RNNConfig(tokenizer.get_vocab_size(), attention=MODELS[name]))

    def after_epoch(history: dict) -> bool:
        save_translator(path, model, history)
        late = deadline_minutes is not None and history["seconds"] > 60 * deadline_minutes
        return not late

    return train_translator(model, tokenizer, epochs, device=device, after_epoch=after_epoch)


@torch.no_grad()
def translate_with_alignment(model: RNNTranslator, tokenizer, sentence: str) -> dict:
    """One sentence's greedy translation, its tokens, and (attention model) the weights
    (output tokens, source tokens) that each output token gave each source token."""
    if not isinstance(model, RNNTranslator):
        raise TypeError(f"model must be an RNNTranslator, got {type(model).__name__}")
    source = sentence_ids(tokenizer, sentence)  # (1, S)
    output = model.translate_ids(source)[0]  # (steps,)
    steps = int((output != PAD_ID).sum())
    weights = (
        torch.stack(model.attention_weights, 1)[0, :steps] if model.attention_weights else None
    )
    return {
        "translation": decode(tokenizer, output[None])[0],
        "source_tokens": [tokenizer.id_to_token(i) for i in source[0].tolist()],
        "output_tokens": [tokenizer.id_to_token(i) for i in output[:steps].tolist()],
        "weights": weights,  # (steps, S) or None
    }


def main() -> None:
    """python -m helpers.bahdanau NAME: train the named model with its recipe and save it
    in data/ (make translation-models runs it for each)."""
    parser = argparse.ArgumentParser(description="Train the named model and save it in data/.")
    parser.add_argument("name", choices=list(MODELS))
    train_and_save(parser.parse_args().name)


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_target_in(target_in: object, source: torch.Tensor, vocab_size: int) -> None:
    validation.token_ids(target_in, "target_in", vocab_size, "(B, T)")
    if len(target_in) != len(source) or not target_in.shape[1]:
        raise ValueError(
            f"target_in must be (B, T) with T >= 1 for source (B, S) = "
            f"{tuple(source.shape)}, got {tuple(target_in.shape)}"
        )


if __name__ == "__main__":
    main()
