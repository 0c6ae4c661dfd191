"""English–French sentence pairs for chapters 08 and 09: the data, held out honestly, the subword
tokenizer, batches, training, greedy and beam decoding, and BLEU.

The pairs come from the Tatoeba Project via www.manythings.org/anki (CC BY 2.0 FR; see
data/README.md). The test and validation sets are held out *by English sentence*: every
translation of a held-out English sentence stays out of training, and so does every training
pair whose French sentence is the translation of a held-out one.
"""

import argparse
import functools
import gzip
import hashlib
import inspect
import math
import numbers
import re
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import sacrebleu
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from helpers import validation

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA_DIR / "tatoeba-eng-fra.tsv.gz"
TOKENIZER_FILE = DATA_DIR / "eng-fra-bpe.json"

MAX_WORDS = 12  # English sentences of at most 12 words: what a small model learns well
HELD_OUT_SENTENCES = 1000  # distinct English sentences in each of "valid" and "test"
VOCAB_SIZE = 8000  # one BPE vocabulary shared by both languages
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(len(SPECIALS))
SPLITS = ("train", "valid", "test")
MAX_BEAM_SIZE = 256  # (B, k, V) float64 scores: 256 beams of an 8,000-token vocabulary = 16 MB

_SPACES = re.compile(r"[\s\u00a0\u2009\u202f]+")  # French puts narrow no-break spaces before !?:;
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u00ad"))  # zero-width space, soft hyphen
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean(text: str) -> str:
    """NFC, one kind of space, one kind of apostrophe, nothing invisible."""
    if not isinstance(text, str):
        raise TypeError(f"clean takes text (a str), got {type(text).__name__}")
    text = unicodedata.normalize("NFC", text).translate(_INVISIBLE)
    text = text.replace("\u2019", "'").replace("\u2018", "'")
    return _SPACES.sub(" ", text).strip()


@functools.cache
def _short_pairs() -> tuple[tuple[str, str], ...]:
    with gzip.open(CORPUS, "rt", encoding="utf-8") as corpus:
        rows = [line.split("\t") for line in corpus.read().splitlines()]
    pairs = ((clean(english), clean(french)) for english, french in rows)
    return tuple(dict.fromkeys(p for p in pairs if len(p[0].split()) <= MAX_WORDS))


def _held_out_rank(english: str) -> str:
    """A fixed pseudo-random order of the English sentences, the same on every machine."""
    return hashlib.sha256(english.encode("utf-8")).hexdigest()


@functools.cache
def _splits() -> dict[str, tuple[tuple[str, str], ...]]:
    pairs = _short_pairs()
    english = sorted({e for e, _ in pairs}, key=_held_out_rank)
    held = {
        "test": set(english[:HELD_OUT_SENTENCES]),
        "valid": set(english[HELD_OUT_SENTENCES : 2 * HELD_OUT_SENTENCES]),
    }
    held_french = {f for e, f in pairs if e in held["test"] or e in held["valid"]}
    return {
        "train": tuple(
            (e, f)
            for e, f in pairs
            if e not in held["test"] and e not in held["valid"] and f not in held_french
        ),
        "valid": tuple((e, f) for e, f in pairs if e in held["valid"]),
        "test": tuple((e, f) for e, f in pairs if e in held["test"]),
    }


def load_pairs(split: str) -> list[tuple[str, str]]:
    """(english, french) pairs of one split: "train", "valid" or "test"."""
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return list(_splits()[split])


def grouped_references(split: str) -> tuple[list[str], list[list[str]]]:
    """The split's distinct English sentences, each with all of its French translations."""
    references: dict[str, list[str]] = {}
    for english, french in load_pairs(split):
        references.setdefault(english, []).append(french)
    return list(references), list(references.values())


def bleu(
    hypotheses: list[str], references: list[list[str]]
) -> tuple[sacrebleu.metrics.bleu.BLEUScore, str]:
    """Corpus BLEU (sacrebleu, default 13a tokenisation) against every reference of a sentence,
    and sacrebleu's signature of how it was computed.

    hypotheses: one string per sentence; references: one list of strings per sentence (its
    reference translations, at least one each)."""
    hypotheses = _text_list(hypotheses, "hypotheses", "translated")
    if isinstance(references, str | bytes) or not isinstance(references, list | tuple):
        raise TypeError(
            f"references must be a list of lists of strings (all references of each sentence), "
            f"got {type(references).__name__}"
        )
    for index, refs in enumerate(references):
        if isinstance(refs, str):
            raise TypeError(
                f"references must be a list of lists of strings: item {index} is one string; "
                f"give each sentence its list, [[reference] for reference in references]"
            )
        _text_list(refs, f"references[{index}]", "reference")
        if not refs:
            raise ValueError(f"references[{index}] is empty: each sentence needs a reference")
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} reference lists")
    if not hypotheses:
        raise ValueError("no hypotheses to score: BLEU needs at least one sentence")
    most = max(map(len, references), default=0)
    streams = [[refs[i] if i < len(refs) else None for refs in references] for i in range(most)]
    metric = sacrebleu.BLEU()
    score = metric.corpus_score(hypotheses, streams)
    return score, str(metric.get_signature())


def train_tokenizer(sentences: list[str], vocab_size: int = VOCAB_SIZE) -> Tokenizer:
    """Byte-pair encoding over words marked by a leading "▁" (so decoding restores the spaces)."""
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIALS), show_progress=False
    )
    tokenizer.train_from_iterator(sentences, trainer)
    return tokenizer


def training_sentences() -> list[str]:
    """Both sides of the training pairs: what the shared tokenizer learns from."""
    return [sentence for pair in load_pairs("train") for sentence in pair]


def save_tokenizer() -> None:
    """Train the shared tokenizer on the training split and store it in data/."""
    train_tokenizer(training_sentences()).save(str(TOKENIZER_FILE))
    load_tokenizer.cache_clear()


@functools.cache
def load_tokenizer() -> Tokenizer:
    if not TOKENIZER_FILE.exists():
        raise FileNotFoundError(f"{TOKENIZER_FILE} is missing: run `make translation-models`")
    return Tokenizer.from_file(str(TOKENIZER_FILE))


def encode(tokenizer: Tokenizer, sentences: list[str], add_bos: bool = False) -> torch.Tensor:
    """Token ids (B, n) ending with <eos>, padded with <pad> on the right. sentences is a
    list of strings, even for one sentence."""
    check_tokenizer(tokenizer)
    sentences = [check_text(s) for s in _text_list(sentences, "sentences", "sentence")]
    if not sentences:
        raise ValueError("sentences is empty: encode needs at least one sentence")
    add_bos = validation.flag(add_bos, "add_bos")
    ids = [e.ids for e in tokenizer.encode_batch([clean(s) for s in sentences])]
    rows = [([BOS_ID] if add_bos else []) + row + [EOS_ID] for row in ids]
    width = max(map(len, rows))
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])


def decode(tokenizer: Tokenizer, ids: torch.Tensor) -> list[str]:
    """(B, n) token ids -> sentences, each cut at its first <eos>. One sentence's ids (n,)
    are refused: pass ids[None]."""
    check_tokenizer(tokenizer)
    validation.token_ids(ids, "ids", tokenizer.get_vocab_size(), "(B, n)")
    sentences = []
    for row in ids.tolist():
        row = row[: row.index(EOS_ID)] if EOS_ID in row else row
        sentences.append(tokenizer.decode([i for i in row if i not in (PAD_ID, BOS_ID)]))
    return sentences


def token_batches(
    pairs: list[tuple[str, str]],
    tokenizer: Tokenizer,
    max_tokens: int = 2000,
    generator: torch.Generator | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(source ids (B, S), target ids (B, T) starting with <bos>), padded. Pairs sorted by
    length are cut into batches of max_tokens // (first source length + 1) pairs, so a batch
    whose sources grow within it holds a little more than max_tokens; batches come in a
    shuffled order when a generator is given. The arguments are checked at the call, before
    the first batch is asked for."""
    check_tokenizer(tokenizer)
    max_tokens = validation.whole_number(max_tokens, "max_tokens")
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r}")
    if isinstance(pairs, str | bytes) or not isinstance(pairs, list | tuple):
        raise TypeError(f"pairs must be a list of (english, french) pairs, got {pairs!r:.60}")
    for index, pair in enumerate(pairs):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ValueError(f"pairs[{index}] must be an (english, french) pair, got {pair!r}")
        for text in pair:
            check_text(text, f"pairs[{index}]")
    return _batches(pairs, tokenizer, max_tokens, generator)


def _batches(pairs, tokenizer, max_tokens, generator):
    sources = [e.ids for e in tokenizer.encode_batch([e for e, _ in pairs])]
    targets = [e.ids for e in tokenizer.encode_batch([f for _, f in pairs])]
    order = sorted(range(len(pairs)), key=lambda i: (len(sources[i]), len(targets[i])))
    batches, start = [], 0
    while start < len(order):
        width = len(sources[order[start]]) + 1
        size = max(1, max_tokens // width)
        batches.append(order[start : start + size])
        start += size
    if generator is not None:
        batches = [batches[i] for i in torch.randperm(len(batches), generator=generator)]
    for batch in batches:
        yield (
            _pad([sources[i] + [EOS_ID] for i in batch]),
            _pad([[BOS_ID] + targets[i] + [EOS_ID] for i in batch]),
        )


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(map(len, rows))
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])


def _step(decode_step: Callable, state, previous: torch.Tensor, step: int):
    """decode_step's (logits (N, V), state), after checking the logits it returned."""
    output = decode_step(state, previous)
    if not isinstance(output, tuple) or len(output) != 2:
        raise TypeError(f"decode_step must return (logits, state), got {type(output).__name__}")
    logits, state = output
    rows = len(previous)
    if not isinstance(logits, torch.Tensor) or logits.shape[:1] != (rows,) or logits.dim() != 2:
        shape = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(f"decode_step must return logits ({rows}, V), one row each, got {shape}")
    if not logits.is_floating_point():
        raise ValueError(f"decode_step's logits must be floating point, got {logits.dtype}")
    if logits.shape[1] <= EOS_ID:
        raise ValueError(
            f"decode_step must return logits over the vocabulary, at least {EOS_ID + 1} tokens "
            f"(<eos> is {EOS_ID}), got {logits.shape[1]}"
        )
    if logits.isnan().any() or logits.isposinf().any():
        raise ValueError(
            f"decode_step returned NaN or +inf logits at step {step}: no token can be chosen"
        )
    if not logits.isfinite().any(dim=-1).all():
        raise ValueError(f"decode_step returned a row of only -inf logits at step {step}")
    return logits, state


def translate(
    decode_step: Callable, start_state, batch: int, max_len: int, device=None
) -> torch.Tensor:
    """Greedy decoding: decode_step(state, previous ids (B,)) -> (logits (B, V), state).
    Returns (B, <= max_len) ids; an example stops at its first <eos> and is padded after it."""
    if not callable(decode_step):
        raise TypeError(f"decode_step must be a function, got {type(decode_step).__name__}")
    batch = validation.whole_number(batch, "batch")
    max_len = validation.whole_number(max_len, "max_len")
    previous = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    state, outputs = start_state, []
    for step in range(max_len):
        logits, state = _step(decode_step, state, previous, step)
        previous = logits.argmax(-1).masked_fill(finished, PAD_ID)  # (B,)
        outputs.append(previous)
        finished |= previous == EOS_ID
        if finished.all():
            break
    return torch.stack(outputs, 1)  # (B, steps)


@torch.no_grad()
def beam_search(
    decode_step: Callable,
    start_state,
    select: Callable,
    batch: int,
    max_len: int,
    beam_size: int = 4,
    device=None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the beam_size most probable partial translations of each sentence at every step.

    decode_step(state, previous ids (N,)) -> (logits (N, V), state), N = batch * beam_size;
    select(state, rows (N,)) -> the state of those rows (the beams that survived, in order).
    A hypothesis ends at its first <eos> and then stays in its beam with its score unchanged.
    A sentence is done when its best-scored hypothesis has ended (a live one can only lose
    probability from there: exact for the plain log-probability, a heuristic once lengths are
    normalised); from then on it stands still, so its result does not depend on the other
    sentences of the batch. The search stops when every sentence is done, or after max_len
    steps. Returns every final hypothesis, best score first: ids (B, beam_size, steps), padded
    after <eos>, their log-probabilities (B, beam_size), and which have ended (B, beam_size).
    choose_hypothesis picks one per sentence. beam_size is at most MAX_BEAM_SIZE.
    """
    if not callable(decode_step) or not callable(select):
        raise ValueError("decode_step and select must be functions (see the docstring)")
    batch = validation.whole_number(batch, "batch")
    max_len = validation.whole_number(max_len, "max_len")
    beam_size = check_beam_size(beam_size)
    rows = torch.arange(batch, device=device)
    state = select(start_state, rows.repeat_interleave(beam_size))  # each sentence k times
    scores = torch.full((batch, beam_size), float("-inf"), dtype=torch.float64, device=device)
    scores[:, 0] = 0.0  # one live hypothesis to start with: k copies would fill the beam
    tokens = torch.empty(batch, beam_size, 0, dtype=torch.long, device=device)
    ended = torch.zeros(batch, beam_size, dtype=torch.bool, device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)  # (B,)
    previous = torch.full((batch * beam_size,), BOS_ID, dtype=torch.long, device=device)
    for step in range(max_len):
        logits, state = _step(decode_step, state, previous, step)
        log_probs = logits.log_softmax(-1).double().view(batch, beam_size, -1)  # (B, k, V)
        after_end = torch.full_like(log_probs[0, 0], float("-inf"))
        after_end[PAD_ID] = 0.0  # an ended hypothesis can only add a pad, at no cost
        still = ended | done[:, None]  # (B, k): ended, or in a sentence that is done
        log_probs = torch.where(still[..., None], after_end, log_probs)
        vocab = log_probs.shape[-1]
        candidates = (scores[..., None] + log_probs).view(batch, -1)  # (B, k * V)
        scores, chosen = candidates.topk(beam_size, dim=-1)  # (B, k), best first
        beams, next_tokens = chosen // vocab, chosen % vocab  # which hypothesis, which token
        tokens = tokens.gather(1, beams[..., None].expand_as(tokens))  # (B, k, steps so far)
        tokens = torch.cat([tokens, next_tokens[..., None]], -1)
        ended = ended.gather(1, beams) | (next_tokens == EOS_ID)
        state = select(state, (beams + beam_size * rows[:, None]).flatten())
        previous = next_tokens.flatten()
        done |= ended[:, 0]
        if done.all():
            break
    return tokens, scores, ended


def check_beam_size(beam_size: object) -> int:
    beam_size = validation.whole_number(beam_size, "beam_size")
    if beam_size > MAX_BEAM_SIZE:
        raise ValueError(
            f"beam_size must be at most {MAX_BEAM_SIZE} (each beam keeps a score for every "
            f"token of the vocabulary), got {validation.shown(beam_size)}"
        )
    return beam_size


def choose_hypothesis(
    tokens: torch.Tensor, scores: torch.Tensor, ended: torch.Tensor, length_penalty: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ended hypothesis of each sentence (any, if none has ended) with the highest
    log-probability / length ** length_penalty (0: the plain log-probability, which favours
    short outputs; 1: the mean per token). The length counts every token but the pads, <eos>
    included. tokens (B, k, steps), scores and ended (B, k) -> tokens (B, steps), scores (B,)."""
    check_length_penalty(length_penalty)
    validation.tensor(tokens, "tokens", "(B, k, steps)")
    validation.tensor(scores, "scores", "(B, k)")
    validation.tensor(ended, "ended", "(B, k)")
    if tokens.dim() != 3 or scores.shape != tokens.shape[:2] or ended.shape != scores.shape:
        raise ValueError(
            f"tokens must be (B, k, steps), scores and ended (B, k): got {tuple(tokens.shape)}, "
            f"{tuple(scores.shape)} and {tuple(ended.shape)}"
        )
    if not scores.is_floating_point() or ended.dtype != torch.bool:
        raise ValueError(
            f"scores must be floating point and ended boolean, got {scores.dtype}, {ended.dtype}"
        )
    if tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must hold integer token ids, got {tokens.dtype}")
    if tokens.numel() and tokens.min() < 0:
        raise ValueError(f"tokens must be ids >= 0, got {tokens.min().item()}")
    if tokens.shape[1] == 0:
        raise ValueError("tokens holds no hypothesis (k = 0): there is nothing to choose from")
    if scores.isnan().any():
        raise ValueError("scores hold NaN: a NaN score cannot be ranked")
    lengths = (tokens != PAD_ID).sum(-1).clamp(min=1)  # (B, k)
    normalised = scores / lengths.double() ** length_penalty  # (B, k)
    candidates = ended | ~ended.any(-1, keepdim=True)  # a sentence with no ended one: all
    best = normalised.masked_fill(~candidates, float("-inf")).argmax(-1)  # (B,)
    rows = torch.arange(len(tokens), device=tokens.device)
    return tokens[rows, best], scores[rows, best]


def check_length_penalty(length_penalty: object) -> float:
    if (
        isinstance(length_penalty, bool)
        or not isinstance(length_penalty, numbers.Real)
        or not 0 <= length_penalty <= 2
    ):
        raise ValueError(
            f"length_penalty must be a number in [0, 2], got {validation.shown(length_penalty)}"
        )
    return float(length_penalty)


def inverse_square_root(step: int, warmup_steps: int) -> float:
    """The learning-rate factor of "Attention Is All You Need": a linear rise to 1 over
    warmup_steps, then a fall as 1 / sqrt(step). Step counts from 0."""
    step = validation.whole_number(step, "step", minimum=0) + 1
    warmup_steps = validation.whole_number(warmup_steps, "warmup_steps")
    return min(step / warmup_steps, math.sqrt(warmup_steps / step))


def train_translator(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    epochs: int,
    learning_rate: float = 1e-3,
    max_tokens: int = 2000,
    seed: int = 0,
    device: str | torch.device = "cpu",
    log: Callable[[str], None] = print,
    after_epoch: Callable[[dict], bool] | None = None,
    label_smoothing: float = 0.0,
    warmup_steps: int = 0,
    weight_decay: float = 0.0,
) -> dict:
    """Teacher-forced training with Adam on the training split: model(source, target_in) ->
    logits; the loss ignores pads. Returns the history (loss per epoch, validation BLEU).
    after_epoch(history) is called after each epoch and answers whether to go on: False stops
    the training; True or None (a callback that only saves or prints) goes on; any other
    answer is a TypeError.

    Chapter 09's recipe adds label smoothing, an inverse-square-root warm-up of the learning
    rate over warmup_steps (0: none) and AdamW's decoupled weight decay."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_tokenizer(tokenizer)
    label_smoothing = validation.probability(label_smoothing, "label_smoothing")
    warmup_steps = validation.whole_number(warmup_steps, "warmup_steps", minimum=0)
    weight_decay = validation.positive_number(weight_decay, "weight_decay", allow_zero=True)
    epochs = validation.whole_number(epochs, "epochs")
    learning_rate = validation.positive_number(learning_rate, "learning_rate")
    max_tokens = validation.whole_number(max_tokens, "max_tokens")
    seed = validation.seed(seed)
    device = check_device(device)
    if not callable(log):
        raise TypeError(f"log must be a function such as print, got {log!r}")
    if after_epoch is not None and not callable(after_epoch):
        raise TypeError(f"after_epoch must be a function or None, got {after_epoch!r}")
    from time import perf_counter

    from tqdm.auto import tqdm

    from helpers.training import sequence_cross_entropy

    torch.manual_seed(seed)
    model.to(device).train()
    if weight_decay:
        optimizer = torch.optim.AdamW(
            model.parameters(), lr=learning_rate, weight_decay=weight_decay
        )
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    factor = functools.partial(inverse_square_root, warmup_steps=warmup_steps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, factor if warmup_steps else lambda step: 1.0
    )
    pairs, generator = load_pairs("train"), torch.Generator().manual_seed(seed)
    history = {"loss": [], "valid_bleu": [], "seconds": 0.0, "device": str(device)}
    start = perf_counter()
    for epoch in range(epochs):
        total, count = 0.0, 0
        batches = list(_batches(pairs, tokenizer, max_tokens, generator))  # checked above
        for source, target in tqdm(batches, desc=f"epoch {epoch + 1}/{epochs}", leave=False):
            source, target = source.to(device), target.to(device)
            logits = model(source, target[:, :-1])  # (B, T, V): predict each next token
            loss = sequence_cross_entropy(logits, target[:, 1:], PAD_ID, label_smoothing)
            clipped_step(model, optimizer, schedule, loss)
            tokens = int((target[:, 1:] != PAD_ID).sum())
            total, count = total + loss.item() * tokens, count + tokens
        seconds = perf_counter() - start
        if not close_epoch(
            model, tokenizer, history, total / count, seconds, device, log, after_epoch
        ):
            break
    return history


def clipped_step(model, optimizer, schedule, loss: torch.Tensor) -> None:
    """One optimizer step on the loss's gradient, its norm over every parameter clipped at 1
    (a rare huge gradient cannot undo the training), then one step of the schedule."""
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    schedule.step()


def close_epoch(
    model, tokenizer, history: dict, loss: float, seconds: float, device, log, after_epoch
) -> bool:
    """The end of a training epoch: its mean loss, the validation BLEU and the seconds so far
    into the history, one line to log, the model back in training mode; then whether to go
    on, as after_epoch(history) answers (no after_epoch: go on)."""
    history["loss"].append(loss)
    score = evaluate_bleu(model, tokenizer, "valid", device=device)[0].score
    history["valid_bleu"].append(score)
    history["seconds"] = seconds
    log(
        f"epoch {len(history['loss'])}: loss {loss:.3f}, valid BLEU {score:.1f}, "
        f"{seconds / 60:.1f} min"
    )
    model.train()
    return after_epoch is None or _go_on(after_epoch(history))


def _go_on(answer: object) -> bool:
    """after_epoch's answer: False stops, True or None goes on."""
    if answer is None:
        return True
    if not isinstance(answer, bool | np.bool_):
        raise TypeError(
            f"after_epoch must return True (go on), False (stop) or None (go on), got {answer!r}"
        )
    return bool(answer)


def evaluate_bleu(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    split: str = "test",
    limit: int | None = None,
    batch_size: int = 200,
    device: str | torch.device = "cpu",
    beam_size: int = 1,
) -> tuple[sacrebleu.metrics.bleu.BLEUScore, str]:
    """Translations of the split's distinct English sentences (the first `limit`; None: all),
    scored against all their references: model.translate_ids(source ids) -> ids, greedy, or
    model.translate_ids(source ids, beam_size=beam_size) with a beam."""
    translate_ids = getattr(model, "translate_ids", None)
    if not callable(translate_ids):
        raise TypeError(f"model must have a translate_ids method, got {type(model).__name__}")
    check_tokenizer(tokenizer)
    if limit is not None:
        limit = validation.whole_number(limit, "limit (None: every sentence)")
    batch_size = validation.whole_number(batch_size, "batch_size")
    beam_size = validation.whole_number(beam_size, "beam_size")
    device = check_device(device)
    beam = {} if beam_size == 1 else {"beam_size": beam_size}
    if beam and "beam_size" not in inspect.signature(translate_ids).parameters:
        raise ValueError(
            f"beam_size is {beam_size}, but this {type(model).__name__} decodes greedily only"
        )
    english, references = grouped_references(split)
    english, references = english[:limit], references[:limit]
    hypotheses = []
    for start in range(0, len(english), batch_size):
        source = encode(tokenizer, english[start : start + batch_size]).to(device)
        hypotheses += decode(tokenizer, model.translate_ids(source, **beam).cpu())
    return bleu(hypotheses, references)


MAX_CHARACTERS = 150  # twelve long English words
MAX_SOURCE_TOKENS = 30  # subword pieces, <eos> included: room for 12 words and some rare ones


def sentence_ids(tokenizer, sentence: str) -> torch.Tensor:
    """(1, S) ids of one English sentence, or a ValueError that says what is wrong with it."""
    check_tokenizer(tokenizer)
    if not isinstance(sentence, str):
        raise ValueError(f"type an English sentence (text), got {type(sentence).__name__}")
    sentence = clean(check_text(sentence))
    if not sentence:
        raise ValueError("type an English sentence, for example: She has a red car.")
    words = len(sentence.split())
    if words > MAX_WORDS:
        raise ValueError(
            f"at most {MAX_WORDS} words (the models learned from sentences of at most "
            f"{MAX_WORDS}), got {words}"
        )
    if len(sentence) > MAX_CHARACTERS:
        raise ValueError(f"at most {MAX_CHARACTERS} characters, got {len(sentence)}")
    marks = re.findall(r"<(?:sep|bos|eos|pad|unk)>", sentence)  # the models' own tokens
    if marks:
        raise ValueError(
            f"{marks[0]} is one of the model's own marks, not text: the model places it itself "
            f"where it belongs; type the sentence alone"
        )
    unknown = sorted({c for c in sentence if c != " " and tokenizer.token_to_id(c) is None})
    if unknown:
        shown = ", ".join(_named_character(c) for c in unknown[:5])
        raise ValueError(f"the tokenizer has never seen these characters: {shown}")
    ids = encode(tokenizer, [sentence])  # (1, S)
    if ids.shape[1] > MAX_SOURCE_TOKENS:
        raise ValueError(
            f"this sentence splits into {ids.shape[1] - 1} subword pieces (rare words split "
            f"into many); at most {MAX_SOURCE_TOKENS - 1} fit"
        )
    return ids


def _named_character(character: str) -> str:
    """'<' (U+003C); a character the figure's font may lack by its code point alone."""
    code = f"U+{ord(character):04X}"
    return f"'{character}' ({code})" if character.isprintable() and ord(character) < 0x250 else code


def shown_tokens(tokens: list[str]) -> list[str]:
    """Subword tokens for a figure: a word's first piece as it is, a later piece after "-"."""
    if isinstance(tokens, str) or not isinstance(tokens, list | tuple):
        raise TypeError(f"tokens must be a list of token strings, got {type(tokens).__name__}")
    if not all(isinstance(t, str) for t in tokens):
        raise TypeError("tokens must be a list of token strings (tokenizer.id_to_token of ids)")
    shown = {"▁": "␣"}  # a word whose first piece is only its start marker
    return [
        shown.get(t) or (t[1:] if t.startswith("▁") else t if t.startswith("<") else f"-{t}")
        for t in tokens
    ]


def main() -> None:
    """python -m helpers.translation: retrain the shared tokenizer and store it in data/."""
    argparse.ArgumentParser(
        description="Retrain the shared English-French tokenizer and store it in data/."
    ).parse_args()
    save_tokenizer()


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def check_text(text: object, name: str = "sentence") -> str:
    """text itself if it is a str that can be written as UTF-8 (no lone surrogate)."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be text (a str), got {type(text).__name__}")
    surrogate = _SURROGATE.search(text)
    if surrogate:
        raise ValueError(
            f"the {name} holds a character that is not valid text (a lone surrogate "
            f"U+{ord(surrogate.group()):04X}, half of a character that was cut in two)"
        )
    return text


def check_previous_ids(previous: object, batch: int, vocab_size: int) -> torch.Tensor:
    """A decoding step's previous ids: (batch,) int64 or int32 ids in 0..vocab_size - 1."""
    if not isinstance(previous, torch.Tensor) or previous.shape != (batch,):
        shape = getattr(previous, "shape", type(previous).__name__)
        raise ValueError(f"previous must be ids ({batch},), one per sentence, got {shape}")
    return validation.token_ids(previous, "previous", vocab_size, "(B,)", dim=1)


def check_tokenizer(tokenizer: object) -> Tokenizer:
    if not isinstance(tokenizer, Tokenizer):
        raise TypeError(
            f"tokenizer must be a tokenizers.Tokenizer (translation.load_tokenizer()), got "
            f"{type(tokenizer).__name__}"
        )
    return tokenizer


def _text_list(value: object, name: str, each: str) -> list[str]:
    """A list or tuple of str as a list; a bare str (read as its characters) is refused."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise TypeError(f"{name} must be a list of {each} strings, got {type(value).__name__}")
    for index, text in enumerate(value):
        if not isinstance(text, str):
            raise TypeError(
                f"{name} must be a list of {each} strings; item {index} is {type(text).__name__}"
            )
    return list(value)


def check_device(device: object) -> torch.device:
    """device as a torch.device, if torch knows it ("cpu", "cuda", "cuda:1", ...)."""
    try:
        return torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            f"device must be a torch device such as 'cpu' or 'cuda', got {device!r}"
        ) from None


if __name__ == "__main__":
    main()
