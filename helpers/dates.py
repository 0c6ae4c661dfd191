"""Chapter 07's task: dates as people write them -> ISO 8601 ("2015-03-03"), by character.

Every date from 1950-01-01 to 2049-12-31 can appear. Day and month are never ambiguous:
numeric formats always put them in the same order (day.month.year with dots, year/month/day
with slashes), and two-digit years mean 1950-1999 for 50-99 and 2000-2049 for 00-49.
The split into training, validation and test dates is fixed by a seed; a test date never
appears in training, in any format.
"""

import argparse
import datetime
import itertools
import random
import re
import string
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from helpers import validation
from helpers.checkpoints import (
    CheckpointError,
    float_weights,
    load_checkpoint,
    load_weights,
    save_checkpoint,
)
from helpers.training import train_seq2seq
from helpers.transformer import (
    Seq2SeqTransformer,
    TransformerConfig,
    saved_config,
)

FIRST_DAY, LAST_DAY = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)
MONTHS = [datetime.date(2000, m, 1).strftime("%B") for m in range(1, 13)]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
SPECIALS = ["<pad>", "<bos>", "<eos>"]
PAD, BOS, EOS = 0, 1, 2
SOURCE_CHARACTERS = " ,-./" + string.digits + string.ascii_letters
TARGET_CHARACTERS = "-" + string.digits
MAX_SOURCE_LENGTH = 40
TARGET_LENGTH = len("2015-03-03")


def ordinal(day: int) -> str:
    """1st, 2nd, 3rd, 4th, ..., 11th, 12th, 13th, ..., 21st, 22nd, 23rd, ..., 31st."""
    day = validation.whole_number(day, "day")
    if day > 31:
        raise ValueError(f"day must be from 1 to 31, got {day}")
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(day % 10, 'th') }"


def _names(date: datetime.date):
    return WEEKDAYS[date.weekday()], MONTHS[date.month - 1]


FORMATS = {
    "Tuesday, March 3rd 2015": lambda d, w, m: f"{w}, {m} {ordinal(d.day)} {d.year}",
    "Tue 3 Mar 2015": lambda d, w, m: f"{w[:3]} {d.day} {m[:3]} {d.year}",
    "March 3, 2015": lambda d, w, m: f"{m} {d.day}, {d.year}",
    "MARCH 3, 2015": lambda d, w, m: f"{m.upper()} {d.day}, {d.year}",
    "3 March 2015": lambda d, w, m: f"{d.day} {m} {d.year}",
    "the 3rd of March, 2015": lambda d, w, m: f"the {ordinal(d.day)} of {m}, {d.year}",
    "Mar 3 2015": lambda d, w, m: f"{m[:3]} {d.day} {d.year}",
    "03 MAR 2015": lambda d, w, m: f"{d.day:02d} {m[:3].upper()} {d.year}",
    "3-Mar-2015": lambda d, w, m: f"{d.day}-{m[:3]}-{d.year}",
    "3 mar 15": lambda d, w, m: f"{d.day} {m[:3].lower()} {d.year % 100:02d}",
    "03.03.2015": lambda d, w, m: f"{d.day:02d}.{d.month:02d}.{d.year}",
    "2015/3/3": lambda d, w, m: f"{d.year}/{d.month}/{d.day}",
    "20150303": lambda d, w, m: f"{d.year}{d.month:02d}{d.day:02d}",
    "2015-03-03": lambda d, w, m: d.isoformat(),
}


def write_date(date: datetime.date, format_name: str) -> str:
    """The date written in one of FORMATS (named by how it writes 3 March 2015)."""
    if not isinstance(date, datetime.date) or isinstance(date, datetime.datetime):
        raise ValueError(f"date must be a datetime.date, got {type(date).__name__}")
    if not FIRST_DAY <= date <= LAST_DAY:
        raise ValueError(f"dates from {FIRST_DAY} to {LAST_DAY} only, got {date}")
    if format_name not in FORMATS:
        raise ValueError(f"unknown format {format_name!r}: expected one of {list(FORMATS)}")
    return FORMATS[format_name](date, *_names(date))


def all_dates() -> list[datetime.date]:
    days = (LAST_DAY - FIRST_DAY).days + 1
    return [FIRST_DAY + datetime.timedelta(days=offset) for offset in range(days)]


class Vocabulary:
    """Characters <-> ids; ids 0, 1, 2 are <pad>, <bos> and <eos>."""

    def __init__(self, characters: str):
        self.tokens = SPECIALS + list(characters)
        self.ids = {token: index for index, token in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, text: str) -> list[int]:
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        unknown = sorted({c for c in text if c not in self.ids or c in SPECIALS})
        if unknown:
            raise ValueError(
                f"unknown character(s) {''.join(unknown)!r}: use letters, digits, spaces "
                f"and {' '.join(c for c in SOURCE_CHARACTERS[1:5])}"
            )
        return [self.ids[c] for c in text]

    def decode(self, ids: list[int] | torch.Tensor) -> str:
        """Characters up to the first <eos>, without specials."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        if isinstance(ids, str) or not hasattr(ids, "__iter__"):
            raise ValueError(f"ids must be a list of token ids, got {ids!r}")
        characters = []
        for index in ids:
            if isinstance(index, bool) or not isinstance(index, int):
                raise ValueError(f"ids must be whole numbers, got {index!r}")
            if not 0 <= index < len(self.tokens):
                raise ValueError(f"id {index} is outside the vocabulary 0..{len(self.tokens) - 1}")
            if index == EOS:
                break
            if index >= len(SPECIALS):
                characters.append(self.tokens[index])
        return "".join(characters)


SOURCE_VOCABULARY = Vocabulary(SOURCE_CHARACTERS)
TARGET_VOCABULARY = Vocabulary(TARGET_CHARACTERS)


def clean_text(text: str) -> str:
    """The date as the model reads it: no spaces at either end, single spaces inside."""
    if not isinstance(text, str):
        raise ValueError(f"a date must be a string, got {type(text).__name__}")
    return " ".join(text.split())


def encode_sources(texts: list[str]) -> torch.Tensor:
    """(B, longest) source ids of the cleaned texts, padded on the right with <pad>."""
    return _encode_sources(_check_readable(_cleaned(texts)))


def _encode_sources(texts: list[str]) -> torch.Tensor:
    """encode_sources of texts it cleaned and took."""
    encoded = [SOURCE_VOCABULARY.encode(text) for text in texts]
    longest = max(len(ids) for ids in encoded)
    return torch.tensor([ids + [PAD] * (longest - len(ids)) for ids in encoded])


def encode_targets(texts: list[str]) -> torch.Tensor:
    """(B, TARGET_LENGTH + 2): <bos> ISO date <eos>."""
    if isinstance(texts, str) or not texts:
        raise ValueError("texts must be a non-empty list of ISO dates (strings)")
    for text in texts:
        if not isinstance(text, str) or len(text) != TARGET_LENGTH:
            raise ValueError(f"a target must be an ISO date such as 2015-03-03, got {text!r}")
    return torch.tensor([[BOS, *TARGET_VOCABULARY.encode(text), EOS] for text in texts])


class DateTask:
    """The fixed split and the examples drawn from it.

    test and validation: one (source, target) pair per date, each in a format chosen once.
    training: batches drawn afresh from the training dates in every format.
    """

    def __init__(self, num_test: int = 2000, num_validation: int = 1000, seed: int = 0):
        dates = all_dates()
        num_test = validation.whole_number(num_test, "num_test")
        num_validation = validation.whole_number(num_validation, "num_validation")
        if num_test + num_validation > len(dates) // 2:
            raise ValueError(
                f"num_test + num_validation ({num_test + num_validation}) must leave at least "
                f"half of the {len(dates)} dates for training"
            )
        rng = random.Random(seed)
        rng.shuffle(dates)
        self.test_dates = dates[:num_test]
        self.validation_dates = dates[num_test : num_test + num_validation]
        self.train_dates = dates[num_test + num_validation :]
        self.test = self._fixed_examples(self.test_dates, rng)
        self.validation = self._fixed_examples(self.validation_dates, rng)

    @staticmethod
    def _fixed_examples(dates, rng):
        names = list(FORMATS)
        return [(write_date(date, rng.choice(names)), date.isoformat()) for date in dates]

    def train_batch(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(sources (B, S), targets (B, 12)): random training dates in random formats."""
        batch_size = validation.whole_number(batch_size, "batch_size")
        if generator is not None and not isinstance(generator, torch.Generator):
            raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
        date_index = torch.randint(len(self.train_dates), (batch_size,), generator=generator)
        format_index = torch.randint(len(FORMATS), (batch_size,), generator=generator)
        names = list(FORMATS)
        dates = [self.train_dates[i] for i in date_index.tolist()]
        sources = [
            write_date(d, names[f]) for d, f in zip(dates, format_index.tolist(), strict=True)
        ]
        return encode_sources(sources), encode_targets([d.isoformat() for d in dates])


def _year_numbers(text: str) -> list[int]:
    """The four-digit years written in a date: runs of exactly four digits, and the first
    four of an eight-digit run (20150303)."""
    runs = re.findall(r"\d+", text)
    return [int(run) for run in runs if len(run) == 4] + [
        int(run[:4]) for run in runs if len(run) == 8
    ]


def check_years(text: str) -> None:
    """Refuse a date whose year lies outside the years the model was trained on."""
    if not isinstance(text, str):
        raise ValueError(f"a date must be a string, got {type(text).__name__}")
    for year in _year_numbers(text):
        if not FIRST_DAY.year <= year <= LAST_DAY.year:
            raise ValueError(
                f"cannot read {text!r}: the model knows the years {FIRST_DAY.year} to "
                f"{LAST_DAY.year} only, not {year}"
            )


def _names_in(text: str, names: list[str]) -> set[int]:
    """Indices of the names (or their three-letter abbreviations) written as words."""
    words = {word.lower() for word in re.findall(r"[A-Za-z]+", text)}
    return {i for i, name in enumerate(names) if {name.lower(), name[:3].lower()} & words}


NUMERIC_ORDERS = {  # all-number formats: the fixed order of year, month and day
    r"(\d{4})/(\d{1,2})/(\d{1,2})": "ymd",
    r"(\d{4})-(\d{2})-(\d{2})": "ymd",
    r"(\d{4})(\d{2})(\d{2})": "ymd",
    r"(\d{2})\.(\d{2})\.(\d{4})": "dmy",
}


def _fits(run: str, part: str, date: datetime.date) -> bool:
    """Can the digits `run` write this part (year, month, day) of the date?"""
    if part == "year":
        return (
            int(run) == date.year
            if len(run) == 4
            else len(run) == 2 and int(run) == date.year % 100
        )
    return len(run) <= 2 and int(run) == (date.month if part == "month" else date.day)


def _numbers_problem(text: str, date: datetime.date) -> str | None:
    """Why the numbers of the text cannot write this date, or None if they do: every number
    is one part of the date, and the parts the text does not name (a month may be a name)
    are all there."""
    for pattern, order in NUMERIC_ORDERS.items():
        found = re.fullmatch(pattern, text)
        if found:
            parts = dict(zip(order, found.groups(), strict=True))
            if all(_fits(parts[p[0]], p, date) for p in ("year", "month", "day")):
                return None
            names = ", ".join({"y": "year", "m": "month", "d": "day"}[p] for p in order)
            return f"which is not {text} read in its fixed order ({names})"
    runs = re.findall(r"\d+", text)
    parts = ["year", "day"] + ([] if _names_in(text, MONTHS) else ["month"])
    if len(runs) != len(parts):
        written = ["a month name"] if len(parts) == 2 else []
        written.append(f"{len(runs)} number{'' if len(runs) == 1 else 's'}")
        listed = f" ({', '.join(runs)})" if runs else ""
        return (
            f"but a date needs a year, a month and a day, and the text writes "
            f"{' and '.join(written)}{listed}"
        )
    for order in itertools.permutations(parts):
        if all(_fits(run, part, date) for run, part in zip(runs, order, strict=True)):
            return None
    return f"which does not fit the numbers {', '.join(runs)}"


def answer_problem(text: str, answer: str) -> str | None:
    """Why the answer cannot be the date written in text, or None if the text writes it.

    The answer must be a calendar date from 1950 to 2049 in ISO form; every number in the
    text must be its year, month or day (all-number formats in their fixed order), and every
    part must be written; a month or weekday name must be the answer's.
    """
    if not isinstance(text, str) or not isinstance(answer, str):
        raise ValueError(f"text and answer must be strings, got {text!r} and {answer!r}")
    try:
        date = (
            datetime.date.fromisoformat(answer)
            if re.fullmatch(r"\d{4}-\d\d-\d\d", answer)
            else None
        )
    except ValueError:
        date = None
    if date is None:
        return f"the model answered {answer!r}, which is not a calendar date"
    if not FIRST_DAY <= date <= LAST_DAY:
        return f"the model answered {answer}, outside {FIRST_DAY.year} to {LAST_DAY.year}"
    problem = _numbers_problem(text, date)
    if problem:
        return f"the model answered {answer}, {problem}"
    months, weekdays = _names_in(text, MONTHS), _names_in(text, WEEKDAYS)
    if months and months != {date.month - 1}:
        return f"the model answered {answer}, which is not in {MONTHS[min(months)]}"
    if weekdays and weekdays != {date.weekday()}:
        return f"the model answered {answer}, a {WEEKDAYS[date.weekday()]}"
    return None


def predict(model: Seq2SeqTransformer, texts: list[str], batch_size: int = 500) -> list[str]:
    """What the model writes for each text by greedy decoding, unchecked."""
    if not isinstance(model, Seq2SeqTransformer):
        raise ValueError(f"model must be a Seq2SeqTransformer, got {type(model).__name__}")
    batch_size = validation.whole_number(batch_size, "batch_size")
    return _predict(model, _check_readable(_cleaned(texts)), batch_size)


def _predict(model: Seq2SeqTransformer, texts: list[str], batch_size: int) -> list[str]:
    """predict of texts it cleaned and took."""
    predictions = []
    for start in range(0, len(texts), batch_size):
        sources = _encode_sources(texts[start : start + batch_size])
        sources = sources.to(next(model.parameters()).device)
        generated = model.greedy_decode(sources, BOS, EOS, max_steps=TARGET_LENGTH + 1)
        predictions += [TARGET_VOCABULARY.decode(ids) for ids in generated.tolist()]
    return predictions


def normalise(model: Seq2SeqTransformer, texts: list[str]) -> list[str]:
    """The ISO date for each text. A text the model cannot read (a year out of range, an
    answer that is no calendar date or contradicts the text) raises a ValueError that names
    every such text and why."""
    texts = _cleaned(texts)
    for text in texts:
        check_years(text)
    if not isinstance(model, Seq2SeqTransformer):
        raise ValueError(f"model must be a Seq2SeqTransformer, got {type(model).__name__}")
    answers = _predict(model, _check_readable(texts), 500)
    problems = [
        f"cannot read {text!r}: {problem}"
        for text, answer in zip(texts, answers, strict=True)
        if (problem := answer_problem(text, answer))
    ]
    if problems:
        raise ValueError("; ".join(problems))
    return answers


def exact_match(
    model: Seq2SeqTransformer, examples: list[tuple[str, str]]
) -> tuple[float, list[tuple[str, str, str]]]:
    """(accuracy, errors): the share of examples normalised exactly right, and the others
    as (source, prediction, target)."""
    if isinstance(examples, str) or not examples:
        raise ValueError("exact_match needs a list of at least one (source, target) example")
    for example in examples:
        if not (
            isinstance(example, tuple | list)
            and len(example) == 2
            and all(isinstance(part, str) for part in example)
        ):
            raise ValueError(
                f"each example must be a (source, target) pair of strings, got {example!r}"
            )
    predictions = predict(model, [source for source, _ in examples])
    errors = [
        (source, predicted, target)
        for (source, target), predicted in zip(examples, predictions, strict=True)
        if predicted != target
    ]
    return 1 - len(errors) / len(examples), errors


SAVED_MODEL = Path(__file__).resolve().parents[1] / "data" / "date_transformer.pt"
DATE_MODEL = TransformerConfig(
    src_vocab_size=len(SOURCE_VOCABULARY),
    tgt_vocab_size=len(TARGET_VOCABULARY),
    d_model=64,
    num_heads=4,
    num_layers=2,
    d_ff=128,  # 2 x d_model: the task needs little per-position computation
    pad_id=PAD,
    norm_first=True,
    max_len=64,  # dates are at most 40 characters
)


@dataclass(frozen=True)
class TrainingRecipe:
    """How chapter 07's model is trained; dataclasses.replace(RECIPE, steps=100) for a variant."""

    steps: int = 600  # about a minute on a 2-core CPU, and 99.95% exact match
    batch_size: int = 128  # fresh examples each step: no epochs, no overfitting
    lr: float = 3e-3  # high for Adam: fine with pre-norm and the warm-up
    warmup: int = 60  # steps of linear warm-up before the cosine decay
    seed: int = 0  # the initial weights and the batches

    def __post_init__(self):
        validation.coerce_fields(
            self,
            {
                "steps": validation.whole_number,
                "batch_size": validation.whole_number,
                "warmup": validation.at_least(0),
                "seed": validation.seed,
                "lr": validation.positive_number,
            },
        )


RECIPE = TrainingRecipe()


def new_date_model(seed: int = 0, config: TransformerConfig = DATE_MODEL) -> Seq2SeqTransformer:
    """The chapter's model, untrained: characters in, ISO characters out."""
    torch.manual_seed(validation.whole_number(seed, "seed", minimum=0))
    return Seq2SeqTransformer.from_config(config)


def train_date_model(
    task: DateTask,
    device: str | torch.device = "cpu",
    progress: bool = True,
    config: TransformerConfig = DATE_MODEL,
    recipe: TrainingRecipe = RECIPE,
) -> tuple[Seq2SeqTransformer, dict]:
    """Train a new model; returns (model, history). For a variant, pass
    config=dataclasses.replace(DATE_MODEL, norm_first=False) or
    recipe=dataclasses.replace(RECIPE, warmup=200)."""
    if not isinstance(recipe, TrainingRecipe) or not isinstance(config, TransformerConfig):
        raise ValueError(
            "recipe must be a TrainingRecipe and config a TransformerConfig (make variants with "
            "dataclasses.replace(RECIPE, ...) and dataclasses.replace(DATE_MODEL, ...))"
        )
    model = new_date_model(recipe.seed, config).to(device)
    generator = torch.Generator().manual_seed(recipe.seed)
    history = train_seq2seq(
        model,
        lambda: task.train_batch(recipe.batch_size, generator),
        recipe.steps,
        recipe.lr,
        recipe.warmup,
        config.pad_id,
        progress,
    )
    return model, {**history, "recipe": asdict(recipe), "model_size": asdict(config)}


def save_date_model(path: str | Path, model: Seq2SeqTransformer, history: dict) -> None:
    """Weights in float16 (half the bytes; the test checks the accuracy survives), the
    model's configuration and the training history, in one file with its checksum beside it."""
    weights = {name: tensor.half() for name, tensor in model.state_dict().items()}
    config = asdict(model.config)
    save_checkpoint(path, {"config": config, "weights": weights, "history": history})


def load_date_model(
    path: str | Path = SAVED_MODEL, device: str | torch.device = "cpu"
) -> tuple[Seq2SeqTransformer, dict]:
    """(model in eval mode, training history) from a file written by save_date_model, after
    its checksum, its configuration and every weight are checked (see helpers.checkpoints)."""
    saved = load_checkpoint(path, ("config", "weights", "history"), remake="make date-model")
    _check_date_config(saved["config"], path)
    model = Seq2SeqTransformer(**saved["config"])
    load_weights(model, float_weights(saved["weights"], path), path)
    return model.to(device).eval(), saved["history"]


def _shown(character: str) -> str:
    return "␣" if character == " " else character


@torch.no_grad()
def attention_for(model: Seq2SeqTransformer, text: str) -> dict:
    """Normalise one date and collect every attention map the model computed for it.

    Returns the prediction, the labels (source characters; the decoder's input tokens; what
    each decoder position wrote) and maps[kind] of shape (layers, heads, q, k).
    """
    device = next(model.parameters()).device
    text = clean_text(text)
    check_years(text)
    sources = encode_sources([text]).to(device)  # (1, S)
    # without the cache, the last step runs the decoder over <bos> and everything it wrote
    # before its last token: the maps it leaves cover every output position
    generated = model.greedy_decode(sources, BOS, EOS, max_steps=TARGET_LENGTH + 1, use_cache=False)
    written = generated[0].tolist()
    written = written[: written.index(EOS) + 1] if EOS in written else written
    decoder_input = torch.tensor([[BOS, *written[:-1]]])  # (1, T)
    tokens = TARGET_VOCABULARY.tokens
    prediction = TARGET_VOCABULARY.decode(written)
    problem = answer_problem(text, prediction)
    if problem:
        raise ValueError(f"cannot read {text!r}: {problem}")
    return {
        "prediction": prediction,
        "source": [_shown(c) for c in text],
        "decoder_input": [tokens[i] for i in decoder_input[0].tolist()],
        "written": [tokens[i] for i in written],
        "maps": {  # kind -> (layers, heads, q, k)
            kind: torch.stack([layer[0].cpu() for layer in layers])
            for kind, layers in model.attention_maps().items()
        },
    }


ALIGNMENT_FORMAT = "March 3, 2015"
OUTPUT_PARTS = {"year": [0, 1, 2, 3], "month": [5, 6], "day": [8, 9]}  # in "2015-03-03"


def _source_parts(text: str) -> dict:
    """Character positions of the month, day and year in a date written as 'March 3, 2015'."""
    month_end, comma = text.index(" "), text.index(",")
    return {
        "year": list(range(len(text) - 4, len(text))),
        "month": list(range(month_end)),
        "day": list(range(month_end + 1, comma)),
    }


@torch.no_grad()
def cross_attention_alignment(
    model: Seq2SeqTransformer, dates: list[datetime.date]
) -> tuple[torch.Tensor, torch.Tensor]:
    """For dates written as 'March 3, 2015': (shares, uniform), both (layers, heads, 3).

    shares[l, h, p]: the mean cross-attention weight that the output characters of part p
    (year, month, day, in that order) put on the source characters of the same part.
    uniform: the same share if the weights were spread evenly over the source.
    """
    if isinstance(dates, str) or not dates:
        raise ValueError("dates must be a non-empty list of datetime.date")
    texts = [write_date(date, ALIGNMENT_FORMAT) for date in dates]
    targets = encode_targets([date.isoformat() for date in dates])
    device = next(model.parameters()).device
    model(encode_sources(texts).to(device), targets[:, :-1].to(device))  # teacher-forced
    maps = torch.stack(model.attention_maps()["cross-attention"], 1).cpu()  # (B, L, H, T, S)
    shares = torch.zeros(len(texts), maps.shape[1], maps.shape[2], len(OUTPUT_PARTS))
    uniform = torch.zeros(len(texts), len(OUTPUT_PARTS))
    for example, text in enumerate(texts):
        source_parts = _source_parts(text)
        for index, (part, outputs) in enumerate(OUTPUT_PARTS.items()):
            on_part = maps[example][..., outputs, :][..., source_parts[part]].sum(-1)
            shares[example, :, :, index] = on_part.mean(-1)  # (L, H)
            uniform[example, index] = len(source_parts[part]) / len(text)
    return shares.mean(0), uniform.mean(0).expand_as(shares[0])


def main() -> None:
    """python -m helpers.dates: retrain chapter 07's model with RECIPE and store it in data/."""
    argparse.ArgumentParser(
        description="Retrain chapter 07's date model and store it in data/."
    ).parse_args()
    model, history = train_date_model(DateTask())
    save_date_model(SAVED_MODEL, model, history)
    print(f"trained in {history['seconds']:.1f} s")


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _cleaned(texts: object) -> list[str]:
    """A non-empty list of texts, each cleaned as clean_text cleans it."""
    if not isinstance(texts, list | tuple) or not texts:
        raise ValueError("texts must be a non-empty list of dates (strings)")
    return [clean_text(text) for text in texts]


def _check_readable(texts: list[str]) -> list[str]:
    """Cleaned texts that each hold a date of at most MAX_SOURCE_LENGTH characters."""
    for text in texts:
        if not text:
            raise ValueError("the date is empty: type a date, such as 3 March 2015")
        if len(text) > MAX_SOURCE_LENGTH:
            raise ValueError(f"at most {MAX_SOURCE_LENGTH} characters, got {len(text)}")
    return texts


def _check_date_config(config, path) -> None:
    """The saved configuration must describe a date model before anything is allocated."""
    expected_vocab = {
        "src_vocab_size": len(SOURCE_VOCABULARY),
        "tgt_vocab_size": len(TARGET_VOCABULARY),
        "pad_id": PAD,
    }
    if not isinstance(config, dict) or set(config) - {f.name for f in fields(TransformerConfig)}:
        raise CheckpointError(f"{path}: its config is not a date model's: {config!r}")
    for key, value in expected_vocab.items():
        if config.get(key) != value:
            raise CheckpointError(f"{path}: config {key} is {config.get(key)!r}, expected {value}")
    config = saved_config(config, path)


if __name__ == "__main__":
    main()
