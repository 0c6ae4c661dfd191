"""Chapter 12: chapter 09's sentences translated by one causal stack, without an encoder.

The English sentence becomes a prompt and the French its continuation, in one sequence:
<bos> English <sep> French <eos>. The model is helpers.gpt.GPT with chapter 09's width and
about its number of parameters; it decodes through chapter 08's step interface, so chapter
09's greedy decoding, beam search and BLEU serve unchanged.
"""

import argparse
import copy
import math
import numbers
from dataclasses import MISSING, asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from helpers import validation
from helpers.checkpoints import (
    MAX_CHECKPOINT_PARAMETERS,
    CheckpointError,
    check_name,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
)
from helpers.contexts import keeping_random_state, plain_torch, plainly, trainable_float32
from helpers.gpt import (
    GPT,
    LARGEST_ACTIVATION,
    GPTConfig,
    ReadPrompt,
    _check_read,
    _generate,
    check_forward_size,
    check_room,
    check_sampling_size,
    checked_sampling,
    evaluating,
    shown_count,
)
from helpers.masks import causal_mask
from helpers.training import _learning_rate_factor, check_deadline
from helpers.translation import (
    BOS_ID,
    DATA_DIR,
    EOS_ID,
    PAD_ID,
    VOCAB_SIZE,
    _batches,
    beam_search,
    check_beam_size,
    check_device,
    check_length_penalty,
    check_previous_ids,
    check_tokenizer,
    choose_hypothesis,
    clipped_step,
    close_epoch,
    load_pairs,
    load_tokenizer,
    sentence_ids,
    translate,
)

SEPARATOR = "<sep>"
LOSS_OVER = ("answer", "sequence")
FRAMING = {PAD_ID: "<pad>", BOS_ID: "<bos>", EOS_ID: "<eos>"}  # ids that frame a sequence
# the integer dtypes whose ids torch compares and orders (not uint16..uint64: no min or max)
ID_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def add_separator(tokenizer: Tokenizer) -> int:
    """Give the tokenizer a <sep> token (the next free id, 8,000 for chapter 08's) without
    retraining it: every other id stays the same. Returns its id."""
    check_tokenizer(tokenizer)
    tokenizer.add_special_tokens([SEPARATOR])
    return tokenizer.token_to_id(SEPARATOR)


def load_tokenizer_with_separator() -> tuple[Tokenizer, int]:
    """A fresh copy of chapter 08's tokenizer with <sep> added, and <sep>'s id."""
    tokenizer = Tokenizer.from_str(load_tokenizer().to_str())
    return tokenizer, add_separator(tokenizer)


@dataclass(frozen=True)
class Recipe:
    """How the shipped models were trained (make translation-models), each with its reason."""

    d_model: int = 256  # chapter 09's width
    num_heads: int = 4  # 64 dimensions per head, as chapter 09
    num_layers: int = 7  # 7.61M parameters, chapter 09's 3 + 3 layers have 7.59M
    d_ff: int = 1024  # 4 x d_model, as chapter 09
    context_length: int = 128  # the longest training sequence has 69 tokens (see below)
    dropout: float = 0.1  # chapter 09's
    epochs: int = 6  # what fits in about 90 minutes of a 2-core CPU (see data/README.md)
    max_tokens: int = 3000  # chapter 09's batches: the same pairs, the same 428 steps an epoch
    learning_rate: float = 1e-3  # chapter 09's peak
    warmup_steps: int = 400  # about one epoch of rising learning rate, then a cosine decay
    weight_decay: float = 0.01  # AdamW's default, as chapter 09
    label_smoothing: float = 0.1  # chapter 09's better model
    bfloat16: bool = True  # matrix products in bfloat16 (torch.autocast): twice as fast on a CPU
    seed: int = 0  # fixes the initial weights and the order of the batches

    def __post_init__(self):
        sizes = ("d_model", "num_heads", "num_layers", "d_ff", "context_length", "epochs")
        validation.coerce_fields(
            self,
            {
                **dict.fromkeys(sizes, validation.whole_number),
                "max_tokens": validation.whole_number,
                "warmup_steps": validation.at_least(0),
                "dropout": validation.probability,
                "label_smoothing": validation.probability,
            },
        )
        learning_rate, weight_decay = validation.adamw_rates(self.learning_rate, self.weight_decay)
        object.__setattr__(self, "learning_rate", learning_rate)
        object.__setattr__(self, "weight_decay", weight_decay)
        validation.coerce_fields(self, {"bfloat16": validation.flag, "seed": validation.seed})
        config = self.model_config()  # the sizes, counted before anything is built
        # a batch holds about max_tokens positions (B rows x T tokens) in one forward pass
        check_forward_size(
            config,
            1,
            self.max_tokens,
            self.context_length,
            "max_tokens (tokens in a batch)",
            keys_name="context_length",
        )

    def model_config(self, vocab_size: int = VOCAB_SIZE + 1) -> GPTConfig:
        """The GPT this recipe trains, for a vocabulary of vocab_size tokens (chapter 08's
        and <sep> by default)."""
        return GPTConfig(
            vocab_size=vocab_size,
            context_length=self.context_length,
            d_model=self.d_model,
            num_heads=self.num_heads,
            num_layers=self.num_layers,
            d_ff=self.d_ff,
            dropout=self.dropout,
        )


RECIPE = Recipe()
# tokens in the longest training sequence, <bos> English <sep> French <eos>, with chapter 08's
# tokenizer (a test counts them again): a model trained on them reads all but the last, 68
LONGEST_TRAINING_SEQUENCE = 69
# the most bytes prefix_lm_mask builds (a bool a byte): 1,024 rows of the recipe's context, 16 MiB;
# a larger mask is a mistyped size, and building it takes a few times its bytes and seconds
MOST_MASK_BYTES = 1024 * RECIPE.context_length**2
# the most ids written_text reads: 1,024 of the recipe's contexts (a model writes one at most)
MOST_WRITTEN_IDS = 1024 * RECIPE.context_length
# name -> what its loss covers: the French answer only, or the whole sequence (English too)
MODELS = {"decoder-only": "answer", "decoder-only-lm": "sequence"}
TIED_COPY = "output.weight"  # the same matrix as tokens.weight, stored once


def build_sequences(
    english: list[list[int]], french: list[list[int]], separator_id: int
) -> torch.Tensor:
    """Rows <bos> English <sep> French <eos>, padded on the right: (B, longest)."""
    separator_id = check_separator(separator_id)
    english = _id_rows(english, "english", separator_id)
    french = _id_rows(french, "french", separator_id)
    if len(english) != len(french) or not english:
        raise ValueError(
            f"english and french must hold the same number of sentences, at least one; got "
            f"{len(english)} and {len(french)}"
        )
    for index, row in enumerate(english):
        if not row:
            raise ValueError(f"english[{index}] holds no token: nothing to translate")
    return _build_sequences(english, french, separator_id)


def _build_sequences(english: list, french: list, separator_id: int) -> torch.Tensor:
    """build_sequences of rows it took."""
    rows = [[BOS_ID, *e, separator_id, *f, EOS_ID] for e, f in zip(english, french, strict=True)]
    width = max(map(len, rows))
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])


def _id_rows(rows: object, name: str, separator_id: int) -> list[list[int]]:
    """rows as lists of token ids: whole numbers >= 0, none of them <sep> or a framing id."""
    if isinstance(rows, str | bytes) or not isinstance(rows, list | tuple):
        raise TypeError(f"{name} must be a list of lists of token ids, got {type(rows).__name__}")
    special = {**FRAMING, separator_id: SEPARATOR}
    checked = []
    for index, row in enumerate(rows):
        if isinstance(row, str | bytes) or not isinstance(row, list | tuple):
            raise TypeError(f"{name}[{index}] must be a list of token ids, got {row!r:.40}")
        for token in row:
            if isinstance(token, bool) or not isinstance(token, numbers.Integral):
                raise ValueError(
                    f"{name}[{index}] must hold whole-number ids (int), got "
                    f"{validation.shown(token):.40} ({type(token).__name__})"
                )
            if not 0 <= token < 2**63:  # what an int64 tensor holds
                raise ValueError(
                    f"{name}[{index}] must hold ids from 0 to 2^63 - 1 (int64), got "
                    f"{validation.shown(token):.40}"
                )
            if token in special:
                raise ValueError(
                    f"{name}[{index}] holds {special[token]} ({token}): the sentence's own "
                    f"tokens only, build_sequences adds the rest"
                )
        checked.append([int(token) for token in row])
    return checked


def loss_targets(sequences: torch.Tensor, separator_id: int, over: str = "answer") -> torch.Tensor:
    """The token each position must predict, (B, T - 1): sequences[:, 1:], with <pad> (no
    loss) at the padding and, when over="answer", at every position before <sep> as well, so
    that only the French tokens and the closing <eos> are scored (a row with no <sep> scores
    nothing: training_loss refuses it). sequences: at most LARGEST_ACTIVATION ids."""
    validation.dense_tensor(sequences, "sequences", "(B, T)")
    if sequences.dim() != 2 or sequences.shape[1] < 2:
        raise ValueError(f"sequences must be (B, T) with T >= 2, got {tuple(sequences.shape)}")
    if sequences.dtype not in ID_DTYPES:
        raise ValueError(
            f"sequences must hold integer token ids ({', '.join(map(str, ID_DTYPES))}), got "
            f"{sequences.dtype}"
        )
    if sequences.numel() > LARGEST_ACTIVATION:  # sized before it is read: expand() holds few bytes
        raise ValueError(
            f"sequences hold {shown_count(sequences.numel())} ids "
            f"({shown_count(sequences.shape[0])} x {shown_count(sequences.shape[1])}), more than "
            f"2^28 = {LARGEST_ACTIVATION:,}, the most a forward pass makes of anything: is a size "
            f"mistyped?"
        )
    if sequences.numel() and sequences.min() < 0:
        raise ValueError(f"sequences must hold ids >= 0, got {sequences.min().item()}")
    separator_id = check_separator(separator_id)
    largest = torch.iinfo(sequences.dtype).max
    if separator_id > largest:  # torch would compare it wrapped: 300 as int8 is 44
        raise ValueError(
            f"separator_id {validation.shown(separator_id)} does not fit in the sequences' "
            f"{sequences.dtype} (at most {largest:,}): compared with them it would be read as "
            f"another id; store the sequences as int64"
        )
    if not isinstance(over, str) or over not in LOSS_OVER:
        raise ValueError(f"over must be one of {LOSS_OVER}, got {over!r}")
    return _loss_targets(sequences, separator_id, over)


def _loss_targets(sequences: torch.Tensor, separator_id: int, over: str) -> torch.Tensor:
    targets = sequences[:, 1:]  # position t predicts token t + 1
    if over == "sequence":
        return targets
    before_answer = (sequences == separator_id).long().cumsum(1)[:, :-1] == 0  # (B, T - 1)
    return targets.masked_fill(before_answer, PAD_ID)


def prefix_lm_mask(prompt_lengths: torch.Tensor, size: int) -> torch.Tensor:
    """(B, size, size), True = may attend: causal, except that every position of a row's
    prompt (its first prompt_lengths[b] positions) may also read the whole prompt."""
    size = validation.whole_number(size, "size")
    validation.dense_tensor(prompt_lengths, "prompt_lengths", "(B,)")
    if prompt_lengths.dim() != 1 or prompt_lengths.dtype not in ID_DTYPES:
        raise ValueError(
            f"prompt_lengths must be whole numbers (B,) of one of "
            f"{', '.join(map(str, ID_DTYPES))}, got {prompt_lengths.dtype} "
            f"{tuple(prompt_lengths.shape)}"
        )
    rows = max(len(prompt_lengths), 1)  # torch builds a size x size mask even for no rows
    if rows * size * size > MOST_MASK_BYTES:  # bool: a byte an entry
        raise ValueError(
            f"a mask of {rows:,} x {shown_count(size)} x {shown_count(size)} would take "
            f"{shown_count(rows * size * size)} bytes, more than {MOST_MASK_BYTES:,} "
            f"({MOST_MASK_BYTES // 2**20} MiB, 1,024 rows of this chapter's "
            f"{RECIPE.context_length} positions): size is the length of one sequence"
        )
    lengths = prompt_lengths.long()  # compared with size in int64: 128 as int8 would wrap
    if ((lengths < 0) | (lengths > size)).any():
        raise ValueError(
            f"prompt_lengths must lie in 0..{size}, got {validation.shown(lengths.tolist())}"
        )
    positions = torch.arange(size, device=lengths.device)
    in_prompt = positions[None, :] < lengths[:, None]  # (B, size)
    both_in_prompt = in_prompt[:, :, None] & in_prompt[:, None, :]  # (B, queries, keys)
    return causal_mask(size, prompt_lengths.device)[None] | both_in_prompt


@plainly  # ids on the cpu, whatever default device the caller set
def text_prompt(tokenizer: Tokenizer, separator_id: int, text: str, task: str) -> torch.Tensor:
    """(1, P) ids: "translate" -> <bos> English <sep>; "continue" -> <bos> English (the start
    of a sentence for a model that learned to write English)."""
    if not isinstance(task, str) or task not in ("translate", "continue"):
        raise ValueError(f"task must be 'translate' or 'continue', got {task!r}")
    separator_id = _check_separator_of(tokenizer, separator_id)
    english = sentence_ids(tokenizer, text)[0, :-1].tolist()  # without its <eos>
    return torch.tensor([[BOS_ID, *english] + ([separator_id] if task == "translate" else [])])


class DecoderOnlyTranslator(GPT):
    """A GPT that translates: the prompt <bos> English <sep>, then greedy decoding or beam
    search through chapter 08's decode_step / select interface."""

    def __init__(self, config: GPTConfig, separator_id: int):
        separator_id = _check_separator_in(config, separator_id)  # before GPT's initial weights
        super().__init__(config)
        self.separator_id = separator_id

    def prompts(self, source: torch.Tensor) -> list[list[int]]:
        """Chapter 09's source ids (B, S), English then <eos> then pads, as prompts
        <bos> English <sep>, one list of ids per row."""
        validation.token_ids(source, "source", self.config.vocab_size, "(B, S)")
        if not source.numel():
            raise ValueError(f"source holds no tokens: shape {tuple(source.shape)}")
        prompts = []
        for index, row in enumerate(source.tolist()):
            ends = [i for i, token in enumerate(row) if token in (EOS_ID, PAD_ID)]
            english = row[: ends[0]] if ends else row
            if any(token != PAD_ID for token in row[len(english) + 1 :]):
                raise ValueError(
                    f"source row {index} holds tokens after its {FRAMING[row[len(english)]]} at "
                    f"position {len(english)}: a row is English, then <eos>, then <pad> only"
                )
            if not english:
                raise ValueError(f"source row {index} holds no English token: nothing to translate")
            if self.separator_id in english or BOS_ID in english:
                raise ValueError(f"source row {index} holds <bos> or <sep> inside the English")
            prompts.append([BOS_ID, *english, self.separator_id])
        longest = max(map(len, prompts))
        if longest >= self.config.context_length:
            raise ValueError(
                f"a prompt of {longest} tokens leaves no room in the context of "
                f"{self.config.context_length}"
            )
        return prompts

    def start_state(self, prompt: torch.Tensor) -> dict:
        """prompt (B, P), all rows the same length: every token but the last goes into the
        caches; the first decoding step reads the last one, <sep>."""
        self.check_ids(prompt, name="prompt")
        caches = self.new_caches()
        if prompt.shape[1] > 1:
            self(prompt[:, :-1], caches)
        return {"caches": caches, "last": prompt[:, -1], "step": 0, "cached": prompt.shape[1] - 1}

    def _check_state(self, state: object) -> dict:
        """state as _check_state_shape checks it, with caches this model's layers filled
        (GPT._check_caches) for the rows of its last ids."""
        _check_state_shape(state)
        validation.token_ids(state["last"], "state['last']", self.config.vocab_size, "(B,)", 1)
        positions, rows = self._check_caches(state["caches"])
        if rows not in (None, len(state["last"])):
            raise ValueError(
                f"the state's caches hold {rows} rows but its last ids {len(state['last'])}: "
                f"a state start_state, decode_step or select made keeps them together"
            )
        if positions != state["cached"]:
            raise ValueError(
                f"the state's caches hold {positions} positions, not the {state['cached']} it "
                f"was made with: decode_step grows a state's caches in place, so a state read "
                f"once is spent; go on from the state decode_step returned (select copies one)"
            )
        return state

    def decode_step(self, state: dict, previous: torch.Tensor) -> tuple[torch.Tensor, dict]:
        """previous ids (B,) -> logits (B, V) for the next token; the caches grow by one. At
        step 0 the token read is the prompt's <sep> (an encoder-decoder reads <bos> there)."""
        batch = len(self._check_state(state)["last"])
        check_previous_ids(previous, batch, self.config.vocab_size)
        newest = state["last"] if state["step"] == 0 else previous
        logits = self(newest[:, None], state["caches"])[:, -1]  # (B, V)
        return logits, {**state, "step": state["step"] + 1, "cached": state["cached"] + 1}

    def select(self, state: dict, rows: torch.Tensor) -> dict:
        """The state of the given rows (beams), caches included, in that order. rows: int64 or
        int32 indices (torch reads bool and uint8 as a mask)."""
        beams = len(self._check_state(state)["last"])
        validation.dense_tensor(rows, "rows", "(N,)")
        if rows.dim() != 1 or rows.is_floating_point() or rows.is_complex() or not len(rows):
            raise ValueError(
                f"rows must be the beam rows to keep, (N,) whole numbers, N >= 1, got "
                f"{rows.dtype} {tuple(rows.shape)}"
            )
        if rows.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"rows must name beam rows 0..{beams - 1} of the state by int64 or int32 "
                f"indices, got {rows.dtype} (torch would read bool or uint8 as a mask)"
            )
        rows = rows.long()
        if ((rows < 0) | (rows >= beams)).any():
            raise ValueError(
                f"rows must name beam rows 0..{beams - 1} of the state (it holds {beams}), got "
                f"{validation.shown(rows.tolist())}"
            )
        caches = []
        for cache in state["caches"]:
            chosen = copy.copy(cache)  # still the model's that made or filled the cache
            if cache.keys is not None:
                chosen.keys, chosen.values = cache.keys[rows], cache.values[rows]
            caches.append(chosen)
        return {**state, "caches": caches, "last": state["last"][rows]}

    @torch.no_grad()
    def translate_ids(
        self,
        source: torch.Tensor,
        beam_size: int = 1,
        length_penalty: float = 1.0,
        max_len: int | None = None,
    ) -> torch.Tensor:
        """Source ids (B, S), as chapter 09's models take them -> output ids (B, <= max_len),
        padded after <eos>: greedy with beam_size 1. max_len defaults to 2 S + 5. Prompts of
        the same length are decoded together, so no prompt needs padding."""
        prompts = self.prompts(source)
        beam_size = check_beam_size(beam_size)
        check_length_penalty(length_penalty)
        if max_len is None:
            max_len = 2 * source.shape[1] + 5
        max_len = validation.whole_number(max_len, "max_len")
        with evaluating(self):
            groups = {}
            for index, prompt in enumerate(prompts):
                groups.setdefault(len(prompt), []).append(index)
            outputs = [None] * len(prompts)
            for rows in groups.values():
                prompt = torch.tensor([prompts[i] for i in rows], device=source.device)
                written = self._continue(prompt, beam_size, length_penalty, max_len)
                for i, row in zip(rows, written, strict=True):
                    outputs[i] = row
            width = max(len(row) for row in outputs)
            padded = torch.full((len(outputs), width), PAD_ID, dtype=torch.long)
            for i, row in enumerate(outputs):
                padded[i, : len(row)] = row
            return padded.to(source.device)

    def _continue(self, prompt, beam_size, length_penalty, max_len) -> torch.Tensor:
        steps = min(max_len, self.config.context_length - prompt.shape[1] + 1)
        state = self.start_state(prompt)
        if beam_size == 1:
            return translate(self.decode_step, state, len(prompt), steps, prompt.device)
        found = beam_search(
            self.decode_step, state, self.select, len(prompt), steps, beam_size, prompt.device
        )
        return choose_hypothesis(*found, length_penalty)[0]


def build_translator(vocab_size: int, separator_id: int, recipe: Recipe = RECIPE):
    return DecoderOnlyTranslator(check_recipe(recipe).model_config(vocab_size), separator_id)


def check_recipe(recipe: object) -> Recipe:
    if not isinstance(recipe, Recipe):
        raise TypeError(f"recipe must be a Recipe, got {type(recipe).__name__}")
    return recipe


def check_training_context(context_length: int, name: str) -> None:
    """Refuse, before any data is read, a context too short for the training sequences: the
    model reads each of them but its last token."""
    context_length = validation.whole_number(context_length, name)
    needed = LONGEST_TRAINING_SEQUENCE - 1
    if context_length < needed:
        raise ValueError(
            f"{name} is {context_length}, but the longest training sequence has "
            f"{LONGEST_TRAINING_SEQUENCE} tokens (<bos> English <sep> French <eos>), of which "
            f"the model reads all but the last: a context_length of at least {needed} trains"
        )


def model_path(name: str) -> Path:
    check_name(name, MODELS)
    return DATA_DIR / f"{name}.pt"


def training_loss(
    model: GPT, sequences: torch.Tensor, separator_id: int, over: str, label_smoothing: float
) -> tuple[torch.Tensor, int]:
    """Mean cross-entropy over the scored positions, and how many there were. Only those
    positions go through the output layer (an 8,001-way product per position)."""
    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    label_smoothing = validation.probability(label_smoothing, "label_smoothing")
    targets = loss_targets(sequences, separator_id, over).long()  # (B, T - 1)
    if isinstance(model, DecoderOnlyTranslator) and separator_id != model.separator_id:
        raise ValueError(
            f"separator_id is {validation.shown(separator_id)}, but this translator's <sep> is "
            f"{model.separator_id}: the loss would score the wrong tokens; pass "
            "model.separator_id"
        )
    ids = validation.token_ids(sequences.long(), "sequences", model.config.vocab_size, "(B, T)")
    if sequences.shape[1] - 1 > model.config.context_length:
        raise ValueError(
            f"sequences of {sequences.shape[1]} tokens do not fit the model: it reads all but "
            f"the last, {sequences.shape[1] - 1} positions, more than its context of "
            f"{model.config.context_length}; train a model whose context_length is at least "
            f"{sequences.shape[1] - 1}"
        )
    if over == "answer":
        has_answer = (sequences == separator_id).any(1) | (sequences == PAD_ID).all(1)
        if not has_answer.all():
            row = int((~has_answer).nonzero()[0, 0])
            raise ValueError(
                f"sequences row {row} holds no <sep> ({separator_id}): it has no answer to score"
            )
    if not (targets != PAD_ID).any():
        raise ValueError(f"sequences hold no token to score (loss over the {over}): only pads")
    model.check_ids(ids[:, :-1])
    return _training_loss(model, ids, targets, label_smoothing)


def _training_loss(
    model: GPT, sequences: torch.Tensor, targets: torch.Tensor, label_smoothing: float
) -> tuple[torch.Tensor, int]:
    """training_loss of int64 sequences it took and their loss_targets."""
    scored = targets != PAD_ID  # (B, T - 1)
    features = model._features(sequences[:, :-1], None, 0)  # (B, T - 1, d_model)
    logits = model.output(features[scored])  # (scored positions, V)
    model._refuse_nonfinite(logits, None, 0)
    if logits.dtype in (torch.float16, torch.bfloat16):  # autocast's products: a float32 loss
        logits = logits.float()
    loss = F.cross_entropy(logits, targets[scored], label_smoothing=label_smoothing)
    return loss, int(scored.sum())


def train_decoder_only(
    model: DecoderOnlyTranslator,
    tokenizer: Tokenizer,
    recipe: Recipe = RECIPE,
    over: str = "answer",
    device: str | torch.device = "cpu",
    log=print,
    after_epoch=None,
) -> dict:
    """Chapter 09's batches (the same pairs in the same order), each pair as one sequence;
    AdamW with a warm-up and a cosine decay. after_epoch(history) answers whether to go on, as
    for translation.train_translator: False stops; True or None goes on."""
    if not isinstance(model, DecoderOnlyTranslator):
        raise TypeError(f"model must be a DecoderOnlyTranslator, got {type(model).__name__}")
    check_recipe(recipe)
    check_training_context(model.config.context_length, "the model's context_length")
    check_tokenizer(tokenizer)
    if tokenizer.get_vocab_size() > model.config.vocab_size:
        raise ValueError(
            f"the tokenizer's {tokenizer.get_vocab_size()} tokens do not fit the model's "
            f"vocabulary of {model.config.vocab_size}"
        )
    if not isinstance(over, str) or over not in LOSS_OVER:
        raise ValueError(f"over must be one of {LOSS_OVER}, got {over!r}")
    if not callable(log) or not (after_epoch is None or callable(after_epoch)):
        raise TypeError(
            f"log must be a function and after_epoch a function or None, got {log!r:.40} "
            f"and {after_epoch!r:.40}"
        )
    device = check_training_device(device)
    with torch.random.fork_rng(devices=range(torch.cuda.device_count())):  # not the caller's
        return _train(model, tokenizer, recipe, over, device, log, after_epoch)


def check_training_device(device: object) -> torch.device:
    """device as a torch.device, if this machine has it and torch.autocast runs on it: checked
    before any work, so that a device that cannot train fails at once."""
    device = check_device(device)
    if not torch.amp.is_autocast_available(device.type):
        raise ValueError(
            f"device {str(device)!r} cannot train: torch.autocast does not run on it; use "
            f"'cpu' or 'cuda'"
        )
    try:
        torch.empty(0, device=device)
    except Exception:  # torch says so in many ways: RuntimeError, ModuleNotFoundError for hpu
        seen = f" (torch sees {torch.cuda.device_count()} GPUs)" if device.type == "cuda" else ""
        raise ValueError(
            f"device {str(device)!r} is not available on this machine{seen}; use 'cpu'"
        ) from None
    return device


def _train(model, tokenizer, recipe, over, device, log, after_epoch) -> dict:
    from time import perf_counter

    from tqdm.auto import tqdm

    torch.manual_seed(recipe.seed)
    model.to(device).train()
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay
    )
    pairs, generator = load_pairs("train"), torch.Generator().manual_seed(recipe.seed)
    batches_per_epoch = len(list(_batches(pairs, tokenizer, recipe.max_tokens, None)))
    total_steps = recipe.epochs * batches_per_epoch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: _learning_rate_factor(step, total_steps, recipe.warmup_steps)
    )
    history = {"loss": [], "valid_bleu": [], "seconds": 0.0, "device": str(device)}
    history["threads"] = torch.get_num_threads()
    start = perf_counter()
    for epoch in range(recipe.epochs):
        total, count = 0.0, 0
        batches = list(_batches(pairs, tokenizer, recipe.max_tokens, generator))
        for source, target in tqdm(batches, desc=f"epoch {epoch + 1}/{recipe.epochs}"):
            english = [row[: row.index(EOS_ID)] for row in source.tolist()]
            french = [row[1 : row.index(EOS_ID)] for row in target.tolist()]
            sequences = _build_sequences(english, french, model.separator_id).to(device)
            targets = _loss_targets(sequences, model.separator_id, over)
            with torch.autocast(device.type, torch.bfloat16, enabled=recipe.bfloat16):
                loss, tokens = _training_loss(model, sequences, targets, recipe.label_smoothing)
            clipped_step(model, optimizer, schedule, loss)
            total, count = total + loss.item() * tokens, count + tokens
        seconds = perf_counter() - start
        if not close_epoch(
            model, tokenizer, history, total / count, seconds, device, log, after_epoch
        ):
            break
    return history


def save_translator(path: str | Path, model: DecoderOnlyTranslator, history: dict) -> None:
    """Float16 weights, the tied matrix once; the configuration; <sep>'s id; the history, as
    load_translator checks it (its loss_over names the model)."""
    path = savable_path(path)
    if not isinstance(model, DecoderOnlyTranslator):
        raise TypeError(f"model must be a DecoderOnlyTranslator, got {type(model).__name__}")
    if not isinstance(history, dict):
        raise TypeError(f"history must be a dict, got {type(history).__name__}")
    if any(weight.is_meta for weight in model.state_dict().values()):
        raise CheckpointError(
            f"cannot save {path}: the model's weights are on the meta device, which holds no "
            f"values (model.to('meta') also unties the output layer): save the model itself"
        )
    if model.output.weight is not model.tokens.weight:
        raise CheckpointError(
            f"cannot save {path}: model.output.weight is not model.tokens.weight, but the file "
            f"stores the tied matrix once (a loaded model's output layer is its token embedding)"
        )
    try:
        check_saved_separator(model.config, model.separator_id)
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"cannot save {path}: model.separator_id does not fit its config ({error})"
        ) from None
    named = {covered: name for name, covered in MODELS.items()}  # what the loss covered -> model
    over = history.get("loss_over")
    if not isinstance(over, str) or over not in named:
        raise CheckpointError(
            f"cannot save {path}: its history's loss_over must say what the loss covered, one "
            f"of {list(LOSS_OVER)} (it names the model), found "
            f"{validation.shown(over) if 'loss_over' in history else 'none'}"
        )
    try:
        check_history(path, history, named[over])
    except CheckpointError as error:
        raise CheckpointError(f"cannot save {error}") from None
    weights = {key: t.half() for key, t in model.state_dict().items() if key != TIED_COPY}
    for key, half in weights.items():
        weight = model.state_dict()[key]
        if weight.count_nonzero() and not half.count_nonzero():
            raise CheckpointError(
                f"cannot save {path}: the weight {key} rounds to all zeros in float16, the "
                f"file's dtype (its largest magnitude, {weight.abs().max().item():.1e}, is "
                f"below float16's smallest, about 6e-8): the loaded model would differ"
            )
    contents = {
        "config": asdict(model.config),
        "separator_id": model.separator_id,
        "weights": weights,
        "history": history,
    }
    try:
        save_checkpoint(path, contents)
    except OSError as error:
        raise CheckpointError(f"cannot save {path}: {error.strerror or error}") from None


def load_translator(
    name: str = "decoder-only", path: str | Path | None = None
) -> tuple[DecoderOnlyTranslator, dict]:
    """(model in eval mode, history), after the checksum, the configuration and what the
    loss covered (it names the model) are checked."""
    check_name(name, MODELS)
    path = model_path(name) if path is None else path  # load_checkpoint reads an empty one
    keys = ("config", "separator_id", "weights", "history")
    saved = load_checkpoint(path, keys, "make translation-models")
    config, history = saved["config"], saved["history"]
    known = {f.name for f in fields(GPTConfig)}
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: its config is not a GPT's: {config!r:.200}")
    unknown = sorted(map(repr, set(config) - known))
    if unknown:
        raise CheckpointError(
            f"{path}: its config is not a GPT's: it holds {', '.join(unknown):.200}, which "
            f"GPTConfig has no field for"
        )
    required = [f.name for f in fields(GPTConfig) if f.default is MISSING]
    lacking = [name for name in required if name not in config]
    if lacking:
        raise CheckpointError(f"{path}: its config lacks {', '.join(lacking)}")
    check_history(path, history, name)
    try:
        config = GPTConfig(**config)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{path}: its config is not a model's ({error})") from None
    if config.build_count() > MAX_CHECKPOINT_PARAMETERS:  # counted before any memory is taken
        table = config.sinusoid_count()
        table = (
            f" and a sinusoid table of {table:,} numbers (each counted as 4: it is built in "
            f"float64)"
            if table
            else ""
        )
        raise CheckpointError(
            f"{path}: its config asks for {config.parameter_count():,} parameters{table}, more "
            f"than a checkpoint of at most 16 MB in float16 can hold "
            f"({MAX_CHECKPOINT_PARAMETERS:,}): a file that small builds no larger model"
        )
    try:
        separator_id = check_saved_separator(config, saved["separator_id"])
    except (TypeError, ValueError) as error:
        raise CheckpointError(
            f"{path}: its separator_id does not fit its config ({error})"
        ) from None
    # initial weights, overwritten: drawn from a random state not the caller's, in float32 with
    # gradients, on the cpu, whatever default dtype, device or inference mode the caller set
    with keeping_random_state(), plain_torch(), trainable_float32():
        model = DecoderOnlyTranslator(config, separator_id)
    weights = float_weights(saved["weights"], path)
    if TIED_COPY in weights:
        raise CheckpointError(
            f"{path}: it stores {TIED_COPY}, which is tokens.weight itself (tied, saved once): "
            f"not a file save_translator wrote"
        )
    if "tokens.weight" in weights:
        weights[TIED_COPY] = weights["tokens.weight"]
    load_weights(model, weights, path)
    return model.eval(), history


HISTORY_KEYS = ("loss", "valid_bleu", "seconds", "device", "loss_over")  # what training writes


def check_history(path: Path, history: object, name: str) -> None:
    """A history as training writes it for the model `name`, or a CheckpointError naming the
    key: one loss (>= 0) and one validation BLEU (0..100) per epoch, finite; the seconds
    (>= 0); the device, a text; and what the loss covered, the one `name` says."""
    check_name(name, MODELS)
    if not isinstance(history, dict):
        raise CheckpointError(
            f"{path}: its history should be a dict, found {type(history).__name__}"
        )
    lacking = [key for key in HISTORY_KEYS if key not in history]
    if lacking:
        raise CheckpointError(f"{path}: its history lacks {', '.join(lacking)}")
    if not isinstance(history["loss_over"], str) or history["loss_over"] not in LOSS_OVER:
        raise CheckpointError(
            f"{path}: its history's loss_over should be {' or '.join(map(repr, LOSS_OVER))} (a "
            f"str), found {validation.shown(history['loss_over'])}"
        )
    if history["loss_over"] != MODELS[name]:
        raise CheckpointError(
            f"{path}: its history records a loss over {validation.shown(history['loss_over'])}, "
            f"but {name} is the model whose loss covered the {MODELS[name]}: is it another "
            f"model's file?"
        )
    epochs = history["loss"]
    if not isinstance(epochs, list) or not epochs:
        raise CheckpointError(
            f"{path}: its history's loss should be a list of one number per epoch, found "
            f"{validation.shown(epochs)}"
        )
    for key, high in (("loss", math.inf), ("valid_bleu", 100.0)):
        column = history[key]
        if not isinstance(column, list) or len(column) != len(epochs):
            raise CheckpointError(
                f"{path}: its history's {key} should be a list of one number per epoch "
                f"({len(epochs)} epochs), found {validation.shown(column)}"
            )
        refused = [x for x in column if not validation.number_in(x, 0.0, high)]
        if refused:
            raise CheckpointError(
                f"{path}: its history's {key} should hold finite numbers in 0..{high:g}, found "
                f"{_refused_number(refused[0])}"
            )
    if not validation.number_in(history["seconds"], 0.0, math.inf):
        raise CheckpointError(
            f"{path}: its history's seconds should be a finite number >= 0, found "
            f"{_refused_number(history['seconds'])}"
        )
    if not isinstance(history["device"], str):
        raise CheckpointError(
            f"{path}: its history's device should be a device's name (a str), found "
            f"{validation.shown(history['device'])}"
        )


def _refused_number(value: object) -> str:
    """A number a history refuses, as its message shows it: a number of another type than
    Python's int and float (numpy's, say) named, with how to convert it."""
    shown = validation.shown(value)
    if isinstance(value, numbers.Real) and type(value) not in (int, float, bool):
        kind = f"{type(value).__module__}.{type(value).__name__}"
        return f"{shown}, a {kind}: a Python int or float is expected (convert it with float())"
    return shown


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
    check_training_context(recipe.context_length, "recipe.context_length")
    device = check_training_device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    path = savable_path(model_path(name) if path is None else path)
    check_deadline(deadline_minutes)
    tokenizer, separator_id = load_tokenizer_with_separator()
    with torch.random.fork_rng(devices=[]):  # the initial weights: not the caller's numbers
        torch.manual_seed(recipe.seed)
        model = build_translator(tokenizer.get_vocab_size(), separator_id, recipe)

    def after_epoch(history: dict) -> bool:
        history["recipe"] = asdict(recipe)
        history["loss_over"] = MODELS[name]
        save_translator(path, model, history)
        return deadline_minutes is None or history["seconds"] <= 60 * deadline_minutes

    return train_decoder_only(
        model, tokenizer, recipe, MODELS[name], device, after_epoch=after_epoch
    )


def written_text(tokenizer: Tokenizer, ids: list[int], separator_id: int) -> str:
    """What a model wrote, up to its first <eos>, with each <sep> shown as <sep> between
    spaces. ids: a list (or a 1-D tensor) of at most MOST_WRITTEN_IDS ids of the tokenizer's
    vocabulary."""
    separator_id = _check_separator_of(tokenizer, separator_id)
    is_row_tensor = (
        isinstance(ids, torch.Tensor) and validation.dense_tensor(ids, "ids", "(T,)").dim() == 1
    )
    if (is_row_tensor or isinstance(ids, list | tuple)) and len(ids) > MOST_WRITTEN_IDS:
        raise ValueError(
            f"ids hold {shown_count(len(ids))} tokens, more than {MOST_WRITTEN_IDS:,} (1,024 "
            f"contexts of {RECIPE.context_length}; a model writes one at most): is a size mistyped?"
        )
    if is_row_tensor:
        ids = ids.tolist()
    vocab_size = tokenizer.get_vocab_size()
    if not isinstance(ids, list | tuple) or not all(
        isinstance(token, numbers.Integral) and not isinstance(token, bool) for token in ids
    ):
        raise TypeError(f"ids must be a list of token ids, got {ids!r:.60}")
    outside = [t for t in ids if not 0 <= t < vocab_size and t != separator_id]
    if outside:
        raise ValueError(
            f"ids hold {validation.shown(outside[0])}, outside the tokenizer's vocabulary "
            f"0..{vocab_size - 1}"
        )
    ids = list(ids)
    if EOS_ID in ids:
        ids = ids[: ids.index(EOS_ID)]
    pieces, part = [], []
    for token in [*ids, separator_id]:  # a last <sep> closes the last part
        if token == separator_id:
            pieces += [SEPARATOR, tokenizer.decode(part)]
            part = []
        else:
            part.append(token)
    return " ".join(piece for piece in pieces[1:] if piece)


def sample_texts(
    model: DecoderOnlyTranslator,
    tokenizer: Tokenizer,
    prompt: torch.Tensor,
    samples: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    read: ReadPrompt | None = None,
) -> list[str]:
    """`samples` continuations of one prompt (1, P), drawn together with a generator seeded
    with `seed` (temperature 0: greedy, all the same), each cut at its first <eos>. read:
    gpt.read_prompt(model, prompt.expand(samples, -1)), kept to sample the same prompt again
    without reading it again."""
    if not isinstance(model, DecoderOnlyTranslator):
        raise TypeError(f"model must be a DecoderOnlyTranslator, got {type(model).__name__}")
    check_tokenizer(tokenizer)
    model.check_ids(prompt, name="prompt")
    if len(prompt) != 1:
        raise ValueError(f"prompt must be one row (1, P), got {tuple(prompt.shape)}")
    samples = validation.whole_number(samples, "samples")
    max_new_tokens = validation.whole_number(max_new_tokens, "max_new_tokens", minimum=0)
    check_room(model.config, prompt.shape[1], max_new_tokens)
    longest = prompt.shape[1] + max_new_tokens
    check_forward_size(model.config, samples, prompt.shape[1], longest, "samples")
    if max_new_tokens:
        check_sampling_size(model.config, samples, temperature, "samples")
    seed = validation.seed(seed)
    sampling = checked_sampling(temperature, top_k, top_p, model.config.vocab_size)
    if read is not None:
        _check_read(model, prompt.expand(samples, -1), read, use_cache=True)
    return _sample_texts(model, tokenizer, prompt, samples, max_new_tokens, sampling, seed, read)


def _sample_texts(model, tokenizer, prompt, samples, max_new_tokens, sampling, seed, read):
    """sample_texts' computation, for arguments its checks have passed (sampling: as
    gpt.checked_sampling gives it; read: current, of the prompt expanded to `samples` rows)."""
    generator = torch.Generator(prompt.device).manual_seed(seed)
    written = _generate(
        model,
        prompt.expand(samples, -1),
        max_new_tokens,
        sampling,
        generator,
        use_cache=True,
        stop_id=EOS_ID,  # no need to write on once every sample has ended
        read=read,
    )[:, prompt.shape[1] :]  # (samples, max_new_tokens)
    return [written_text(tokenizer, row, model.separator_id) for row in written.tolist()]


def main() -> None:
    """python -m helpers.decoder_only NAME: train the named model with its recipe and save it
    in data/ (make translation-models runs it for each)."""
    parser = argparse.ArgumentParser(description="Train the named model and save it in data/.")
    parser.add_argument("name", choices=list(MODELS))
    train_and_save(parser.parse_args().name)


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_separator_of(tokenizer: Tokenizer, separator_id: object) -> int:
    """check_separator(separator_id), if it is the tokenizer's <sep> when it holds one, or
    else in its vocabulary or the next id, which add_separator gives <sep>."""
    check_tokenizer(tokenizer)
    separator_id = check_separator(separator_id)
    vocab_size = tokenizer.get_vocab_size()
    if separator_id > vocab_size:
        raise ValueError(
            f"separator_id {validation.shown(separator_id)} is outside the tokenizer's vocabulary "
            f"0..{vocab_size - 1}, and not the next id ({vocab_size}) that <sep> would take"
        )
    held = tokenizer.token_to_id(SEPARATOR)
    if held is not None and separator_id == vocab_size:
        raise ValueError(
            f"separator_id {separator_id} is outside the tokenizer's vocabulary "
            f"0..{vocab_size - 1}: its {SEPARATOR} is {held}"
        )
    if held is not None and separator_id != held:
        raise ValueError(
            f"separator_id must be the tokenizer's {SEPARATOR}, {held}, got {separator_id}: the "
            f"id of {tokenizer.id_to_token(separator_id)!r}"
        )
    return separator_id


def _check_separator_in(config: object, separator_id: object) -> int:
    """check_separator(separator_id), inside config's vocabulary when config is a GPTConfig."""
    separator_id = check_separator(separator_id)
    if isinstance(config, GPTConfig) and separator_id >= config.vocab_size:
        raise ValueError(
            f"separator_id {validation.shown(separator_id)} is outside the vocabulary of "
            f"{config.vocab_size}"
        )
    return separator_id


def _check_state_shape(state: object) -> dict:
    """A decoding state as start_state, decode_step and select make it: caches (a list),
    last (the prompts' last ids, (B,), integers), step (the tokens decoded so far, >= 0) and
    cached (the positions its caches hold when it is read, >= 0)."""
    if not isinstance(state, dict) or not {"caches", "last", "step", "cached"} <= set(state):
        found = validation.shown(state) if isinstance(state, dict) else type(state).__name__
        raise TypeError(
            f"state must be the dict start_state made (caches, last, step, cached), got {found:.80}"
        )
    last, step, cached = state["last"], state["step"], state["cached"]
    if (
        not isinstance(state["caches"], list | tuple)
        or not isinstance(last, torch.Tensor)
        or last.dim() != 1
        or last.dtype not in (torch.int64, torch.int32)
        or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) for n in (step, cached))
        or step < 0
        or cached < 0
    ):
        raise TypeError(
            f"state must be the dict start_state made: caches a list, last the prompts' last "
            f"ids (B,) as int64 or int32, step and cached counts >= 0; got caches "
            f"{type(state['caches']).__name__}, last {validation.shown(last):.40}, step "
            f"{validation.shown(step):.20}, cached {validation.shown(cached):.20}"
        )
    return state


def check_separator(separator_id: object) -> int:
    """<sep>'s id as an int: a whole number an int64 tensor holds, none of <pad>, <bos>,
    <eos>."""
    separator_id = validation.whole_number(separator_id, "separator_id", minimum=0)
    if separator_id >= 2**63:
        raise ValueError(
            f"separator_id must be an id below 2^63 (int64), got {validation.shown(separator_id)}"
        )
    if separator_id in FRAMING:
        raise ValueError(
            f"separator_id must be its own token, got {separator_id}, the id of "
            f"{FRAMING[separator_id]}"
        )
    return separator_id


def check_saved_separator(config: GPTConfig, separator_id: object) -> int:
    """separator_id as a translator's file holds it: _check_separator_in's, and chapter 08's
    <sep> in a vocabulary of chapter 08's tokens and <sep>."""
    separator_id = _check_separator_in(config, separator_id)
    tokenizer, held = load_tokenizer_with_separator()
    if config.vocab_size == tokenizer.get_vocab_size() and separator_id != held:
        raise ValueError(
            f"separator_id is {separator_id}, but in a vocabulary of {config.vocab_size:,} "
            f"(chapter 08's tokens and {SEPARATOR}) {SEPARATOR} is {held}"
        )
    return separator_id


if __name__ == "__main__":
    main()
