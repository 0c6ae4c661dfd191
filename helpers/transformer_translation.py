"""Chapter 09: chapter 07's Transformer translates chapter 08's English–French sentences.

Same data, same split, same tokenizer, same BLEU and about the same GPU time as chapter 08's
attention RNN (13 passes over the training pairs to its 16); what changes is the model and what
a Transformer's training needs: tied embeddings, label smoothing, a learning-rate warm-up, and
beam search at the end.
"""

import argparse
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from helpers import validation
from helpers.attention import KeyValueCache
from helpers.checkpoints import (
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
from helpers.transformer import (
    Seq2SeqTransformer,
    TransformerConfig,
    saved_config,
)
from helpers.translation import (
    BOS_ID,
    DATA_DIR,
    EOS_ID,
    PAD_ID,
    beam_search,
    check_beam_size,
    check_device,
    check_length_penalty,
    check_previous_ids,
    choose_hypothesis,
    decode,
    load_tokenizer,
    sentence_ids,
    train_translator,
    translate,
)


@dataclass(frozen=True)
class Recipe:
    """How the shipped models were trained (make translation-models), each with its reason."""

    d_model: int = 256  # as wide as chapter 08's RNN states
    num_heads: int = 4  # 64 dimensions per head
    num_layers: int = 3  # per stack: 3 + 3 takes under a minute per epoch on a GPU
    d_ff: int = 1024  # 4 x d_model, the paper's ratio
    dropout: float = 0.1  # the paper's base model; 160k short pairs overfit without it
    epochs: int = 13  # the GPU time of chapter 08's attention model (see data/README.md)
    max_tokens: int = 3000  # source tokens per batch: 41 to 1,000 sentences, 375 on average
    learning_rate: float = 1e-3  # the peak, reached at the end of the warm-up
    warmup_steps: int = 1000  # about 2.3 epochs (428 batches each) of rising learning rate
    weight_decay: float = 0.01  # AdamW's default
    seed: int = 0  # fixes the initial weights and the order of the batches

    def __post_init__(self):
        sizes = ("d_model", "num_heads", "num_layers", "d_ff", "epochs", "max_tokens")
        validation.coerce_fields(
            self,
            {
                **dict.fromkeys(sizes, validation.whole_number),
                "warmup_steps": validation.at_least(0),
                "dropout": validation.probability,
                "learning_rate": validation.positive_number,
                "weight_decay": validation.at_least_zero,
                "seed": validation.seed,
            },
        )


RECIPE = Recipe()
MODELS = {"transformer": 0.1, "transformer-no-smoothing": 0.0}  # name -> label smoothing
TIED_COPIES = ("tgt_embedding.tokens.weight", "output.weight")  # stored once, as the source's


class TransformerTranslator(Seq2SeqTransformer):
    """A Seq2SeqTransformer over the shared vocabulary, decoding with chapter 08's step
    interface: greedy (translation.translate) or beam search (translation.beam_search)."""

    def check_source(self, source: torch.Tensor) -> torch.Tensor:
        """Source ids (B, S) with B, S >= 1 and a token in every row (pads anywhere)."""
        self._check_tokens("source", source, self.config.src_vocab_size)
        if not source.numel():
            raise ValueError(f"source holds no tokens: shape {tuple(source.shape)}")
        empty = (~(source != self.pad_id).any(1)).nonzero()
        if len(empty):
            raise ValueError(f"source row {empty[0].item()} holds only <pad>: nothing to translate")
        return source

    def start_state(self, source: torch.Tensor) -> dict:
        return self._start_state(self.check_source(source))

    def _start_state(self, source: torch.Tensor) -> dict:
        memory, source_mask = self._encode(source.long())  # (B, S, d_model), (B, 1, S)
        caches = [KeyValueCache() for _ in self.decoder.blocks]
        return {"memory": memory, "source_mask": source_mask, "caches": caches, "step": 0}

    def decode_step(self, state: dict, previous: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """previous ids (B,) -> logits (B, V) for the next token; the caches grow by one."""
        check_previous_ids(previous, len(state["memory"]), self.output.out_features)
        return self._decode_step(state, previous)

    def _decode_step(self, state: dict, previous: torch.Tensor) -> tuple[torch.Tensor, dict]:
        newest = self.tgt_embedding(previous[:, None], start=state["step"])  # (B, 1, d_model)
        y = self.decoder(newest, state["memory"], None, state["source_mask"], state["caches"])
        return self.output(y[:, -1]), {**state, "step": state["step"] + 1}

    @staticmethod
    def select(state: dict, rows: torch.Tensor) -> dict:
        """The state of the given rows (beams), caches included, in that order."""
        if not isinstance(state, dict) or "memory" not in state:
            raise TypeError(f"state must be a dict made by start_state, got {type(state).__name__}")
        validation.token_ids(rows, "rows", len(state["memory"]), "(N,)", dim=1)
        caches = []
        for cache in state["caches"]:
            chosen = KeyValueCache()
            if cache.keys is not None:
                chosen.keys, chosen.values = cache.keys[rows], cache.values[rows]
            caches.append(chosen)
        return {
            "memory": state["memory"][rows],
            "source_mask": state["source_mask"][rows],
            "caches": caches,
            "step": state["step"],
        }

    @torch.no_grad()
    def translate_ids(
        self,
        source: torch.Tensor,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_len: int | None = None,
    ) -> torch.Tensor:
        """Source ids (B, S) -> output ids (B, <= max_len): greedy with beam_size 1 (at most
        translation.MAX_BEAM_SIZE); max_len defaults to 2 S + 5."""
        self.check_source(source)
        beam_size = check_beam_size(beam_size)
        check_length_penalty(length_penalty)
        if max_len is None:
            max_len = 2 * source.shape[1] + 5
        max_len = min(validation.whole_number(max_len, "max_len"), self.max_len)
        with evaluating(self):
            state = self._start_state(source)  # checked above, as each step's ids are made
            if beam_size == 1:
                return translate(self._decode_step, state, len(source), max_len, source.device)
            step, rows = self._decode_step, len(source)
            found = beam_search(step, state, self.select, rows, max_len, beam_size, source.device)
            return choose_hypothesis(*found, length_penalty)[0]

    @torch.no_grad()
    def log_probability(self, source: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """The model's score of whole outputs: sum of log p(token | source, earlier tokens)
        over each output's tokens up to its first <eos>. source (B, S), output (B, T) -> (B,)."""
        self.check_source(source)
        self._check_tokens("output", output, self.config.tgt_vocab_size)
        if len(output) != len(source):
            raise ValueError(f"{len(source)} sources for {len(output)} outputs")
        with evaluating(self):
            target_in = torch.cat([torch.full_like(output[:, :1], BOS_ID), output[:, :-1]], 1)
            target_in = target_in.masked_fill(target_in == EOS_ID, PAD_ID)  # nothing after <eos>
            log_probs = self(source, target_in).log_softmax(-1)  # (B, T, V)
            chosen = log_probs.gather(-1, output[..., None])[..., 0]  # (B, T)
            return chosen.masked_fill(output == PAD_ID, 0.0).double().sum(-1)


def build_translator(vocab_size: int, recipe: Recipe = RECIPE) -> TransformerTranslator:
    check_recipe(recipe)
    return TransformerTranslator(
        vocab_size,
        vocab_size,
        d_model=recipe.d_model,
        num_heads=recipe.num_heads,
        num_layers=recipe.num_layers,
        d_ff=recipe.d_ff,
        dropout=recipe.dropout,
        pad_id=PAD_ID,
        norm_first=True,
        tie_embeddings=True,
    )


def check_recipe(recipe: object) -> Recipe:
    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a Recipe, got {type(recipe).__name__}")
    return recipe


def model_path(name: str) -> Path:
    return DATA_DIR / f"{name}.pt"


def save_translator(path: str | Path, model: TransformerTranslator, history: dict) -> None:
    """Float16 weights, each tied matrix once; the configuration; the training history."""
    if not isinstance(model, TransformerTranslator):
        raise TypeError(f"model must be a TransformerTranslator, got {type(model).__name__}")
    if not isinstance(history, dict):
        raise TypeError(f"history must be a dict, got {type(history).__name__}")
    weights = {
        key: tensor.half() for key, tensor in model.state_dict().items() if key not in TIED_COPIES
    }
    save_checkpoint(path, {"config": asdict(model.config), "weights": weights, "history": history})


def load_translator(
    name: str, path: str | Path | None = None
) -> tuple[TransformerTranslator, dict]:
    """(model in eval mode, history), after the checksum, the configuration and the recipe
    (its label smoothing names the model) are checked."""
    check_name(name, MODELS)
    path = model_path(name) if path is None else as_path(path)
    saved = load_checkpoint(path, ("config", "weights", "history"), "make translation-models")
    config, history = saved["config"], saved["history"]
    known = {f.name for f in fields(TransformerConfig)}
    if not isinstance(config, dict) or set(config) - known or not config.get("tie_embeddings"):
        raise CheckpointError(f"{path}: its config is not a tied translation model's: {config}")
    smoothing = history.get("label_smoothing") if isinstance(history, dict) else None
    if smoothing != MODELS[name]:
        raise CheckpointError(
            f"{path}: its history records label smoothing {smoothing!r}, but {name} is the "
            f"model trained with {MODELS[name]}: is it another model's file?"
        )
    config = saved_config(config, path)
    weights = float_weights(saved["weights"], path)
    model = TransformerTranslator.from_config(config)
    if "src_embedding.tokens.weight" in weights:
        weights.update(dict.fromkeys(TIED_COPIES, weights["src_embedding.tokens.weight"]))
    load_weights(model, weights, path)
    return model.eval(), history


def train_and_save(
    name: str,
    recipe: Recipe = RECIPE,
    device: str | None = None,
    path: str | Path | None = None,
    deadline_minutes: float | None = None,
) -> dict:
    """Train one of MODELS with the recipe and save it after every epoch (a run stopped by its
    deadline keeps what it finished). device None: a GPU if torch sees one."""
    check_name(name, MODELS)
    check_recipe(recipe)
    device = check_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    path = model_path(name) if path is None else as_path(path)
    check_deadline(deadline_minutes)
    path = savable_path(path)  # before the epochs of training, not after the first
    tokenizer = load_tokenizer()
    torch.manual_seed(recipe.seed)
    model = build_translator(tokenizer.get_vocab_size(), recipe)

    def after_epoch(history: dict) -> bool:
        history["recipe"] = asdict(recipe)
        history["label_smoothing"] = MODELS[name]
        save_translator(path, model, history)
        late = deadline_minutes is not None and history["seconds"] > 60 * deadline_minutes
        return not late

    return train_translator(
        model,
        tokenizer,
        recipe.epochs,
        learning_rate=recipe.learning_rate,
        max_tokens=recipe.max_tokens,
        seed=recipe.seed,
        device=device,
        after_epoch=after_epoch,
        label_smoothing=MODELS[name],
        warmup_steps=recipe.warmup_steps,
        weight_decay=recipe.weight_decay,
    )


@torch.no_grad()
def translate_with_attention(
    model: TransformerTranslator, tokenizer, sentence: str, beam_size: int = 1
) -> dict:
    """One sentence's translation (greedy or beam), its tokens, and the cross-attention of
    every layer and head while it was written: (layers, heads, output tokens, source tokens).

    The weights come from one teacher-forced pass over the model's own output, which computes
    exactly what the cached decoding computed, one row per output token."""
    if not isinstance(model, TransformerTranslator):
        raise TypeError(f"model must be a TransformerTranslator, got {type(model).__name__}")
    device = next(model.parameters()).device
    source = sentence_ids(tokenizer, sentence).to(device)  # (1, S)
    output = model.translate_ids(source, beam_size)  # (1, steps)
    output = output[:, : int((output != PAD_ID).sum())]
    target_in = torch.cat([torch.full_like(output[:, :1], BOS_ID), output[:, :-1]], 1)
    model(source, target_in)
    cross = model.attention_maps()["cross-attention"]  # layers x (1, heads, T, S)
    return {
        "translation": decode(tokenizer, output.cpu())[0],
        "source_tokens": [tokenizer.id_to_token(i) for i in source[0].tolist()],
        "output_tokens": [tokenizer.id_to_token(i) for i in output[0].tolist()],
        "cross_attention": torch.stack([weights[0] for weights in cross]).cpu(),
    }


def main() -> None:
    """python -m helpers.transformer_translation NAME: train the named model with its recipe
    and save it in data/ (make translation-models runs it for each)."""
    parser = argparse.ArgumentParser(description="Train the named model and save it in data/.")
    parser.add_argument("name", choices=list(MODELS))
    train_and_save(parser.parse_args().name)


if __name__ == "__main__":
    main()
