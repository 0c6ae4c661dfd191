"""Chapter 16's explorers: the bytes a cache holds for published models' layers and heads under
each kind of attention, at any context length; and a sliding window, with or without the first
positions kept, read by the chapter's trained models: the loss at each position and the weight
on the first position."""

import copy
from collections import OrderedDict

import numpy as np
import torch
from matplotlib.figure import Figure

from helpers import validation
from helpers.efficient import PUBLISHED_MODELS
from helpers.todays_attention import (
    ATTENTION_KINDS,
    FALCON_7B,
    PUBLISHED_LATENT_MODELS,
    cache_bytes_per_token,
)
from helpers.todays_models import (
    SAVED_SINKS,
    TodayGPT,
    _check_pass_size,
    _streaming_losses,
    load_variants,
    stream_sequences,
)
from helpers.widgets.base import Explorer, SelectionSlider, ToggleButtons, remember

__all__ = ["CacheBytesExplorer", "StreamingExplorer"]

CONTEXTS = tuple(2**p for p in range(10, 21))  # 1,024 to 1,048,576 tokens
GIB = 2**30
ONE_GPU_GIB = 80e9 / GIB  # the memory of one large accelerator (an H100 or an A100 of 80 GB)


class CacheBytesExplorer(Explorer):
    """Chapter 16: pick a kind of attention and a context length; see the bytes one sequence's
    cache holds (16-bit numbers) for six published models' layers and heads, with the attention
    each was published with beside it."""

    SHAPES = (*PUBLISHED_MODELS, FALCON_7B, *PUBLISHED_LATENT_MODELS)

    def __init__(self, attention: str = "MLA", tokens: int = 32768):
        _check_option("attention", attention, ATTENTION_KINDS)
        _check_option("tokens", tokens, CONTEXTS)
        controls = {
            "attention": ToggleButtons(
                options=ATTENTION_KINDS, value=attention, description="attention"
            ),
            "tokens": SelectionSlider(options=CONTEXTS, value=tokens, description="context"),
        }
        names = [shape.name for shape in self.SHAPES]
        self.per_token = {  # {kind: bytes per token of each model}, from helpers
            kind: [cache_bytes_per_token(shape, kind) for shape in self.SHAPES]
            for kind in ATTENTION_KINDS
        }
        figure = Figure(figsize=(10, 4.2), layout="constrained")
        self._ax = ax = figure.add_subplot()
        rows = np.arange(len(names))
        self._published = ax.barh(rows + 0.2, np.ones(len(names)), 0.4, color="lightgray")
        self._chosen = ax.barh(rows - 0.2, np.ones(len(names)), 0.4, color="tab:blue")
        ax.set_yticks(rows, names)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlim(2**-8, 2**13)  # from MQA at 1,024 tokens to MHA at a million
        ax.axvline(ONE_GPU_GIB, color="tab:red", ls="--", lw=1)
        ax.text(ONE_GPU_GIB * 1.1, len(names) - 0.6, "one 80 GB GPU", color="tab:red", fontsize=9)
        ax.set_xlabel("cache of one sequence (GiB, 16-bit numbers, log scale)")
        self._labels = [
            ax.text(1, row - 0.2, "", va="center", fontsize=8, color="tab:blue") for row in rows
        ]
        self._legend_ax = ax
        super().__init__(
            controls, figure, [*self._chosen, *self._published, *self._labels, ax.title]
        )

    def draw(self, attention: str, tokens: int) -> None:
        chosen = [tokens * b for b in self.per_token[attention]]
        published = [tokens * b for b in self.per_token["as published"]]
        self.state = {"bytes": chosen, "published bytes": published, "tokens": tokens}
        for bar, label, cache in zip(self._chosen, self._labels, chosen, strict=True):
            bar.set_width(cache / GIB)
            label.set_x(cache / GIB * 1.15)
            label.set_text(f"{cache / GIB:,.2f} GiB")
        for bar, cache in zip(self._published, published, strict=True):
            bar.set_width(cache / GIB)
        self._ax.set_title(
            f"{tokens:,} tokens: blue, every model "
            f"{attention if attention == 'as published' else 'with ' + attention}; grey, each as "
            f"published",
            fontsize=10,
        )


WINDOWS = (8, 16, 32, 64, 128, "all")
KEEPS = (0, 1, 2, 4, 8)
STREAM_MODELS = ("softmax", "sink")
BIN = 8  # positions averaged into one point of the loss curve
REMEMBERED = 32  # readings kept: going back to a setting is drawn at once


class StreamingExplorer(Explorer):
    """Chapter 16: slide a sliding window over held-out text three times longer than the models
    were trained on, keep the first positions or not, and see the loss at each position (against
    the same model reading everything) and the weight each layer puts on the first position.
    model: "softmax" (plain multi-head attention) or "sink" (a learned sink logit per head)."""

    def __init__(
        self,
        model: str = "softmax",
        window: int | str = 32,
        keep: int = 0,
        models: dict | None = None,
        sequences: torch.Tensor | None = None,
    ):
        """models: {"softmax", "sink": TodayGPT} (default: the models of
        data/todays_sink_models.pt, trained on windows that begin with <bos>); sequences: (B, L)
        ids to read (default: stream_sequences(bos=True)). The explorer computes with float64
        copies made here: a model changed later is not seen."""
        _check_option("model", model, STREAM_MODELS)
        _check_option("window", window, WINDOWS)
        _check_option("keep", keep, KEEPS)
        models = load_variants(SAVED_SINKS)["models"] if models is None else models
        self.models = _checked_models(models)
        sequences = stream_sequences(bos=True) if sequences is None else sequences
        for model_ in self.models.values():
            model_._check_inputs(sequences, None)
        if sequences.dim() != 2 or sequences.shape[1] < 2:
            raise ValueError(
                f"sequences must be (B, L) with L >= 2 (a piece to read, the next to predict), "
                f"got {tuple(sequences.shape)}"
            )
        for model_ in self.models.values():
            _check_pass_size(len(sequences), sequences.shape[1], model_, "sequences")
        self.sequences = sequences.long()
        self._copies = {name: copy.deepcopy(m).double().eval() for name, m in self.models.items()}
        self._readings = OrderedDict()
        self.trained_length = 128
        length = self.sequences.shape[1]
        controls = {
            "model": ToggleButtons(options=STREAM_MODELS, value=model, description="model"),
            "window": SelectionSlider(options=WINDOWS, value=window, description="window"),
            "keep": SelectionSlider(options=KEEPS, value=keep, description="first kept"),
        }
        figure = Figure(figsize=(10, 6), layout="constrained")
        self._loss_ax, self._first_ax = figure.subplots(2, 1, sharex=True)
        centres = (
            np.arange(length - 1).reshape(-1, BIN).mean(1) if (length - 1) % BIN == 0 else None
        )
        self._centres = centres if centres is not None else np.arange(length - 1)
        (self._full_line,) = self._loss_ax.plot(
            self._centres, np.zeros(len(self._centres)), color="gray", ls="--", label="reads all"
        )
        (self._loss_line,) = self._loss_ax.plot(
            self._centres, np.zeros(len(self._centres)), color="tab:blue", label="this window"
        )
        self._loss_ax.set_ylim(1.5, 7)
        self._loss_ax.set_ylabel(f"loss (nats, mean of {BIN})")
        self._loss_ax.legend(loc="upper left", fontsize=9)
        layers = next(iter(self.models.values())).config.num_layers
        self._first_lines = [
            self._first_ax.plot(np.arange(length), np.zeros(length), label=f"layer {i + 1}")[0]
            for i in range(layers)
        ]
        self._first_ax.set_ylim(0, 1)
        self._first_ax.set_xlim(0, length - 1)
        self._first_ax.set_ylabel("weight on position 0")
        self._first_ax.set_xlabel("position")
        self._first_ax.legend(loc="upper right", fontsize=9, ncols=layers)
        self._window_lines = [ax.axvline(0, color="tab:purple", lw=1.2) for ax in figure.axes]
        if self.trained_length < length:
            for ax in figure.axes:
                ax.axvline(self.trained_length, color="black", lw=0.8, ls=":")
            self._first_ax.text(
                self.trained_length + 2, 0.9, "trained length", fontsize=8, va="top"
            )
        dynamic = [
            self._full_line,
            self._loss_line,
            *self._first_lines,
            *self._window_lines,
            self._loss_ax.title,
            self._first_ax.title,
        ]
        super().__init__(controls, figure, dynamic, [["model"], ["window", "keep"]])

    def reading(self, model: str, window: int | str, keep: int) -> dict:
        """streaming_losses of the sequences for these settings (window "all": no window), in
        float64: {"loss": (L - 1,), "first": (layers, L)}. Remembered."""
        _check_option("model", model, STREAM_MODELS)
        _check_option("window", window, WINDOWS)
        _check_option("keep", keep, KEEPS)
        key = (model, window, 0 if window == "all" else keep)
        if key not in self._readings:
            with (
                torch.no_grad()
            ):  # the copies and sequences were checked when the explorer was made
                found = _streaming_losses(
                    self._copies[model], self.sequences, None if window == "all" else window, key[2]
                )
            remember(self._readings, key, found, REMEMBERED)
        return self._readings[key]

    def unused(self, values: dict) -> set[str]:
        super().unused(values)
        return {"keep"} if values.get("window") == "all" else set()

    def draw(self, model: str, window: int | str, keep: int) -> None:
        keep = 0 if window == "all" else keep  # unused, perhaps unset
        found = self.reading(model, window, keep)
        full = self.reading(model, "all", 0)
        start = 0 if window == "all" else window
        if start >= len(found["loss"]):
            raise ValueError(
                f"a window of {window} covers all {len(found['loss']) + 1} pieces of the texts: "
                f"choose a shorter one"
            )
        after = float(found["loss"][start:].mean())
        self.state = {
            "loss": found["loss"],
            "first": found["first"],
            "full loss": full["loss"],
            "mean loss after the window fills": after,
            "full mean loss after": float(full["loss"][start:].mean()),
        }
        self._loss_line.set_ydata(_binned(found["loss"], len(self._centres)))
        self._full_line.set_ydata(_binned(full["loss"], len(self._centres)))
        for line, first in zip(self._first_lines, found["first"], strict=True):
            line.set_ydata(first.numpy())
        for line in self._window_lines:
            line.set_xdata([start, start])
            line.set_visible(window != "all")
        kept = "" if window == "all" else f", first {keep} kept" if keep else ", none kept"
        self._loss_ax.set_title(
            f"{model}: window {window}{kept}: mean loss from position {start}: {after:.2f} "
            f"(reading all: {self.state['full mean loss after']:.2f})",
            fontsize=10,
        )
        self._first_ax.set_title("weight on the first position (mean over heads)", fontsize=10)


def _binned(loss: torch.Tensor, points: int) -> np.ndarray:
    return loss.view(points, -1).mean(1).numpy()


def _check_option(name: str, value: object, options: tuple) -> None:
    if not any(type(value) is type(option) and value == option for option in options):
        raise ValueError(f"{name} must be one of {', '.join(map(str, options))}; got {value!r:.40}")


def _checked_models(models: object) -> dict:
    if not isinstance(models, dict) or set(STREAM_MODELS) - set(models):
        raise ValueError(
            f"models must be a dict with {list(STREAM_MODELS)}: TodayGPTs (load_variants()"
            f"['models'])"
        )
    chosen = {name: models[name] for name in STREAM_MODELS}
    for name, model in chosen.items():
        if not isinstance(model, TodayGPT) or model.config.attention == "latent":
            raise TypeError(
                f"models[{name!r}] must be a TodayGPT with multi-head or grouped-query attention"
            )
        validation.weights_readable(model, f"models[{name!r}]")
    layers = {model.config.num_layers for model in chosen.values()}
    if len(layers) > 1:
        raise ValueError(f"models must have one number of layers (one line each), got {layers}")
    return chosen
