"""Chapter 15: an encoder-only model, pre-trained by filling in blanks, then fine-tuned.

The encoder is chapter 07's stack of EncoderBlocks over chapter 08's sentences and tokenizer,
which gains three tokens: [CLS] opens every sequence (its output stands for the whole input),
[SEP] closes each sentence, [MASK] hides a token to be guessed.

- mask_tokens: BERT's masking. 15% of the positions (never a pad or a special token) are
  chosen; 80% of them become [MASK], 10% a random token, 10% stay; the loss is only there.
- TextEncoder(config): token, position and segment embeddings, pre-norm EncoderBlocks, a final
  LayerNorm, and an output layer tied to the token embedding. With config.causal it is the
  left-to-right twin: the same weights' shapes, and a causal mask on top of the padding mask.
- pretrain: the masked-language model (or, for the twin, next-token prediction) on the
  training split's sentences, English and French.

Training runs seeded on one thread; evaluations compute in float64, so the numbers they print
are the same on any thread count.
"""

import argparse
import contextlib
import copy
import dataclasses
import numbers
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn
from tqdm.auto import tqdm

from helpers import validation
from helpers.checkpoints import (
    CheckpointError,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
)
from helpers.contexts import keeping_random_state, one_torch_thread, trainable_float32
from helpers.masks import _causal_padding_mask, _padding_mask
from helpers.training import _adamw_with_schedule, _clipped_step
from helpers.transformer import EncoderBlock
from helpers.translation import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    check_text,
    check_tokenizer,
    clean,
    load_pairs,
    load_tokenizer,
)

CLS, SEP, MASK = "[CLS]", "[SEP]", "[MASK]"
ENCODER_TOKENS = (CLS, SEP, MASK)  # ids 8,000, 8,001 and 8,002 after chapter 08's 8,000
CLS_ID, SEP_ID, MASK_ID = 8000, 8001, 8002  # what add_encoder_tokens gives chapter 08's tokenizer
VOCAB_SIZE = 8003
LONGEST_SENTENCE_ROW = 38  # [CLS] pieces [SEP] of the longest sentence of chapter 08's data
LONGEST_PAIR_ROW = 69  # [CLS] English [SEP] French [SEP] of its longest pair
IGNORE = -100  # a target F.cross_entropy skips (its ignore_index)
DATA_DIR = Path(__file__).resolve().parents[1] / "data"
SAVED_PRETRAINED = DATA_DIR / "encoder_only_pretrained.pt"
REMAKE = "make encoder-only-models"


# 1. Three tokens more, and BERT's masking


def add_encoder_tokens(tokenizer: Tokenizer) -> dict[str, int]:
    """Give the tokenizer [CLS], [SEP] and [MASK] (the next free ids) without retraining it:
    every other id stays the same. Returns {token: id}. Chapter 08's shared copy
    (load_tokenizer()) is refused: every later caller would get the three tokens too."""
    check_tokenizer(tokenizer)
    if tokenizer is load_tokenizer():
        raise ValueError(
            "tokenizer is chapter 08's shared copy (load_tokenizer()): adding tokens to it would "
            "change it for every caller; pass a copy (load_encoder_tokenizer() makes one)"
        )
    tokenizer.add_special_tokens(list(ENCODER_TOKENS))
    return {token: tokenizer.token_to_id(token) for token in ENCODER_TOKENS}


def load_encoder_tokenizer() -> tuple[Tokenizer, dict[str, int]]:
    """A fresh copy of chapter 08's tokenizer with the encoder's three tokens, and their ids."""
    tokenizer = Tokenizer.from_str(load_tokenizer().to_str())
    return tokenizer, add_encoder_tokens(tokenizer)


def mask_tokens(
    ids: torch.Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids,
    rate: float = 0.15,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking: (inputs, targets), both (B, n) like ids, which stay as they were. Each
    position whose id is not in special_ids is chosen with probability `rate`; its target is its
    id (every other target is IGNORE, -100). A chosen input becomes mask_id with probability
    0.8, a random id of range(vocab_size) outside special_ids with probability 0.1, and stays
    with probability 0.1. Three draws from the generator, in this order: which positions, which
    of the three fates, which random ids."""
    mask_id, vocab_size, special, rate = _check_masking(
        ids, mask_id, vocab_size, special_ids, rate, generator
    )
    return _mask_tokens(ids, mask_id, vocab_size, special, rate, generator)


def _mask_tokens(ids, mask_id, vocab_size, special, rate, generator):
    maskable = ~torch.isin(ids, special)  # (B, n): no pad, no special token
    chosen = (torch.rand(ids.shape, generator=generator) < rate) & maskable
    fate = torch.rand(ids.shape, generator=generator)  # < 0.8 [MASK], < 0.9 random, else kept
    ordinary = torch.ones(vocab_size, dtype=torch.bool)
    ordinary[special[special < vocab_size]] = False
    ordinary = ordinary.nonzero()[:, 0]  # (V - specials,): the ids a random token may take
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator)]
    inputs = torch.where(chosen & (fate < 0.8), mask_id, ids)
    inputs = torch.where(chosen & (fate >= 0.8) & (fate < 0.9), random_ids, inputs)
    targets = torch.where(chosen, ids, IGNORE)
    return inputs.to(ids.dtype), targets


def whole_word_mask(
    ids: torch.Tensor, word_ids: torch.Tensor, mask_id: int, rate: float = 0.15, seed: int = 0
) -> torch.Tensor:
    """Whole-word masking: ids (B, n) with every piece of each chosen word replaced by mask_id.
    word_ids (B, n): the word each position belongs to, 0, 1, 2, ... within its row, and -1 for
    [CLS], [SEP] and pads. One draw, torch.rand((B, words)) from a generator seeded with seed
    (words = word_ids.max() + 1, at least 1): word w of row b is chosen where it is below rate."""
    seed = _check_word_masking(ids, word_ids, mask_id, rate, seed)
    generator = torch.Generator().manual_seed(seed)
    words = max(int(word_ids.max()) + 1, 1) if word_ids.numel() else 1
    chosen = torch.rand((len(ids), words), generator=generator) < rate  # (B, words)
    hidden = chosen.gather(1, word_ids.clamp(min=0)) & (word_ids >= 0)  # (B, n)
    return ids.masked_fill(hidden, mask_id)


def segment_ids(ids: torch.Tensor, sep_id: int, pad_id: int = PAD_ID) -> torch.Tensor:
    """(B, n) long for rows [CLS] first [SEP] second [SEP] <pad> ...: 0 up to and including the
    first [SEP], 1 after it, and 0 on the pads."""
    _check_segment_ids(ids, sep_id, pad_id)
    return _segment_ids(ids, sep_id, pad_id)


def _segment_ids(ids: torch.Tensor, sep_id: int, pad_id: int) -> torch.Tensor:
    seps_before = (ids == sep_id).long().cumsum(1) - (ids == sep_id).long()  # (B, n)
    return ((seps_before >= 1) & (ids != pad_id)).long()


def token_classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy over the labelled positions only: logits (B, n, classes), labels
    (B, n) class indices, IGNORE (-100) where a position carries no label (pads, [CLS], [SEP],
    a word's later pieces). A pad never counts, however many a batch holds."""
    _check_token_labels(logits, labels)
    return F.cross_entropy(logits.transpose(1, 2), labels.long(), ignore_index=IGNORE)


# 2. The encoder, and its left-to-right twin


@dataclass(frozen=True)
class EncoderConfig:
    """The encoder's sizes, each with its reason."""

    vocab_size: int = 8003  # chapter 08's 8,000 pieces, then [CLS], [SEP], [MASK]
    max_len: int = 80  # positions: the longest training pair, [CLS] en [SEP] fr [SEP], has 75
    d_model: int = 128  # 2.9 M parameters in all: a pre-training step takes ~0.2 s on a laptop
    num_heads: int = 4  # 32 dimensions per head
    num_layers: int = 4
    d_ff: int = 512  # 4 x d_model, as chapter 07
    dropout: float = 0.1  # BERT's
    causal: bool = False  # True: each position sees itself and those before it, nothing after

    def __post_init__(self):
        sizes = ("vocab_size", "max_len", "d_model", "num_heads", "num_layers", "d_ff")
        validation.coerce_fields(
            self,
            {
                **dict.fromkeys(sizes, validation.recipe_size),
                "num_layers": validation.layer_count,
                "dropout": validation.probability,
                "causal": validation.flag,
            },
        )
        validation.head_size(self.d_model, self.num_heads)
        validation.layer_weights(self.vocab_size, self.d_model, "vocab_size and d_model")
        validation.layer_weights(self.max_len, self.d_model, "max_len and d_model")
        validation.layer_weights(self.d_model, self.d_ff, "d_model and d_ff")


ENCODER = EncoderConfig()


class TextEncoder(nn.Module):
    """ids (B, n), segments (B, n) of 0 and 1 (None: all 0, one sentence) -> features
    (B, n, d_model). A pad
    (id 0) is never attended to; with config.causal, nor is any later position."""

    def __init__(self, config: EncoderConfig):
        super().__init__()
        self.config = _check_config(config)
        d = config.d_model
        self.tokens = nn.Embedding(config.vocab_size, d)
        self.positions = nn.Embedding(config.max_len, d)
        self.segments = nn.Embedding(2, d)  # which sentence of a pair a token belongs to
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(
            EncoderBlock(d, config.num_heads, config.d_ff, config.dropout)
            for _ in range(config.num_layers)
        )
        self.norm = nn.LayerNorm(d)  # pre-norm blocks leave the stream un-normalised
        self.output = nn.Linear(d, config.vocab_size, bias=False)
        self.output.weight = self.tokens.weight  # tied: one matrix reads and writes tokens
        for table in (self.tokens, self.positions, self.segments):
            nn.init.normal_(table.weight, std=0.02)  # BERT's: N(0, 1) rows make huge logits

    def forward(self, ids: torch.Tensor, segments: torch.Tensor | None = None) -> torch.Tensor:
        self._check_ids(ids, segments)
        return self._features(ids, segments)

    def _features(self, ids: torch.Tensor, segments: torch.Tensor | None) -> torch.Tensor:
        n = ids.shape[1]
        x = self.tokens(ids) + self.positions.weight[:n]  # (B, n, d_model)
        x = x + (self.segments.weight[0] if segments is None else self.segments(segments))
        x = self.dropout(x)
        mask = self._attention_mask(ids)  # (B, 1, n) or (B, n, n), True where allowed
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)

    def attention_mask(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, 1, n): every query may read every key that is not a pad; causal: (B, n, n),
        and only the keys at or before it."""
        _check_ids(ids, self.config, "ids")
        return self._attention_mask(ids)

    def _attention_mask(self, ids: torch.Tensor) -> torch.Tensor:
        if self.config.causal:
            return _causal_padding_mask(ids, PAD_ID)  # (B, n, n): chapter 06's decoder mask
        return _padding_mask(ids, PAD_ID)  # (B, 1, n): chapter 06's encoder mask

    def _check_ids(self, ids: object, segments: object) -> None:
        _check_ids(ids, self.config, "ids")
        if segments is not None:
            validation.token_ids(segments, "segments", 2, "(B, n) of 0 and 1")
            if segments.shape != ids.shape:
                raise ValueError(
                    f"segments must have the shape of ids {tuple(ids.shape)}, got "
                    f"{tuple(segments.shape)}"
                )


def sentence_rows(
    tokenizer: Tokenizer, sentences: list[str], ids: dict[str, int]
) -> list[list[int]]:
    """[CLS] pieces [SEP] for each sentence (cleaned as chapter 08 cleans it)."""
    check_tokenizer(tokenizer)
    _check_token_ids(ids)
    sentences = _check_texts(sentences, "sentences")
    encoded = tokenizer.encode_batch([clean(sentence) for sentence in sentences])
    return [[ids[CLS], *encoding.ids, ids[SEP]] for encoding in encoded]


def padded(rows: list[list[int]]) -> torch.Tensor:
    """Rows of ids as one (B, longest) tensor, <pad> on the right."""
    _check_rows(rows, None)
    return _padded(rows)


def _padded(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([[*row, *[PAD_ID] * (width - len(row))] for row in rows])


# 3. Pre-training


def _coerce_recipe(recipe) -> None:
    """A pre-training or fine-tuning recipe's fields checked and stored as their kinds: AdamW's
    rates as floats, counts as ints (warm-up may be 0), the seed below 2^32. Above the recipes,
    not with the checks: the recipes below are made at import."""
    learning_rate, weight_decay = validation.adamw_rates(recipe.learning_rate, recipe.weight_decay)
    object.__setattr__(recipe, "learning_rate", learning_rate)
    object.__setattr__(recipe, "weight_decay", weight_decay)
    kinds = {
        "steps": validation.recipe_size,
        "batch_size": validation.recipe_size,
        "warmup_steps": lambda value, name: validation.whole_number(value, name, minimum=0),
        "log_every": validation.recipe_size,
        "seed": validation.seed,
    }  # in the fields' order
    names = [field.name for field in dataclasses.fields(recipe)]
    validation.coerce_fields(recipe, {name: kind for name, kind in kinds.items() if name in names})


@dataclass(frozen=True)
class PretrainRecipe:
    """How the two shipped models were pre-trained (make encoder-only-models)."""

    steps: int = 4000  # ~2 passes over the 264 k distinct sentences; ~20 minutes on one core
    batch_size: int = 128  # sentences per step
    learning_rate: float = 1e-3  # a small pre-norm model takes a large step
    warmup_steps: int = 300  # then a cosine decay to 5%
    weight_decay: float = 0.01
    log_every: int = 100
    seed: int = 0

    def __post_init__(self):
        _coerce_recipe(self)


PRETRAIN = PretrainRecipe()
PAIR_PRETRAIN = PretrainRecipe(  # a continuation: longer rows, so half the batch, a gentler rate
    steps=4000, batch_size=64, learning_rate=5e-4, warmup_steps=200
)
SPECIAL_IDS = (PAD_ID, BOS_ID, EOS_ID, UNK_ID)  # and the encoder's three tokens


def pretraining_sentences(split: str = "train") -> list[str]:
    """The split's distinct English and French sentences, English first, in their order."""
    pairs = load_pairs(split)
    return list(dict.fromkeys([english for english, _ in pairs] + [french for _, french in pairs]))


def masked_lm_loss(model: TextEncoder, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy at the chosen positions only (targets != IGNORE): only they go through the
    8,003-way output layer."""
    _check_model(model, "model", causal=False)
    _check_ids(inputs, model.config, "inputs")
    _check_targets(targets, tuple(inputs.shape), model.config.vocab_size, "targets")
    return _masked_lm_loss(model, inputs.long(), targets.long())


def _masked_lm_loss(
    model: TextEncoder,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    segments: torch.Tensor | None = None,
) -> torch.Tensor:
    features = model._features(inputs, segments)  # (B, n, d_model)
    chosen = targets != IGNORE  # (B, n)
    return F.cross_entropy(model.output(features[chosen]), targets[chosen])


def next_token_loss(model: TextEncoder, ids: torch.Tensor) -> torch.Tensor:
    """The causal twin's loss: position t predicts token t + 1, the pads skipped."""
    _check_model(model, "model", causal=True)
    _check_ids(ids, model.config, "ids")
    if ids.shape[1] < 2 or not (ids[:, 1:] != PAD_ID).any():
        raise ValueError("ids must hold a token after the first one to predict, past the pads")
    return _next_token_loss(model, ids.long())


def _next_token_loss(model: TextEncoder, ids: torch.Tensor) -> torch.Tensor:
    features = model._features(ids[:, :-1], None)  # (B, n - 1, d_model)
    targets = ids[:, 1:]  # (B, n - 1)
    scored = targets != PAD_ID
    return F.cross_entropy(model.output(features[scored]), targets[scored])


def pretrain(config: EncoderConfig, recipe: PretrainRecipe = PRETRAIN, progress: bool = True):
    """Pre-train a TextEncoder on the training sentences: the masked-language model, or, with
    config.causal, next-token prediction. Returns {"model" (eval mode), "log": {"step", "loss"},
    "seconds"}. Seeded, on one thread: a rerun on the same machine is bit-identical."""
    config = _check_config(config)
    _check_readable(config, LONGEST_SENTENCE_ROW, "a training sentence")
    recipe = _check_recipe(recipe, PretrainRecipe)
    progress = validation.flag(progress, "progress")
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        return _pretrain(config, recipe, progress)


def _pretrain(config: EncoderConfig, recipe: PretrainRecipe, progress: bool) -> dict:
    tokenizer, ids = load_encoder_tokenizer()
    rows = sentence_rows(tokenizer, pretraining_sentences(), ids)
    torch.manual_seed(recipe.seed)
    model = TextEncoder(config).train()
    name = "causal" if config.causal else "masked"
    return _train_encoder(model, rows, None, recipe, progress, name)


def pretrain_on_pairs(
    encoder: TextEncoder, recipe: PretrainRecipe = PAIR_PRETRAIN, progress: bool = True
) -> dict:
    """Go on pre-training a copy of the encoder by filling in blanks, now in the training
    split's sentence pairs, [CLS] English [SEP] French [SEP] with their segments, masked across
    both (XLM's translation language modelling): a hidden French word may be read off its
    English translation. No label of the pair task is used: every pair is a translation.
    Returns {"model", "log", "seconds"}, as pretrain."""
    _check_model(encoder, "encoder", causal=False)
    _check_readable(encoder.config, LONGEST_PAIR_ROW, "a training pair")
    recipe = _check_recipe(recipe, PretrainRecipe)
    progress = validation.flag(progress, "progress")
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        tokenizer, ids = load_encoder_tokenizer()
        pairs = list(dict.fromkeys(load_pairs("train")))
        made = _pair_rows(tokenizer, ids, pairs)
        torch.manual_seed(recipe.seed)
        model = copy.deepcopy(encoder).train()
        rows, segments = [row for row, _ in made], [segment for _, segment in made]
        return _train_encoder(model, rows, segments, recipe, progress, "pairs")


def _train_encoder(model, rows, segments, recipe, progress, name) -> dict:
    """The pre-training loop: rows (and their segments, or None) in a new seeded order each
    pass, masked (or, for the causal twin, read left to right) batch by batch."""
    tokenizer_ids = {CLS: CLS_ID, SEP: SEP_ID, MASK: MASK_ID}
    special = torch.tensor([*SPECIAL_IDS, *tokenizer_ids.values()])
    config = model.config
    optimizer, schedule = _adamw_with_schedule(model, recipe)
    generator = torch.Generator().manual_seed(recipe.seed)
    order = torch.randperm(len(rows), generator=generator)
    log, start, seen = {"step": [], "loss": []}, time.perf_counter(), 0
    for step in tqdm(range(1, recipe.steps + 1), desc=name, disable=not progress):
        if seen + recipe.batch_size > len(order):  # a new epoch, in a new order
            order, seen = torch.randperm(len(rows), generator=generator), 0
        chosen = order[seen : seen + recipe.batch_size].tolist()
        batch = _padded([rows[i] for i in chosen])
        batch_segments = None if segments is None else _padded([segments[i] for i in chosen])
        seen += recipe.batch_size
        if config.causal:
            loss = _next_token_loss(model, batch)
        else:
            inputs, targets = _mask_tokens(
                batch, MASK_ID, config.vocab_size, special, 0.15, generator
            )
            loss = _masked_lm_loss(model, inputs, targets, batch_segments)
        _clipped_step(model, optimizer, schedule, loss)
        if step % recipe.log_every == 0 or step == recipe.steps:
            log["step"].append(step)
            log["loss"].append(loss.item())
    return {"model": model.eval(), "log": log, "seconds": time.perf_counter() - start}


# 3b. What the pre-trained models know


@torch.no_grad()
def fill_in(model: TextEncoder, rows: list[list[int]], positions: list[int], k: int = 5):
    """The model's k most likely tokens at one position of each row, computed in float64:
    (ids (B, k), probabilities (B, k)). The encoder reads the row with [MASK] there and sees
    both sides; the causal twin reads the row as it is and guesses from the positions before.
    A position must hold a piece of the sentence: 1..len(row) - 2, not [CLS] or [SEP]."""
    _check_model(model, "model")
    _check_rows(rows, model.config)
    _check_positions(positions, rows)
    k = validation.whole_number(k, "k")
    if k > model.config.vocab_size:
        raise ValueError(f"k must be at most the vocabulary's {model.config.vocab_size}, got {k}")
    return _fill_in(copy.deepcopy(model).double().eval(), rows, positions, k)


def _fill_in(copy64: TextEncoder, rows, positions, k):
    ids = _padded(rows)  # (B, n)
    where = torch.tensor(positions)  # (B,)
    rows_index = torch.arange(len(rows))
    if copy64.config.causal:
        features = copy64._features(ids, None)[rows_index, where - 1]  # (B, d_model)
    else:
        masked = ids.clone()
        masked[rows_index, where] = MASK_ID
        features = copy64._features(masked, None)[rows_index, where]
    probabilities = copy64.output(features).softmax(-1)  # (B, vocab)
    top = probabilities.topk(k, dim=-1)
    return top.indices, top.values


def masked_token_accuracy(
    model: TextEncoder, rows: list[list[int]], seed: int = 0, batch_size: int = 500
) -> float:
    """The share of the positions mask_tokens replaced by [MASK] (rate 0.15, a generator seeded
    with `seed`) whose token the encoder's top guess recovers, computed in float64."""
    _check_model(model, "model", causal=False)
    _check_rows(rows, model.config)
    seed = validation.seed(seed)
    batch_size = validation.recipe_size(batch_size, "batch_size")
    copy64 = copy.deepcopy(model).double().eval()
    generator = torch.Generator().manual_seed(seed)
    special = torch.tensor(SPECIAL_IDS + (CLS_ID, SEP_ID, MASK_ID))
    right = total = 0
    with torch.no_grad():
        for start in range(0, len(rows), batch_size):
            ids = _padded(rows[start : start + batch_size])
            inputs, targets = _mask_tokens(ids, MASK_ID, VOCAB_SIZE, special, 0.15, generator)
            hidden = inputs == MASK_ID  # (B, n): the positions the model cannot see
            guesses = copy64.output(copy64._features(inputs, None)[hidden]).argmax(-1)
            right += (guesses == targets[hidden]).sum().item()
            total += hidden.sum().item()
    if not total:
        raise ValueError("the rows are too few or too short: the masking hid no token to guess")
    return right / total


POSITION_BINS = ("start", "middle", "end")  # a sentence's first, middle and last third


def recovery_by_position(
    masked: TextEncoder, causal: TextEncoder, rows: list[list[int]]
) -> dict[str, dict[str, float]]:
    """Hide each token of each row in turn ([CLS] and [SEP] excepted) and ask both models for it:
    {"both ways" | "left only": {bin: accuracy}} by where the token sits in its sentence (its
    index among the sentence's tokens, in thirds), plus "count" {bin: how many tokens}."""
    _check_model(masked, "masked", causal=False)
    _check_model(causal, "causal", causal=True)
    _check_rows(rows, masked.config)
    _check_rows(rows, causal.config)
    copies = {
        name: copy.deepcopy(m).double().eval()
        for name, m in (("both ways", masked), ("left only", causal))
    }
    cases = [(row, t) for row in rows for t in range(1, len(row) - 1)]
    records = {"both ways": [], "left only": []}
    for start in range(0, len(cases), 1000):
        chunk = cases[start : start + 1000]
        for name, copy64 in copies.items():
            guesses, _ = _fill_in(copy64, [row for row, _ in chunk], [t for _, t in chunk], 1)
            truth = torch.tensor([row[t] for row, t in chunk])
            records[name] += (guesses[:, 0] == truth).tolist()
    bins = [POSITION_BINS[min(2, 3 * (t - 1) // (len(row) - 2))] for row, t in cases]
    if not all(bins.count(b) for b in POSITION_BINS):
        raise ValueError("rows must hold tokens near the start, in the middle and near the end")
    result = {"count": {b: bins.count(b) for b in POSITION_BINS}}
    for name, right in records.items():
        result[name] = {
            b: sum(r for r, where in zip(right, bins, strict=True) if where == b) / bins.count(b)
            for b in POSITION_BINS
        }
    return result


# 4. Fine-tuning: a sentence-pair task through [CLS], a token-level task


PAIR_KINDS = ("translation", "near miss", "random")  # what the French sentence is to the English
PUNCTUATION = ("", ",", ".", "?", "!")  # what follows a word
PUNCTUATION_NAMES = ("none", "comma", "period", "question", "exclamation")
CASE_NAMES = ("lower", "capital")
BUDGETS = (100, 1_000, 10_000)  # labelled examples a fine-tuning run may read


def pair_row(
    tokenizer: Tokenizer, ids: dict[str, int], english: str, french: str
) -> tuple[list[int], list[int]]:
    """([CLS] English [SEP] French [SEP], segments: 0 up to the first [SEP], 1 after it)."""
    check_tokenizer(tokenizer)
    _check_token_ids(ids)
    english, french = check_text(english, "english"), check_text(french, "french")
    return _pair_row(tokenizer, ids, english, french)


def _pair_rows(tokenizer, ids, pairs) -> list[tuple[list[int], list[int]]]:
    """_pair_row of each (english, french), the tokenizer called once for all of them."""
    encoded = tokenizer.encode_batch([clean(text) for pair in pairs for text in pair])
    made = []
    for first, second in zip(encoded[::2], encoded[1::2], strict=True):
        row = [ids[CLS], *first.ids, ids[SEP], *second.ids, ids[SEP]]
        made.append((row, [0] * (len(first.ids) + 2) + [1] * (len(second.ids) + 1)))
    return made


def _pair_row(tokenizer, ids, english, french) -> tuple[list[int], list[int]]:
    first, second = (e.ids for e in tokenizer.encode_batch([clean(english), clean(french)]))
    row = [ids[CLS], *first, ids[SEP], *second, ids[SEP]]
    return row, _segment_ids(torch.tensor([row]), ids[SEP], PAD_ID)[0].tolist()


def near_misses(englishes: list[str]) -> dict[str, list[str]]:
    """For each English sentence, the others of the list that differ from it in exactly one
    word, in the list's order: "I like cats." and "I like dogs."."""
    englishes = _check_texts(englishes, "englishes")
    by_gap: dict[tuple, list[str]] = {}
    for english in dict.fromkeys(englishes):
        words = english.split()
        for gap in range(len(words)):
            by_gap.setdefault((len(words), gap, *words[:gap], *words[gap + 1 :]), []).append(
                english
            )
    found: dict[str, list[str]] = {english: [] for english in englishes}
    for group in by_gap.values():
        for english in group:
            found[english] += [other for other in group if other != english]
    return {english: list(dict.fromkeys(others)) for english, others in found.items()}


def pair_examples(split: str, count: int, seed: int = 0) -> list[tuple[str, str, int, str]]:
    """`count` labelled pairs of the split, (english, french, label, kind), for fine-tuning:
    half translations (label 1), a quarter near misses, a quarter random pairs (label 0), in a
    seeded random order. Near misses come from English sentences that have one (misses)."""
    count = _check_count(count)
    seed = validation.seed(seed)
    translations = _translations(split)
    englishes = list(translations)
    misses = _misses(englishes, translations)
    with_miss = [english for english in englishes if misses[english]]
    generator = torch.Generator().manual_seed(seed)

    def pick(items: list) -> object:
        return items[int(torch.randint(len(items), (1,), generator=generator))]

    examples = []
    for _ in range(count - 2 * (count // 4)):
        english = pick(englishes)
        examples.append((english, pick(translations[english]), 1, "translation"))
    for _ in range(count // 4):
        english = pick(with_miss)
        examples.append((english, pick(translations[pick(misses[english])]), 0, "near miss"))
    for _ in range(count // 4):
        english, other = pick(englishes), pick(englishes)
        while other == english:
            other = pick(englishes)
        examples.append((english, pick(translations[other]), 0, "random"))
    order = torch.randperm(len(examples), generator=generator).tolist()
    return [examples[i] for i in order]


def pair_test_examples(seed: int = 0) -> list[tuple[str, str, int, str]]:
    """Each distinct test English sentence twice: with its first translation (label 1), and
    with a French sentence that is not one (label 0): a near miss where it has one (the first
    translation of the first sentence one word away, from the test or training split), else the
    translation of another test sentence drawn at random. Half the pairs are translations. The
    English is never seen in fine-tuning; a near miss's French may be."""
    seed = validation.seed(seed)
    test = _translations("test")
    pool = {**test, **_translations("train")}
    misses = _misses(list(test), pool, among=list(pool))
    generator = torch.Generator().manual_seed(seed)
    englishes = list(test)
    examples = []
    for english in englishes:
        examples.append((english, test[english][0], 1, "translation"))
        if misses[english]:
            examples.append((english, pool[misses[english][0]][0], 0, "near miss"))
            continue
        other = english
        while other == english:
            other = englishes[int(torch.randint(len(englishes), (1,), generator=generator))]
        examples.append((english, test[other][0], 0, "random"))
    return examples


def _translations(split: str) -> dict[str, list[str]]:
    """{english: its French translations} of the split, both in the split's order."""
    translations: dict[str, list[str]] = {}
    for english, french in load_pairs(split):
        translations.setdefault(english, []).append(french)
    return translations


def _misses(
    englishes: list[str], translations: dict[str, list[str]], among: list[str] | None = None
) -> dict[str, list[str]]:
    """For each English sentence, the sentences of `among` (englishes if None) one word away
    whose translations share none with its own (I'm glad / I'm happy may both be Je suis
    content)."""
    found = near_misses([*englishes, *(among or [])])
    return {
        english: [
            other
            for other in found[english]
            if not set(translations[other]) & set(translations[english])
        ]
        for english in englishes
    }


def word_tags(sentence: str) -> tuple[list[str], list[int], list[int]] | None:
    """(lower-cased words without their marks, the mark that follows each (an index of
    PUNCTUATION), whether each was capitalised), or None for a sentence holding a mark other
    than , . ? ! at a word's end (quotes, colons, "U.S.", "...")."""
    sentence = check_text(sentence, "sentence")
    words, marks, capitals = [], [], []
    for word in clean(sentence).split():
        mark = word[-1] if word[-1] in PUNCTUATION[1:] else ""
        bare = word[: len(word) - len(mark)]
        if not bare or not all(c.isalnum() or c in "'-" for c in bare):
            return None
        words.append(bare.lower())
        marks.append(PUNCTUATION.index(mark))
        capitals.append(int(bare[0].isupper()))
    return (words, marks, capitals) if words else None


def tagging_row(
    tokenizer: Tokenizer,
    ids: dict[str, int],
    words: list[str],
    marks: list[int],
    capitals: list[int],
) -> tuple[list[int], list[int], list[int]]:
    """([CLS] pieces [SEP], the mark target of each piece, the case target of each piece): a
    word's first piece carries its tags, every other position IGNORE (as BERT tags a word)."""
    check_tokenizer(tokenizer)
    _check_token_ids(ids)
    _check_tags((words, marks, capitals), "the tags")
    return _tagging_row(tokenizer, ids, words, marks, capitals)


def _tagging_row(tokenizer, ids, words, marks, capitals) -> tuple[list, list, list]:
    encoding = tokenizer.encode(words, is_pretokenized=True)
    mark_targets, case_targets, previous = [IGNORE], [IGNORE], None
    for word in encoding.word_ids:
        first = word is not None and word != previous
        mark_targets.append(marks[word] if first else IGNORE)
        case_targets.append(capitals[word] if first else IGNORE)
        previous = word
    row = [ids[CLS], *encoding.ids, ids[SEP]]
    return row, mark_targets + [IGNORE], case_targets + [IGNORE]


def tagging_examples(split: str, count: int | None = None, seed: int = 0) -> list[tuple]:
    """The split's distinct English sentences that word_tags reads, as (words, marks,
    capitals): `count` of them in a seeded random order, or all in the split's order."""
    count = None if count is None else _check_count(count)
    seed = validation.seed(seed)
    englishes = dict.fromkeys(english for english, _ in load_pairs(split))
    tagged = [tags for english in englishes if (tags := word_tags(english)) is not None]
    if count is None:
        return tagged
    order = torch.randperm(len(tagged), generator=torch.Generator().manual_seed(seed))
    return [tagged[i] for i in order[:count].tolist()]


class PairClassifier(nn.Module):
    """An encoder and a linear layer on [CLS]'s output: (B, n) ids and segments -> (B, 2)
    logits, "not a translation" and "a translation"."""

    def __init__(self, encoder: TextEncoder):
        super().__init__()
        self.encoder = _check_model(encoder, "encoder")
        self.head = nn.Linear(encoder.config.d_model, 2)

    def forward(self, ids: torch.Tensor, segments: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(ids, segments)[:, 0])


class Tagger(nn.Module):
    """An encoder and a linear layer on every position: (B, n) ids -> (B, n, 5 + 2) logits,
    the mark that follows the word (PUNCTUATION_NAMES), then its case (CASE_NAMES)."""

    def __init__(self, encoder: TextEncoder):
        super().__init__()
        self.encoder = _check_model(encoder, "encoder")
        self.head = nn.Linear(encoder.config.d_model, len(PUNCTUATION) + len(CASE_NAMES))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(ids))


def tagging_loss(logits: torch.Tensor, marks: torch.Tensor, cases: torch.Tensor) -> torch.Tensor:
    """The two token classification losses summed: the marks over the first len(PUNCTUATION)
    logits, the cases over the rest."""
    split = len(PUNCTUATION)
    if not isinstance(logits, torch.Tensor) or logits.shape[-1:] != (split + len(CASE_NAMES),):
        found = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"logits must be a Tagger's (B, n, {split + len(CASE_NAMES)}), got {found}"
        )
    _check_token_labels(logits[..., :split], marks, "marks")
    _check_token_labels(logits[..., split:], cases, "cases")
    return _tagging_loss(logits, marks.long(), cases.long())


def _tagging_loss(logits: torch.Tensor, marks: torch.Tensor, cases: torch.Tensor) -> torch.Tensor:
    split = len(PUNCTUATION)
    return F.cross_entropy(
        logits[..., :split].transpose(1, 2), marks, ignore_index=IGNORE
    ) + F.cross_entropy(logits[..., split:].transpose(1, 2), cases, ignore_index=IGNORE)


@dataclass(frozen=True)
class FinetuneRecipe:
    """How every fine-tuning run trains, pre-trained or from scratch, at every label budget."""

    steps: int = 1000  # the same number of updates at every budget: 320 epochs of 100 examples
    batch_size: int = 32
    learning_rate: float = 3e-4  # one rate for both starts (a from-scratch run is not tuned apart)
    warmup_steps: int = 100  # rate and steps chosen on the validation split's pairs
    weight_decay: float = 0.01
    seed: int = 0

    def __post_init__(self):
        _coerce_recipe(self)


FINETUNE = FinetuneRecipe()


def pair_batch(tokenizer, ids, examples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids (B, n), segments (B, n), labels (B,)) of (english, french, label, kind) examples."""
    check_tokenizer(tokenizer)
    _check_token_ids(ids)
    _check_examples(examples, "pair")
    return _pair_batch(tokenizer, ids, examples)


def _pair_batch(tokenizer, ids, examples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows, segments = zip(*(_pair_row(tokenizer, ids, e, f) for e, f, _, _ in examples), strict=True)
    return _padded(list(rows)), _padded(list(segments)), torch.tensor([x[2] for x in examples])


def tagging_batch(tokenizer, ids, examples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids (B, n), mark targets (B, n), case targets (B, n)) of (words, marks, capitals)."""
    check_tokenizer(tokenizer)
    _check_token_ids(ids)
    _check_examples(examples, "tagging")
    return _tagging_batch(tokenizer, ids, examples)


def _tagging_batch(tokenizer, ids, examples) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    rows = [_tagging_row(tokenizer, ids, *example) for example in examples]
    width = max(len(row) for row, _, _ in rows)

    def pad(row: list[int], value: int) -> list[int]:
        return row + [value] * (width - len(row))

    return (
        torch.tensor([pad(row, PAD_ID) for row, _, _ in rows]),
        torch.tensor([pad(marks, IGNORE) for _, marks, _ in rows]),
        torch.tensor([pad(cases, IGNORE) for _, _, cases in rows]),
    )


def finetune(task: str, encoder: TextEncoder, examples: list, recipe: FinetuneRecipe = FINETUNE):
    """Fine-tune a copy of the encoder (every weight) with a new head on the labelled examples
    of task "pair" or "tagging"; returns the model in eval mode. Seeded, on one thread."""
    task = validation.one_of(TASKS)(task, "task")
    _check_model(encoder, "encoder")
    longest = LONGEST_PAIR_ROW if task == "pair" else LONGEST_SENTENCE_ROW
    _check_readable(encoder.config, longest, f"a {task} example")
    _check_examples(examples, task)
    recipe = _check_recipe(recipe, FinetuneRecipe)
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        return _finetune(task, encoder, examples, recipe)


def _finetune(task, encoder, examples, recipe) -> nn.Module:
    tokenizer, ids = load_encoder_tokenizer()
    torch.manual_seed(recipe.seed)
    encoder = copy.deepcopy(encoder)
    model = (PairClassifier if task == "pair" else Tagger)(encoder).train()
    optimizer, schedule = _adamw_with_schedule(model, recipe)
    generator = torch.Generator().manual_seed(recipe.seed)
    order, seen = torch.randperm(len(examples), generator=generator), 0
    for _ in range(recipe.steps):
        if seen >= len(order):
            order, seen = torch.randperm(len(examples), generator=generator), 0
        chosen = [examples[i] for i in order[seen : seen + recipe.batch_size].tolist()]
        seen += recipe.batch_size
        if task == "pair":
            batch, segments, labels = _pair_batch(tokenizer, ids, chosen)
            loss = F.cross_entropy(model(batch, segments), labels)
        else:
            batch, marks, cases = _tagging_batch(tokenizer, ids, chosen)
            loss = _tagging_loss(model(batch), marks, cases)
        _clipped_step(model, optimizer, schedule, loss)
    return model.eval()


@torch.no_grad()
def pair_predictions(model: PairClassifier, examples: list, batch_size: int = 250) -> torch.Tensor:
    """The probability that each pair is a translation, (N,) float64, computed in float64."""
    _check_classifier(model, PairClassifier)
    _check_examples(examples, "pair")
    batch_size = validation.recipe_size(batch_size, "batch_size")
    return _pair_predictions(model, examples, batch_size)


def _pair_predictions(model: PairClassifier, examples: list, batch_size: int) -> torch.Tensor:
    tokenizer, ids = load_encoder_tokenizer()
    copy64 = copy.deepcopy(model).double().eval()
    found = []
    for start in range(0, len(examples), batch_size):
        batch, segments, _ = _pair_batch(tokenizer, ids, examples[start : start + batch_size])
        found.append(copy64(batch, segments).softmax(-1)[:, 1])
    return torch.cat(found)


def pair_scores(model: PairClassifier, examples: list) -> dict[str, float]:
    """Accuracy (probability above 0.5 means "a translation") on all the examples and on each
    kind of pair (NaN for a kind the examples do not hold)."""
    _check_classifier(model, PairClassifier)
    _check_examples(examples, "pair")
    right = (_pair_predictions(model, examples, 250) > 0.5).long() == torch.tensor(
        [x[2] for x in examples]
    )
    kinds = [x[3] for x in examples]
    scores = {"all": right.double().mean().item()}
    for kind in PAIR_KINDS:
        chosen = torch.tensor([k == kind for k in kinds])
        scores[kind] = right[chosen].double().mean().item()
    return scores


@torch.no_grad()
def tag_predictions(
    model: Tagger, examples: list, batch_size: int = 250
) -> tuple[list, list, list, list]:
    """(true marks, predicted marks, true cases, predicted cases), one entry per word, computed
    in float64."""
    _check_classifier(model, Tagger)
    _check_examples(examples, "tagging")
    batch_size = validation.recipe_size(batch_size, "batch_size")
    return _tag_predictions(model, examples, batch_size)


def _tag_predictions(model: Tagger, examples: list, batch_size: int) -> tuple:
    tokenizer, ids = load_encoder_tokenizer()
    copy64 = copy.deepcopy(model).double().eval()
    found = ([], [], [], [])
    for start in range(0, len(examples), batch_size):
        batch, marks, cases = _tagging_batch(tokenizer, ids, examples[start : start + batch_size])
        logits = copy64(batch)
        tagged = marks != IGNORE
        found[0].extend(marks[tagged].tolist())
        found[1].extend(logits[..., : len(PUNCTUATION)].argmax(-1)[tagged].tolist())
        found[2].extend(cases[tagged].tolist())
        found[3].extend(logits[..., len(PUNCTUATION) :].argmax(-1)[tagged].tolist())
    return found


def tagging_scores(model: Tagger, examples: list) -> dict[str, float]:
    """Macro-averaged F1 of the marks and of the cases: scikit-learn's f1_score, averaged over
    the classes (each counts alike, however rare)."""
    _check_classifier(model, Tagger)
    _check_examples(examples, "tagging")
    from sklearn.metrics import f1_score

    true_marks, marks, true_cases, cases = _tag_predictions(model, examples, 250)
    labels = list(range(len(PUNCTUATION)))
    return {
        "marks macro F1": f1_score(
            true_marks, marks, labels=labels, average="macro", zero_division=0
        ),
        "cases macro F1": f1_score(
            true_cases, cases, labels=[0, 1], average="macro", zero_division=0
        ),
    }


MODELS = ("masked", "causal")  # the pre-trained encoder and its left-to-right twin
TIED_COPY = "output.weight"  # the same matrix as tokens.weight, stored once
SAVED_KEYS = ("config", "recipe", "weights", "logs")
SAVED_PAIRS = DATA_DIR / "encoder_only_pairs.pt"  # the encoder pre-trained further on pairs


def train_and_save_pretrained(
    path: str | Path = SAVED_PRETRAINED,
    recipe: PretrainRecipe = PRETRAIN,
    config: EncoderConfig = ENCODER,
) -> dict:
    """Pre-train the encoder and its causal twin (config, but for `causal`) and save them:
    float16 weights (the tied output matrix once), the config, the recipe and both logs in one
    checksummed file. Returns {name: seconds of training}."""
    path = savable_path(path)
    recipe = _check_recipe(recipe, PretrainRecipe)
    config = _check_config(config)
    _check_readable(config, LONGEST_SENTENCE_ROW, "a training sentence")
    results = {name: pretrain(replace(config, causal=name == "causal"), recipe) for name in MODELS}
    save_checkpoint(
        path,
        {
            "config": {key: value for key, value in asdict(config).items() if key != "causal"},
            "recipe": asdict(recipe),
            "weights": {name: _stored_weights(results[name]["model"]) for name in MODELS},
            "logs": {name: results[name]["log"] for name in MODELS},
        },
    )
    return {name: result["seconds"] for name, result in results.items()}


def _stored_weights(model: TextEncoder) -> dict[str, torch.Tensor]:
    return {key: t.half() for key, t in model.state_dict().items() if key != TIED_COPY}


def load_pretrained(path: str | Path = SAVED_PRETRAINED) -> dict:
    """The saved models (checksum verified, weights_only=True), in eval mode and float32:
    {"masked", "causal": TextEncoder, "config": EncoderConfig, "recipe": PretrainRecipe,
    "logs": {name: {"step", "loss"}}}."""
    saved = load_checkpoint(path, SAVED_KEYS, REMAKE)
    with _as_checkpoint_errors(path):
        loaded = {
            "recipe": _saved(PretrainRecipe, saved["recipe"]),
            "config": _saved(EncoderConfig, {**saved["config"], "causal": False}),
            "logs": {name: _saved_log(saved["logs"][name]) for name in MODELS},
        }
        for name in MODELS:
            config = replace(loaded["config"], causal=name == "causal")
            loaded[name] = _loaded_encoder(saved["weights"][name], config, path)
    return loaded


@contextlib.contextmanager
def _as_checkpoint_errors(path: Path):
    """Inside, what a file of the right checksum but the wrong contents makes go wrong is a
    CheckpointError naming the file and the command that rebuilds it."""
    try:
        yield
    except CheckpointError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CheckpointError(
            f"{path} does not hold what `{REMAKE}` writes ({type(error).__name__}: "
            f"{str(error)[:200]}): rebuild it with `{REMAKE}`"
        ) from None


def _saved(kind: type, fields_saved: object):
    """A config or recipe from its saved fields, every field named and none more."""
    names = {field.name for field in dataclasses.fields(kind)}
    if not isinstance(fields_saved, dict) or set(fields_saved) != names:
        raise ValueError(f"its {kind.__name__} should have the fields {sorted(names)}")
    return kind(**fields_saved)


def _saved_log(log: object) -> dict:
    if not isinstance(log, dict) or set(log) != {"step", "loss"}:
        raise ValueError("a training log should be {'step': [...], 'loss': [...]}")
    return log


def _loaded_encoder(weights: dict, config: EncoderConfig, path: Path) -> TextEncoder:
    weights = float_weights(weights, path)
    weights[TIED_COPY] = weights["tokens.weight"]
    with keeping_random_state(), trainable_float32():
        model = TextEncoder(config)
    load_weights(model, weights, path)
    return model.eval()


def train_and_save_pairs(
    path: str | Path = SAVED_PAIRS,
    recipe: PretrainRecipe = PAIR_PRETRAIN,
    pretrained: str | Path = SAVED_PRETRAINED,
) -> float:
    """Pre-train the saved encoder further on sentence pairs (pretrain_on_pairs) and save it:
    float16 weights, the config, the recipe and the log. Returns the seconds it took."""
    path = savable_path(path)
    recipe = _check_recipe(recipe, PretrainRecipe)
    saved = load_pretrained(pretrained)
    result = pretrain_on_pairs(saved["masked"], recipe)
    save_checkpoint(
        path,
        {
            "config": asdict(saved["config"]),
            "recipe": asdict(recipe),
            "weights": _stored_weights(result["model"]),
            "log": result["log"],
        },
    )
    return result["seconds"]


def load_pairs_model(path: str | Path = SAVED_PAIRS) -> dict:
    """The saved encoder pre-trained further on pairs (checksum verified, weights_only=True):
    {"model": TextEncoder in eval mode and float32, "recipe", "log"}."""
    saved = load_checkpoint(path, ("config", "recipe", "weights", "log"), REMAKE)
    with _as_checkpoint_errors(path):
        config = _saved(EncoderConfig, saved["config"])
        if config.causal:
            raise ValueError("its encoder should read both ways (causal False)")
        model = _loaded_encoder(saved["weights"], config, path)
        return {
            "model": model,
            "recipe": _saved(PretrainRecipe, saved["recipe"]),
            "log": _saved_log(saved["log"]),
        }


SAVED_FINETUNED = DATA_DIR / "encoder_only_finetuned.pt"
TASKS = ("pair", "tagging")
STARTS = {  # the first weights of each task's fine-tuning runs
    "pair": ("pre-trained on pairs", "pre-trained", "from scratch"),
    "tagging": ("pre-trained", "from scratch"),
}
FINETUNED_KEYS = ("recipe", "config", "results", "weights")


def train_and_save_finetuned(
    path: str | Path = SAVED_FINETUNED,
    recipe: FinetuneRecipe = FINETUNE,
    pretrained: str | Path = SAVED_PRETRAINED,
    pairs: str | Path = SAVED_PAIRS,
) -> dict:
    """Fine-tune the saved encoder ("pre-trained"), the one pre-trained further on pairs (for
    the pair task) and the same architecture from the first weights pre-training started from
    ("from scratch") on both tasks at every label budget; score each on the task's test
    examples; save the scores and, for each task, its first start fine-tuned on the most labels
    (float16; every run is scored with its weights rounded to float16, as_stored). Returns the
    scores: {task: {start: {budget: {score: value}}}}."""
    path = savable_path(path)
    recipe = _check_recipe(recipe, FinetuneRecipe)
    saved = load_pretrained(pretrained)
    with keeping_random_state(), trainable_float32():
        torch.manual_seed(saved["recipe"].seed)  # the first weights pre-training started from
        scratch = TextEncoder(saved["config"]).eval()
    firsts = {
        "pre-trained on pairs": load_pairs_model(pairs)["model"],
        "pre-trained": saved["masked"],
    }
    firsts["from scratch"] = scratch
    tests = {"pair": pair_test_examples(), "tagging": tagging_examples("test")}
    scores = {"pair": pair_scores, "tagging": tagging_scores}
    results = {task: {start: {} for start in STARTS[task]} for task in TASKS}
    kept = {}
    for task in TASKS:
        for budget in tqdm(BUDGETS, desc=task):
            if task == "pair":
                examples = pair_examples("train", budget, recipe.seed)
            else:
                examples = tagging_examples("train", budget, recipe.seed)
            for start in STARTS[task]:
                model = as_stored(finetune(task, firsts[start], examples, recipe))
                results[task][start][str(budget)] = scores[task](model, tests[task])
                if start == STARTS[task][0] and budget == BUDGETS[-1]:
                    kept[task] = model
    weights = {
        task: {k: t.half() for k, t in model.state_dict().items() if k != "encoder." + TIED_COPY}
        for task, model in kept.items()
    }
    save_checkpoint(
        path,
        {
            "recipe": asdict(recipe),
            "config": asdict(saved["config"]),
            "results": results,
            "weights": weights,
        },
    )
    return results


@torch.no_grad()
def as_stored(model: nn.Module) -> nn.Module:
    """model with each weight rounded to float16 and back, in place: the weights a saved file
    holds, so that what is scored before saving is what the chapter scores after loading."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    state = model.state_dict()
    for name, weight in state.items():
        if weight.is_floating_point() and weight.abs().max() > torch.finfo(torch.float16).max:
            raise ValueError(f"{name} holds numbers beyond float16's largest: it cannot be stored")
    for weight in state.values():
        if weight.is_floating_point():
            weight.copy_(weight.half())
    return model


def load_finetuned(path: str | Path = SAVED_FINETUNED) -> dict:
    """The saved fine-tuned models (checksum verified, weights_only=True) in eval mode and
    float32, {"pair": PairClassifier, "tagging": Tagger}, with "recipe" and "results" (the
    scores of every run, as train_and_save_finetuned returned them)."""
    saved = load_checkpoint(path, FINETUNED_KEYS, REMAKE)
    with _as_checkpoint_errors(path):
        loaded = {"recipe": _saved(FinetuneRecipe, saved["recipe"])}
        if not isinstance(saved["results"], dict) or set(saved["results"]) != set(TASKS):
            raise ValueError(f"its results should name the tasks {TASKS}")
        loaded["results"] = saved["results"]
        config = _saved(EncoderConfig, saved["config"])
        if config.causal:
            raise ValueError("its encoders should read both ways (causal False)")
        for task, kind in (("pair", PairClassifier), ("tagging", Tagger)):
            weights = float_weights(saved["weights"][task], path)
            weights["encoder." + TIED_COPY] = weights["encoder.tokens.weight"]
            with keeping_random_state(), trainable_float32():
                model = kind(TextEncoder(config))
            load_weights(model, weights, path)
            loaded[task] = model.eval()
    return loaded


def main() -> None:
    """python -m helpers.encoder_only pretrain|finetune: retrain chapter 15's models into data/."""
    parser = argparse.ArgumentParser(description="Retrain chapter 15's models into data/.")
    parser.add_argument(
        "stage",
        choices=["pretrain", "pairs", "finetune"],
        help="pretrain: the encoder and its causal twin; pairs: the saved encoder pre-trained "
        "further on sentence pairs; finetune: both tasks at every budget, from the saved "
        "pre-trained encoders and from scratch",
    )
    stage = parser.parse_args().stage
    if stage == "pretrain":
        print({name: f"{seconds:.0f} s" for name, seconds in train_and_save_pretrained().items()})
    elif stage == "pairs":
        print(f"pairs: {train_and_save_pairs():.0f} s")
    else:
        print(train_and_save_finetuned())


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_config(config: object) -> EncoderConfig:
    if not isinstance(config, EncoderConfig):
        raise TypeError(f"config must be an EncoderConfig, got {type(config).__name__}")
    return config


def _check_recipe(recipe: object, kind: type):
    if not isinstance(recipe, kind):
        raise TypeError(f"recipe must be a {kind.__name__}, got {type(recipe).__name__}")
    return recipe


def _check_ids(ids: object, config: EncoderConfig, name: str) -> torch.Tensor:
    validation.token_ids(ids, name, config.vocab_size, "(B, n)")
    if not ids.shape[0] or not 1 <= ids.shape[1] <= config.max_len:
        raise ValueError(
            f"{name} must be (B, n) with B >= 1 and 1 <= n <= max_len = {config.max_len}, got "
            f"{tuple(ids.shape)}"
        )
    return ids


MOST_VOCABULARY = 2**24  # mask_tokens draws from a table of every ordinary id: 8 bytes each


def _check_masking(ids, mask_id, vocab_size, special_ids, rate, generator):
    """mask_tokens' arguments, as it uses them: (mask_id, vocab_size, special ids as a tensor,
    rate)."""
    vocab_size = validation.whole_number(vocab_size, "vocab_size")
    if vocab_size > MOST_VOCABULARY:
        raise ValueError(
            f"vocab_size must be at most 2^24 = {MOST_VOCABULARY:,} (the largest vocabularies in "
            f"use hold a few hundred thousand ids), got {validation.shown(vocab_size)}"
        )
    validation.token_ids(ids, "ids", vocab_size, "(B, n)")
    mask_id = validation.whole_number(mask_id, "mask_id", minimum=0)
    if mask_id >= vocab_size:
        raise ValueError(f"mask_id ({mask_id}) must be an id of the vocabulary, below {vocab_size}")
    if isinstance(special_ids, str | bytes) or not hasattr(special_ids, "__iter__"):
        raise TypeError(
            f"special_ids must be a collection of ids, got {validation.shown(special_ids)}"
        )
    special = [validation.whole_number(i, "special_ids' ids", minimum=0) for i in special_ids]
    if mask_id not in special:
        raise ValueError(f"special_ids must hold mask_id ({mask_id}): [MASK] is never a target")
    if len({i for i in special if i < vocab_size}) >= vocab_size:
        raise ValueError("special_ids cover the whole vocabulary: no id is left to mask or to draw")
    rate = validation.probability(rate, "rate")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator or None, got {validation.shown(generator)}"
        )
    return mask_id, vocab_size, torch.tensor(special, dtype=torch.long), rate


def _check_word_masking(ids, word_ids, mask_id, rate, seed) -> None:
    validation.token_ids(ids, "ids", None, "(B, n)")
    validation.dense_tensor(word_ids, "word_ids", "(B, n)")
    if word_ids.shape != ids.shape or word_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"word_ids must be int64 or int32 (-1 marks no word) of the shape of ids "
            f"{tuple(ids.shape)}, got "
            f"{word_ids.dtype} {tuple(word_ids.shape)}"
        )
    if word_ids.numel() and word_ids.min() < -1:
        raise ValueError(f"word_ids must be -1 or a word's index >= 0, got {int(word_ids.min())}")
    if word_ids.numel() and word_ids.max() >= ids.shape[1]:
        raise ValueError(
            f"word_ids number the words of a row from 0: a row of {ids.shape[1]} positions holds "
            f"fewer than {int(word_ids.max()) + 1} words"
        )
    mask_id = validation.whole_number(mask_id, "mask_id", minimum=0)
    if mask_id > torch.iinfo(ids.dtype).max:
        raise ValueError(f"mask_id {mask_id} does not fit in the ids' {ids.dtype}")
    validation.probability(rate, "rate")
    return validation.seed(seed)


def _check_segment_ids(ids, sep_id, pad_id) -> None:
    validation.token_ids(ids, "ids", None, "(B, n)")
    for name, value in (("sep_id", sep_id), ("pad_id", pad_id)):
        if validation.whole_number(value, name, minimum=0) > torch.iinfo(ids.dtype).max:
            raise ValueError(f"{name} {value} does not fit in the ids' {ids.dtype}")
    if sep_id == pad_id:
        raise ValueError(f"sep_id and pad_id must differ, got {sep_id} for both")


def _check_token_labels(logits: object, labels: object, name: str = "labels") -> None:
    """logits (B, n, classes) of floating point; labels (B, n) of class indices or IGNORE, at
    least one of them a class."""
    validation.dense_tensor(logits, "logits", "(B, n, classes)")
    if logits.dim() != 3 or not logits.is_floating_point() or not logits.shape[-1]:
        raise ValueError(
            f"logits must be floating point (B, n, classes), got {logits.dtype} "
            f"{tuple(logits.shape)}"
        )
    _check_targets(labels, tuple(logits.shape[:2]), logits.shape[-1], name)
    if not logits.isfinite().all():
        raise ValueError("logits hold NaN or inf: the loss would be NaN")


def _check_targets(targets: object, shape: tuple, classes: int, name: str) -> None:
    validation.dense_tensor(targets, name, "(B, n)")
    integers = (torch.int64, torch.int32, torch.int16, torch.int8)
    if tuple(targets.shape) != shape or targets.dtype not in integers:
        raise ValueError(
            f"{name} must be integer class indices {shape}, got {targets.dtype} "
            f"{tuple(targets.shape)}"
        )
    labelled = targets[targets != IGNORE]
    if not labelled.numel():
        raise ValueError(f"{name} hold no label: every position is IGNORE ({IGNORE})")
    if labelled.min() < 0 or labelled.max() >= classes:
        raise ValueError(
            f"{name} must be IGNORE ({IGNORE}) or a class in 0..{classes - 1}, got "
            f"{int(labelled.min())}..{int(labelled.max())}"
        )


def _check_model(model: object, name: str, causal: bool | None = None) -> TextEncoder:
    """A TextEncoder of the encoder tokenizer's VOCAB_SIZE ids ([MASK] among them); the encoder
    (causal False) or the causal twin (True) where it matters."""
    if not isinstance(model, TextEncoder):
        raise TypeError(f"{name} must be a TextEncoder, got {type(model).__name__}")
    if model.config.vocab_size != VOCAB_SIZE:
        raise ValueError(
            f"{name} must read the encoder tokenizer's {VOCAB_SIZE} ids (load_encoder_tokenizer), "
            f"got a vocab_size of {model.config.vocab_size}"
        )
    if causal is not None and model.config.causal != causal:
        wanted = "the causal twin (config.causal True)" if causal else "the encoder, not the twin"
        raise ValueError(f"{name} must be {wanted}")
    return model


def _check_classifier(model: object, kind: type) -> None:
    if not isinstance(model, kind):
        raise TypeError(f"model must be a {kind.__name__}, got {type(model).__name__}")


def _check_readable(config: EncoderConfig, longest: int, what: str) -> None:
    """A config of the encoder tokenizer's ids, with room for the longest row it will read."""
    if config.vocab_size != VOCAB_SIZE:
        raise ValueError(
            f"the model must read the encoder tokenizer's {VOCAB_SIZE} ids, got a vocab_size of "
            f"{config.vocab_size}"
        )
    if config.max_len < longest:
        raise ValueError(
            f"max_len is {config.max_len}, but {what} may hold {longest} tokens: a max_len of at "
            f"least {longest} reads them all"
        )


MOST_EXAMPLES = 200_000  # labelled examples a fine-tuning set may hold: the data has 160,328


def _check_count(count: object) -> int:
    count = validation.whole_number(count, "count")
    if count > MOST_EXAMPLES:
        raise ValueError(f"count must be at most {MOST_EXAMPLES:,}, got {validation.shown(count)}")
    return count


def _check_token_ids(ids: object) -> None:
    """The encoder's three tokens and their ids, as load_encoder_tokenizer returns them."""
    if ids != {CLS: CLS_ID, SEP: SEP_ID, MASK: MASK_ID}:
        raise ValueError(
            f"ids must be the dict load_encoder_tokenizer returns ({', '.join(ENCODER_TOKENS)} "
            f"-> their ids), got {validation.shown(ids):.80}"
        )


def _check_texts(texts: object, name: str) -> list[str]:
    if isinstance(texts, str | bytes) or not isinstance(texts, list | tuple) or not texts:
        raise TypeError(
            f"{name} must be a non-empty list of sentences (str), got {validation.shown(texts):.80}"
        )
    return [check_text(text, f"{name}[{index}]") for index, text in enumerate(texts)]


def _check_rows(rows: object, config: EncoderConfig | None) -> None:
    """A non-empty list of rows of token ids, [CLS] pieces [SEP] as sentence_rows makes them:
    whole numbers of the vocabulary (config's, if given), each row at most config.max_len."""
    if not isinstance(rows, list | tuple) or not rows:
        raise TypeError(
            f"rows must be a non-empty list of lists of token ids, got {validation.shown(rows):.80}"
        )
    vocab = None if config is None else config.vocab_size
    for index, row in enumerate(rows):
        if not isinstance(row, list | tuple) or not row:
            raise TypeError(
                f"rows[{index}] must be a non-empty list of token ids, got "
                f"{validation.shown(row):.80}"
            )
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in row):
            raise ValueError(
                f"rows[{index}] must hold token ids (whole numbers >= 0), got "
                f"{validation.shown(row):.80}"
            )
        if vocab is not None and max(row) >= vocab:
            raise ValueError(
                f"rows[{index}] holds the id {max(row)}, outside the vocabulary of {vocab}"
            )
        if config is not None and len(row) > config.max_len:
            raise ValueError(
                f"rows[{index}] has {len(row)} tokens, more than max_len = {config.max_len}"
            )


def _check_positions(positions: object, rows: list) -> None:
    if not isinstance(positions, list | tuple) or len(positions) != len(rows):
        raise ValueError(
            f"positions must be a list of one position per row ({len(rows)}), got "
            f"{validation.shown(positions):.80}"
        )
    for index, (where, row) in enumerate(zip(positions, rows, strict=True)):
        if len(row) < 3:
            raise ValueError(f"rows[{index}] holds no piece to hide: only [CLS] and [SEP]")
        if (
            isinstance(where, bool)
            or not isinstance(where, numbers.Integral)
            or not 1 <= where <= len(row) - 2
        ):
            raise ValueError(
                f"positions[{index}] must be a piece of its row, 1..{len(row) - 2} (not [CLS] "
                f"or [SEP]), got {validation.shown(where)}"
            )


def _check_tags(example: object, name: str) -> None:
    """(words, marks, capitals) as word_tags makes them: equal lengths, at least one word."""
    if not isinstance(example, tuple | list) or len(example) != 3:
        raise ValueError(
            f"{name} must be (words, marks, capitals) as word_tags makes them, got "
            f"{validation.shown(example):.80}"
        )
    words, marks, capitals = example
    lists = all(isinstance(part, list | tuple) for part in example)
    if not lists or not words or not len(words) == len(marks) == len(capitals):
        raise ValueError(
            f"{name} must be three lists of one entry per word, at least one word, got "
            f"{validation.shown(example):.80}"
        )
    if not all(isinstance(word, str) and word and not word.isspace() for word in words):
        raise ValueError(
            f"{name}: each word must be a non-empty str, got {validation.shown(words):.80}"
        )
    if not all(type(mark) is int and 0 <= mark < len(PUNCTUATION) for mark in marks):
        raise ValueError(
            f"{name}: each mark must be an index of PUNCTUATION, 0..{len(PUNCTUATION) - 1}, "
            f"got {validation.shown(marks):.80}"
        )
    if not all(type(capital) is int and capital in (0, 1) for capital in capitals):
        raise ValueError(
            f"{name}: each capital must be 0 or 1, got {validation.shown(capitals):.80}"
        )


def _check_examples(examples: object, task: str) -> None:
    """A non-empty list of a task's examples: (english, french, label 0 or 1, kind) for "pair",
    (words, marks, capitals) for "tagging"."""
    if not isinstance(examples, list | tuple) or not examples:
        raise TypeError(
            f"examples must be a non-empty list of {task} examples, got "
            f"{validation.shown(examples):.80}"
        )
    for index, example in enumerate(examples):
        name = f"examples[{index}]"
        if task == "tagging":
            _check_tags(example, name)
            continue
        if not isinstance(example, tuple | list) or len(example) != 4:
            raise ValueError(
                f"{name} must be (english, french, label, kind), got "
                f"{validation.shown(example):.80}"
            )
        english, french, label, kind = example
        check_text(english, f"{name}'s english")
        check_text(french, f"{name}'s french")
        if (
            type(label) is not int
            or label not in (0, 1)
            or kind not in PAIR_KINDS
            or (label == 1) != (kind == "translation")
        ):
            raise ValueError(
                f"{name} must have label 1 and kind 'translation', or label 0 and a kind of "
                f"{PAIR_KINDS[1:]}, got {validation.shown(label)} and {validation.shown(kind)}"
            )


if __name__ == "__main__":
    main()
