"""English–French sentence pairs for chapters 08 and 09: the data, held out honestly, the subword
tokenizer, batches, greedy decoding and BLEU.

The pairs come from the Tatoeba Project via www.manythings.org/anki (CC BY 2.0 FR; see
data/README.md). The test and validation sets are held out *by English sentence*: every
translation of a held-out English sentence stays out of training, and so does every training
pair whose French sentence is the translation of a held-out one.
"""

import functools
import gzip
import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterator
from pathlib import Path

import sacrebleu
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
CORPUS = DATA_DIR / "tatoeba-eng-fra.tsv.gz"
TOKENIZER_FILE = DATA_DIR / "eng-fra-bpe.json"

MAX_WORDS = 12  # English sentences of at most 12 words: what a small model learns well
HELD_OUT_SENTENCES = 1000  # distinct English sentences in each of "valid" and "test"
VOCAB_SIZE = 8000  # one BPE vocabulary shared by both languages
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(len(SPECIALS))
SPLITS = ("train", "valid", "test")

_SPACES = re.compile(r"[\s\u00a0\u2009\u202f]+")  # French puts narrow no-break spaces before !?:;
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u00ad"))  # zero-width space, soft hyphen


def clean(text: str) -> str:
    """NFC, one kind of space, one kind of apostrophe, nothing invisible."""
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
    if split not in SPLITS:
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
    and sacrebleu's signature of how it was computed."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} reference lists")
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
    """Token ids (B, n) ending with <eos>, padded with <pad> on the right."""
    ids = [e.ids for e in tokenizer.encode_batch([clean(s) for s in sentences])]
    rows = [([BOS_ID] if add_bos else []) + row + [EOS_ID] for row in ids]
    width = max(map(len, rows))
    return torch.tensor([row + [PAD_ID] * (width - len(row)) for row in rows])


def decode(tokenizer: Tokenizer, ids: torch.Tensor) -> list[str]:
    """(B, n) token ids -> sentences, each cut at its first <eos>."""
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
    shuffled order when a generator is given."""
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


def translate(
    decode_step: Callable, start_state, batch: int, max_len: int, device=None
) -> torch.Tensor:
    """Greedy decoding: decode_step(state, previous ids (B,)) -> (logits (B, V), state).
    Returns (B, <= max_len) ids; an example stops at its first <eos> and is padded after it."""
    previous = torch.full((batch,), BOS_ID, dtype=torch.long, device=device)
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    state, outputs = start_state, []
    for _ in range(max_len):
        logits, state = decode_step(state, previous)
        previous = logits.argmax(-1).masked_fill(finished, PAD_ID)  # (B,)
        outputs.append(previous)
        finished |= previous == EOS_ID
        if finished.all():
            break
    return torch.stack(outputs, 1)  # (B, steps)


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
) -> dict:
    """Teacher-forced training with Adam on the training split: model(source, target_in) ->
    logits; the loss ignores pads. Returns the history (loss per epoch, validation BLEU).
    after_epoch(history) is called after each epoch; returning False stops the training."""
    from time import perf_counter

    from tqdm.auto import tqdm

    from helpers.training import sequence_cross_entropy

    torch.manual_seed(seed)
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
    pairs, generator = load_pairs("train"), torch.Generator().manual_seed(seed)
    history = {"loss": [], "valid_bleu": [], "seconds": 0.0, "device": str(device)}
    start = perf_counter()
    for epoch in range(epochs):
        total, count = 0.0, 0
        batches = list(token_batches(pairs, tokenizer, max_tokens, generator))
        for source, target in tqdm(batches, desc=f"epoch {epoch + 1}/{epochs}", leave=False):
            source, target = source.to(device), target.to(device)
            logits = model(source, target[:, :-1])  # (B, T, V): predict each next token
            loss = sequence_cross_entropy(logits, target[:, 1:], PAD_ID)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            tokens = int((target[:, 1:] != PAD_ID).sum())
            total, count = total + loss.item() * tokens, count + tokens
        history["loss"].append(total / count)
        score = evaluate_bleu(model, tokenizer, "valid", device=device)[0].score
        history["valid_bleu"].append(score)
        history["seconds"] = perf_counter() - start
        log(
            f"epoch {epoch + 1}: loss {total / count:.3f}, valid BLEU {score:.1f}, "
            f"{history['seconds'] / 60:.1f} min"
        )
        model.train()
        if after_epoch is not None and not after_epoch(history):
            break
    return history


def evaluate_bleu(
    model: torch.nn.Module,
    tokenizer: Tokenizer,
    split: str = "test",
    limit: int | None = None,
    batch_size: int = 200,
    device: str | torch.device = "cpu",
) -> tuple[sacrebleu.metrics.bleu.BLEUScore, str]:
    """Greedy translations of the split's distinct English sentences (the first `limit`),
    scored against all their references. model.translate_ids(source ids) -> ids."""
    english, references = grouped_references(split)
    english, references = english[:limit], references[:limit]
    hypotheses = []
    for start in range(0, len(english), batch_size):
        source = encode(tokenizer, english[start : start + batch_size]).to(device)
        hypotheses += decode(tokenizer, model.translate_ids(source).cpu())
    return bleu(hypotheses, references)


def shipped_translators() -> dict[str, Callable[[], torch.nn.Module]]:
    """Every translation model stored in data/, by name, each as a function that loads it."""
    from helpers.bahdanau import MODELS, load_translator

    return {name: functools.partial(lambda n: load_translator(n)[0], name) for name in MODELS}


def print_test_bleu() -> None:
    """One line per shipped model: its BLEU on the whole held-out test set."""
    tokenizer = load_tokenizer()
    sentences = len(grouped_references("test")[0])
    for name, load in shipped_translators().items():
        score, signature = evaluate_bleu(load(), tokenizer, "test")
        print(f"{name}: BLEU {score.score:.1f} on {sentences} held-out sentences ({signature})")
