"""Chapter 14's three models: a small Vision Transformer, find-the-digit and read-the-canvas.

Every model sees an image as a sequence of 4 x 4 patches (helpers.vision.patchify), each
projected by one linear layer, plus the fixed 2-D sinusoidal position of its row and column
(helpers.vision.sinusoidal_2d). A digit (8 x 8) is then 2 x 2 = 4 patches; a 3 x 3 canvas
(24 x 24) is 6 x 6 = 36 patches, 4 in each cell (helpers.vision.cell_patches).

- VisionTransformer: a [class] token and pre-norm encoder blocks; the class token's output
  names the digit.
- DigitFinder: a word ("seven") is ONE query of ONE cross-attention head over the canvas's
  patches; what it reads names the cell that holds the digit.
- CanvasReader: a patch encoder and chapter 07's decoder blocks write the canvas's digits in
  reading order (row by row, left to right), then <eos>.

Training (train_vit, train_finder, train_reader) runs seeded on one thread; the evaluate_*
functions compute in float64, so the numbers they print are the same on any thread count.
"""

import argparse
import functools
import inspect
import math
import numbers
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from helpers import validation
from helpers.attention import MultiHeadAttention
from helpers.checkpoints import (
    CheckpointError,
    float_weights,
    load_checkpoint,
    load_weights,
    savable_path,
    save_checkpoint,
)
from helpers.contexts import keeping_random_state, one_torch_thread, plainly, trainable_float32
from helpers.masks import causal_mask
from helpers.positional import sinusoidal_encoding
from helpers.transformer import DecoderBlock, EncoderBlock
from helpers.vision import (
    LARGEST_TENSOR,
    PIXELS,
    Canvases,
    Digits,
    _make_canvases,
    _patchify,
    cell_patches,
    check_canvas_request,
    check_canvases,
    check_digit_labels,
    check_pixels,
    check_placed_digits,
    load_digits,
    make_canvases,
    refuse_nested,
    sinusoidal_2d,
)

PATCH = 4  # pixels across a patch: a digit is 2 x 2 patches
GRID = 3  # cells across a canvas: 24 x 24 pixels, 6 x 6 patches
NUM_CLASSES = 10  # the digits 0..9, which are also the reader's first ten tokens
BOS, EOS, PAD = 10, 11, 12  # the reader's other tokens
READER_VOCAB = 13
SAVED_MODELS = Path(__file__).parents[1] / "data" / "vision_models.pt"
REMAKE = "make vision-models"
SAVED_KEYS = ("recipes", "weights", "logs")  # what train_and_save writes, nothing else
LARGEST_MODEL = 2**26  # parameters (256 MiB of float32); the shipped models have at most 0.2 M
LARGEST_GRID = 32  # cells across a canvas: 1,024 cells, 4,096 patches
LARGEST_ACTIVATION = 2**28  # bytes in one tensor a forward pass builds, 256 MiB (2^26 numbers of
# float32, 2^25 of the evaluations' float64): a pass holds several such tensors at once
MOST_READING_WORK = 2**35  # multiply-adds of one read_canvas, about 10 s: 3 times what reading
# the 1,000 test canvases takes
FINDER_DIGITS = 3  # distinct digits on each canvas the finder trains and is tested on


# Patches in, vectors out


class PatchEmbedding(nn.Module):
    """(B, 1, H, W) images -> (B, (H/4)(W/4), d_model): each 4 x 4 patch through one linear
    layer, plus the fixed 2-D sinusoidal encoding of its row and column (not learned)."""

    def __init__(self, d_model: int, image_size: int):
        super().__init__()
        d_model = _check_d_model(d_model)
        image_size = validation.whole_number(image_size, "image_size")
        if image_size % PATCH:
            raise ValueError(
                f"image_size ({image_size}) must be a multiple of the patch size {PATCH}"
            )
        self.image_size = image_size
        side = image_size // PATCH  # patches across the image
        positions = sinusoidal_2d(side, side, d_model)  # (n, d_model); its size checked there
        self.project = nn.Linear(PATCH * PATCH, d_model)
        self.register_buffer("positions", positions, persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.embedded(_check_images(self, images))

    def embedded(self, images: torch.Tensor) -> torch.Tensor:
        """forward without its checks, for a model that has checked the images for all of its
        layers (_check_images)."""
        patches = _patchify(images, PATCH)  # (B, n, 16)
        return self.project(patches) + self.positions  # (B, n, d_model)


def _activations(module: nn.Module) -> dict[str, int]:
    """_encoder_activations of a model, or of its PatchEmbedding alone, from its modules."""
    embed = module if isinstance(module, PatchEmbedding) else module.embed
    blocks = [block for block in module.modules() if isinstance(block, EncoderBlock)]
    return _encoder_activations(
        embed.image_size,
        embed.positions.shape[-1],
        max((block.self_attention.num_heads for block in blocks), default=0),
        max((block.ffn.linear1.out_features for block in blocks), default=0),
        isinstance(module, VisionTransformer),
    )


def _encoder_activations(
    image_size: int, d_model: int, num_heads: int, d_ff: int, class_token: bool = False
) -> dict[str, int]:
    """The numbers per image of the largest tensors a model's forward pass builds, by name: the
    image, its patch embeddings (and the class token's) and, for encoder blocks (num_heads and
    d_ff 0 where there are none), their attention weights and feed-forward activations. A
    reader's decoder builds smaller ones: it writes at most grid^2 + 1 tokens, fewer than the
    canvas's 4 grid^2 patches."""
    patches = (image_size // PATCH) ** 2 + class_token
    return {
        "images": image_size**2,
        "patch embeddings": patches * d_model,
        f"attention weights ({num_heads} head(s) x {patches} x {patches} patches)": (
            num_heads * patches**2
        ),
        f"feed-forward activations ({patches} patches x d_ff {d_ff})": patches * d_ff,
    }


def check_model(model: object, kind: type, name: str = "model") -> nn.Module:
    """model itself if it is a `kind` (VisionTransformer, DigitFinder, CanvasReader) whose
    weights and buffers are finite numbers; otherwise an error naming what is wrong."""
    if kind not in MODEL_KINDS:
        raise TypeError(
            f"kind must be one of {', '.join(k.__name__ for k in MODEL_KINDS)}, got "
            f"{validation.shown(kind)}"
        )
    if not isinstance(model, kind):
        raise TypeError(f"{name} must be a {kind.__name__}, got {type(model).__name__}")
    buffers = dict(model.named_buffers())  # its forward reads those state_dict leaves out too
    for key, weight in {**model.state_dict(), **buffers}.items():
        if weight.is_meta:
            raise ValueError(
                f"{name} holds {key} on the meta device: it has shapes but no weights; load or "
                "train it first"
            )
        validation.dense_tensor(weight, f"{name}'s {key}", "")  # torch cannot sum float8
        if weight.is_floating_point() and not weight.isfinite().all():
            raise ValueError(
                f"{name} holds NaN or inf in {key}: everything it computes would be NaN; load or "
                "train it again"
            )
    return model


@plainly  # on the cpu, in float32/64 as built, whatever the caller set
def float64_copy(model: nn.Module) -> nn.Module:
    """A float64 copy in eval mode (of a model check_model takes): sums in float64 give the same
    numbers on any thread count, and the model itself is left as it is. Rebuilt from its sizes,
    which must build the modules it has (the same heads in each attention, ...), with torch's
    global random numbers left as they were: the fresh weights and buffers the constructor
    builds are overwritten."""
    kind = next((kind for kind in MODEL_KINDS if isinstance(model, kind)), None)
    if kind is not None:  # another type is named by _rebuilt
        check_model(model, kind)
    return _float64_copy(model)


def _float64_copy(model: nn.Module) -> nn.Module:
    """float64_copy of a model check_model has taken."""
    return _rebuilt(model).double().eval()


def _rebuilt(model: nn.Module) -> nn.Module:
    """The model built again from its sizes, with its weights and buffers: an error where its
    sizes do not build the modules it has, their settings (grid, max_len, ...) were changed, or
    a forward hook is on it, which the copy would not run."""
    if not isinstance(model, MODEL_KINDS):
        raise TypeError(
            f"model must be one of {', '.join(k.__name__ for k in MODEL_KINDS)}, got "
            f"{type(model).__name__}"
        )
    _refuse_hooks(
        model,
        "the evaluations and explorers compute on a float64 copy rebuilt from the model's sizes "
        "and weights, which neither a hook nor a replaced forward would follow",
    )
    sizes = getattr(model, "sizes", None)
    expected = sorted(inspect.signature(type(model)).parameters)
    if not isinstance(sizes, dict) or sorted(sizes, key=str) != expected:
        found = sorted(sizes, key=str) if isinstance(sizes, dict) else type(sizes).__name__
        raise ValueError(
            f"model.sizes, the dict its constructor sets, should name {expected}, found {found} "
            f"(was it deleted or changed?): build the model again"
        )
    with keeping_random_state():
        twin = type(model)(**sizes)
    held, built = model.state_dict().keys(), twin.state_dict().keys()
    if held != built:  # a module replaced, added or deleted, or sizes that build other modules
        missing = [key for key in built if key not in held]
        unexpected = [key for key in held if key not in built]
        found = "; ".join(
            text
            for keys, text in [
                (missing, f"it lacks {_names(missing)}"),
                (unexpected, f"it has {_names(unexpected)}, which they do not build"),
            ]
            if keys
        )
        raise ValueError(
            f"the model's weights are not those its sizes {sizes} build: {found} (was a module "
            "replaced, added or deleted, or model.sizes changed?): build the model again"
        )
    try:
        twin.load_state_dict(model.state_dict())
    except RuntimeError:  # the same names, other shapes
        raise ValueError(
            f"the model's weights do not fit its sizes {sizes} (was model.sizes changed?): "
            "build the model again"
        ) from None
    _copy_buffers(model, twin)
    held, built = _settings(model), _settings(twin)
    differing = next((name for name in [*held, *built] if held.get(name) != built.get(name)), None)
    if differing is not None:
        have, want = held.get(differing, {}), built.get(differing, {})
        module, built_module = dict(model.named_modules()), dict(twin.named_modules())
        what = ", ".join(
            f"{key} {_setting_shown(module.get(differing), key)} where its sizes build "
            f"{_setting_shown(built_module.get(differing), key)}"
            for key in sorted(have.keys() | want.keys())
            if have.get(key) != want.get(key)
        )
        raise ValueError(
            f"the model's modules are not those its sizes {sizes} build ({differing or 'the model'}"
            f" has {what}): was model.sizes or a module changed? build the model again"
        )
    return twin


def _names(keys: list[str], most: int = 4) -> str:
    """Weight names as an error lists them: the first `most`, then how many more."""
    shown = ", ".join(keys[:most])
    return shown if len(keys) <= most else f"{shown} and {len(keys) - most} more"


def _refuse_hooks(model: nn.Module, why: str) -> None:
    """An error naming each module of model that has a forward hook or forward pre-hook (by its
    path, e.g. head or blocks.0.self_attention), or a forward of its own set on the instance,
    saying why (`why`) and how to undo it."""
    replaced = [
        name or "the model itself" for name, m in model.named_modules() if "forward" in vars(m)
    ]
    if replaced:
        listed = ", ".join(replaced[:4]) + (
            f" and {len(replaced) - 4} more" if len(replaced) > 4 else ""
        )
        raise ValueError(
            f"the model's forward is replaced on {listed} (module.forward = ...): {why}; "
            f"delete the replacement (del module.forward) to use the class's own, or build the "
            f"model again"
        )
    hooked = [
        (name or "the model itself", kinds)
        for name, module in model.named_modules()
        if (
            kinds := [
                kind
                for kind, hooks in [
                    ("forward pre-hook", module._forward_pre_hooks),
                    ("forward hook", module._forward_hooks),
                ]
                if hooks
            ]
        )
    ]
    if hooked:
        where = "; ".join(f"{name} ({' and '.join(kinds)})" for name, kinds in hooked[:4])
        more = f"; and {len(hooked) - 4} more modules" if len(hooked) > 4 else ""
        one = len(hooked) == 1 and len(hooked[0][1]) == 1
        raise ValueError(
            f"the model has {'a hook' if one else 'hooks'} on {where}{more}: {why}; remove "
            f"{'it' if one else 'each'} with the handle's .remove() (handle = "
            "module.register_forward_hook(...)), or, for one that pruning or spectral_norm "
            "added, with torch.nn.utils.prune.remove(module, 'weight') or "
            "torch.nn.utils.remove_spectral_norm(module); then pass the model again"
        )


def _copy_buffers(model: nn.Module, twin: nn.Module) -> None:
    """Every buffer of model into twin, those its state_dict leaves out among them (positions,
    local, ...): edited by hand, they must reach the copy, which is to compute what model does."""
    held, built = dict(model.named_buffers()), dict(twin.named_buffers())
    if held.keys() != built.keys():
        raise ValueError(
            f"the model's buffers {sorted(held)} are not those its sizes build {sorted(built)} "
            "(was a module changed?): build the model again"
        )
    for name, buffer in held.items():
        target = built[name]
        same_kind = buffer.dtype == target.dtype or (
            buffer.is_floating_point() and target.is_floating_point()
        )
        if buffer.shape != target.shape or not same_kind:
            raise ValueError(
                f"the model's buffer {name} is a {buffer.dtype} tensor of shape "
                f"{tuple(buffer.shape)} where its sizes build a {target.dtype} one of shape "
                f"{tuple(target.shape)} (was it changed?): build the model again"
            )
        with torch.no_grad():
            target.copy_(buffer)  # a float buffer in the copy's dtype


def _settings(model: nn.Module) -> dict[str, dict]:
    """Each module's type and plain settings (num_heads, in_features, p, eps, ...) by name:
    what its forward reads besides its weights."""
    plain = int | float | str | tuple | numbers.Number  # numpy's numbers among them
    return {
        name: {
            "type": type(module),
            **{
                key: _comparable(value)
                for key, value in vars(module).items()
                if isinstance(value, plain) and not key.startswith("_") and key != "training"
            },
        }
        for name, module in model.named_modules()
    }


def _comparable(value: object) -> tuple:
    """A setting with its kind: a whole number (an int, an np.int64) stands for itself, while a
    3.0 is not the grid 3 a model was built with."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return int, int(value)
    return type(value), value


def _setting_shown(module: nn.Module | None, key: str) -> str:
    """A module's setting as an error shows it: its value, and its type where not a plain one."""
    if module is None:
        return "none"
    if key == "type":  # _settings' own entry, beside the settings vars() holds
        return type(module).__name__
    if key not in vars(module):
        return "none"
    value = vars(module)[key]
    if type(value) in (int, float, str, tuple):
        return validation.shown(value)
    return f"{validation.shown(value)} ({type(value).__name__})"


# 1. A small Vision Transformer


def _check_d_model(d_model: object) -> int:
    d_model = validation.whole_number(d_model, "d_model")
    if d_model % 4:
        raise ValueError(
            f"d_model ({validation.shown(d_model)}) must be a multiple of 4: the 2-D encoding's "
            "two halves of sin/cos pairs"
        )
    if (PATCH * PATCH + 1) * d_model > LARGEST_MODEL:  # the patch projection alone
        raise ValueError(
            f"d_model {validation.shown(d_model)} makes a patch projection of more than 2^26 = "
            f"{LARGEST_MODEL:,} parameters: a smaller model was meant"
        )
    return d_model


def _check_sizes(d_model: object, num_heads: object, d_ff: object) -> tuple[int, int, int]:
    d_model = _check_d_model(d_model)
    num_heads = validation.whole_number(num_heads, "num_heads")
    d_ff = validation.whole_number(d_ff, "d_ff")
    validation.head_size(d_model, num_heads)
    return d_model, num_heads, d_ff


def _check_parameters(d_model: int, d_ff: int, blocks: int, decoder_blocks: int = 0) -> None:
    """A model of these sizes (blocks of attention and feed-forward, decoder blocks with a
    second attention) has at most LARGEST_MODEL parameters: more is a typing mistake, and
    building it would exhaust the memory."""
    per_block = 4 * d_model * d_model + 2 * d_model * d_ff  # (W_q, W_k, W_v, W_o) and the FFN
    estimate = (blocks + decoder_blocks) * per_block + decoder_blocks * 4 * d_model * d_model
    if estimate > LARGEST_MODEL:
        raise ValueError(
            f"d_model {d_model}, d_ff {validation.shown(d_ff)} and {blocks + decoder_blocks} "
            f"blocks make more than 2^26 = {LARGEST_MODEL:,} parameters: a smaller model was "
            "meant"
        )


class VisionTransformer(nn.Module):
    """Classifies one 8 x 8 digit: its 4 patches behind a learned [class] token, pre-norm
    encoder blocks, a linear head on the class token. forward: (B, 1, 8, 8) -> (B, 10) logits.
    Each block's attention keeps its weights: blocks[i].self_attention.attention_weights
    (B, heads, 5, 5), query and key 0 the class token."""

    def __init__(self, d_model: int, num_heads: int, num_layers: int, d_ff: int):
        super().__init__()
        d_model, num_heads, d_ff = _check_sizes(d_model, num_heads, d_ff)
        num_layers = validation.layer_count(num_layers, "num_layers")
        _check_parameters(d_model, d_ff, num_layers)
        self.sizes = {"d_model": d_model, "num_heads": num_heads, "num_layers": num_layers}
        self.sizes["d_ff"] = d_ff
        self.embed = PatchEmbedding(d_model, PIXELS)
        self.class_token = nn.Parameter(torch.randn(1, 1, d_model) * 0.02)
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)  # pre-norm leaves the stream un-normalised
        self.head = nn.Linear(d_model, NUM_CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self._forward(_check_images(self, images))

    def _forward(self, images: torch.Tensor) -> torch.Tensor:
        patches = self.embed.embedded(images)  # (B, 4, d_model)
        cls = self.class_token.expand(len(images), -1, -1)  # (B, 1, d_model)
        x = torch.cat([cls, patches], dim=1)  # (B, 5, d_model)
        for block in self.blocks:
            x = block(x, None)
        return finite_logits(self.head(self.norm(x[:, 0])), self)  # (B, 10)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """The entropy in nats of each attention row: (..., k) -> (...). Each row must be attention
    weights (validation.attention_weights): in 0..1, summing to 1, or all 0 (no key allowed)."""
    validation.dense_tensor(weights, "weights", "(..., k)")
    if weights.numel() > LARGEST_TENSOR:  # an expanded view holds them for free
        raise ValueError(
            f"weights hold {weights.numel():,} numbers (shape {tuple(weights.shape)}), more than "
            f"the 2^28 = {LARGEST_TENSOR:,} row_entropy reads at once: pass fewer rows at a time"
        )
    validation.attention_weights(weights, "weights", "(..., k)")
    # 0 log 0 = 0; y = 1 where w = 0 keeps xlogy's gradient there finite (w / y, not 0 / 0)
    return -torch.special.xlogy(weights, torch.where(weights > 0, weights, 1)).sum(-1)


@torch.no_grad()
@plainly
def vit_attention_entropy(model: VisionTransformer, images: torch.Tensor) -> dict:
    """How spread the class token's attention is: {"entropy": (layers, heads) float64, the mean
    over images of the entropy (nats) of the class token's row over its keys (itself and the 4
    patches), "uniform": ln(keys), the entropy of a uniform row, the largest possible}."""
    model = _float64_copy(check_model(model, VisionTransformer))
    images = _check_images(model, images, torch.float64).double()
    if not len(images):
        raise ValueError("images must hold at least one digit: the mean over none is undefined")
    model(images)
    rows = [block.self_attention.attention_weights[:, :, 0] for block in model.blocks]
    entropy = torch.stack([row_entropy(row).mean(0) for row in rows])  # (layers, heads)
    return {"entropy": entropy, "uniform": math.log(rows[0].shape[-1])}


@torch.no_grad()
@plainly
def evaluate_vit(model: VisionTransformer, digits: Digits) -> dict:
    """{"accuracy": the share of `digits` (e.g. the test split) the model names right}."""
    check_model(model, VisionTransformer)
    if not len(check_digit_labels(digits)):
        raise ValueError("digits must hold at least one image: an accuracy over none is undefined")
    _check_activations(
        len(digits), _activations(model), torch.float64, f"digits of {len(digits):,} images"
    )
    check_pixels(digits.images, "digits.images", "(N, 1, 8, 8)")  # check_digits, by parts
    model = _float64_copy(model)
    predicted = model(digits.images.double()).argmax(-1)  # (N,)
    return {"accuracy": (predicted == digits.labels).double().mean().item()}


# 2. Find the digit: a word's query over the canvas


class DigitFinder(nn.Module):
    """A word (a digit's id 0..9) asks where that digit is on a canvas. The word's embedding is
    the query of one cross-attention head whose keys and values are the canvas's patches; a
    linear layer reads the cell from the attention's output.
    forward(images (B, 1, 24, 24), words (B,)) -> (B, 9) logits;
    attention.attention_weights (B, 1, 1, 36) after it.

    encoder_layers self-attention blocks come first, each LOCAL: a patch attends only to the
    patches of its own cell (same_cell_mask). A 4 x 4 patch is a quarter of a digit, and one
    linear map of it, shared by all four quarters, recognises the digit poorly (about 86% in
    trials); the local blocks tell each patch which digit it is part of, and since nothing
    moves between cells, the word's attention must land on the cell it answers."""

    def __init__(self, d_model: int, encoder_layers: int = 0, d_ff: int = 64, grid: int = GRID):
        super().__init__()
        d_model, _, d_ff = _check_sizes(d_model, 1, d_ff)
        encoder_layers = validation.layer_count(encoder_layers, "encoder_layers", minimum=0)
        self.grid = _check_grid(grid)
        _check_parameters(d_model, d_ff, encoder_layers + 1)  # + the word's cross-attention
        self.sizes = {"d_model": d_model, "encoder_layers": encoder_layers, "d_ff": d_ff}
        self.sizes["grid"] = self.grid
        self.embed = PatchEmbedding(d_model, self.grid * PIXELS)
        self.words = nn.Embedding(NUM_CLASSES, d_model)
        self.blocks = nn.ModuleList(EncoderBlock(d_model, 1, d_ff) for _ in range(encoder_layers))
        self.attention = MultiHeadAttention(d_model, num_heads=1)
        self.head = nn.Linear(d_model, self.grid * self.grid)
        self.register_buffer("local", same_cell_mask(self.grid), persistent=False)

    def forward(self, images: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        _check_images(self, images)
        _check_words(words, len(images))
        return self._forward(images, words)

    def _forward(self, images: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        patches = self.embed.embedded(images)  # (B, 36, d_model)
        for block in self.blocks:
            patches = block(patches, self.local)
        query = self.words(words)[:, None]  # (B, 1, d_model)
        found = self.attention(query, patches, patches)  # (B, 1, d_model)
        return finite_logits(self.head(found[:, 0]), self)  # (B, cells)


def cell_masks(grid: int = GRID) -> torch.Tensor:
    """(cells, patches) float: row c is 1 on the patches of cell c, 0 elsewhere."""
    grid = _check_grid(grid)
    side = grid * PIXELS // PATCH
    masks = torch.zeros(grid * grid, side * side, dtype=torch.float64)
    for cell in range(grid * grid):
        masks[cell, cell_patches(cell, grid, PATCH)] = 1.0
    return masks


def same_cell_mask(grid: int = GRID) -> torch.Tensor:
    """(patches, patches) bool, True where two patches lie in one cell (this project's mask
    convention: True = may attend)."""
    cell_of = cell_masks(grid).argmax(0)  # (patches,): the cell each patch lies in
    return cell_of[:, None] == cell_of[None, :]


@plainly
def finder_questions(canvases: Canvases, generator: torch.Generator | None = None) -> tuple:
    """(words (B,), cells (B,)): for each canvas one of its digits, chosen at random, and the
    cell that holds it. The canvases must hold distinct labels, so each word has one answer."""
    check_canvases(canvases)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r:.80}")
    filled = canvases.digits >= 0  # (B, cells)
    if not filled.any(1).all():
        raise ValueError("every canvas must hold a digit to ask for")
    _check_distinct(canvases)
    return _finder_questions(canvases, generator)


def _finder_questions(canvases: Canvases, generator: torch.Generator | None) -> tuple:
    """finder_questions of canvases it took."""
    filled = canvases.digits >= 0  # (B, cells)
    scores = torch.rand(filled.shape, generator=generator, dtype=torch.float32)
    scores = scores.masked_fill(~filled, -1.0)  # float32 under any default: the same draws
    cells = scores.argmax(1)  # (B,): a random filled cell
    words = canvases.digits.gather(1, cells[:, None])[:, 0].long()  # (B,), of any digits' dtype
    return words, cells


@torch.no_grad()
@plainly
def evaluate_finder(
    model: DigitFinder, canvases: Canvases, words: torch.Tensor, cells: torch.Tensor
) -> dict:
    """{"accuracy": the share of questions answered with the right cell, "attention_on_cell":
    the mean attention mass of the word's query on the 4 patches of the right cell}."""
    model = _float64_copy(check_model(model, DigitFinder))  # names a grid changed by hand
    canvases = _check_canvases(canvases, model)
    _check_distinct(canvases)
    _check_words(words, len(canvases))
    cells = _check_cells(cells, len(canvases), model.grid**2)
    asked = canvases.digits.gather(1, cells[:, None])[:, 0].long()  # (B,): each cell's digit
    if not torch.equal(asked, words.long()):
        wrong = int((asked != words).nonzero()[0, 0])
        raise ValueError(
            f"cells must hold the words' digits (finder_questions()): canvas {wrong} asks for "
            f"{int(words[wrong])} at cell {int(cells[wrong])}, which holds {int(asked[wrong])}"
        )
    predicted = model(canvases.images.double(), words).argmax(-1)  # (B,)
    weights = model.attention.attention_weights[:, 0, 0]  # (B, patches)
    on_cell = (weights * cell_masks(model.grid)[cells]).sum(-1)  # (B,)
    return {
        "accuracy": (predicted == cells).double().mean().item(),
        "attention_on_cell": on_cell.mean().item(),
    }


# 3. Read the canvas: a patch encoder and chapter 07's decoder


def _check_activations(batch: int, each: dict[str, int], dtype: torch.dtype, what: str) -> None:
    """The largest tensor a forward pass builds for a batch (each: its numbers for one item,
    by name) takes at most LARGEST_ACTIVATION bytes in dtype (float64 twice float32's): more is
    a typing mistake, and a forward pass holds several such tensors at once."""
    name = max(each, key=each.get)
    if batch * each[name] * dtype.itemsize > LARGEST_ACTIVATION:
        raise ValueError(
            f"{what} would make {name} of {batch * each[name] * dtype.itemsize:,} bytes in "
            f"{dtype} ({each[name]:,} numbers each), more than one tensor here may take "
            f"({LARGEST_ACTIVATION:,} bytes, 256 MiB): pass fewer at a time"
        )


class CanvasReader(nn.Module):
    """Writes a canvas's digits in reading order (row by row, left to right), then <eos>.
    Tokens: 0..9 the digits, 10 <bos>, 11 <eos>, 12 <pad>. The encoder is patch embedding,
    2-D positions and encoder blocks; the decoder is chapter 07's DecoderBlock (causal
    self-attention, cross-attention over the encoder's output, feed-forward).
    forward(images (B, 1, 24, 24), tokens (B, T) starting with <bos>) -> (B, T, 13) logits;
    decoder[i].cross_attention.attention_weights (B, heads, T, 36) after it."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        encoder_layers: int,
        decoder_layers: int,
        d_ff: int,
        grid: int = GRID,
    ):
        super().__init__()
        d_model, num_heads, d_ff = _check_sizes(d_model, num_heads, d_ff)
        encoder_layers = validation.layer_count(encoder_layers, "encoder_layers")
        decoder_layers = validation.layer_count(decoder_layers, "decoder_layers")
        self.grid = _check_grid(grid)
        _check_parameters(d_model, d_ff, encoder_layers, decoder_layers)
        self.sizes = {"d_model": d_model, "num_heads": num_heads, "d_ff": d_ff, "grid": self.grid}
        self.sizes.update(encoder_layers=encoder_layers, decoder_layers=decoder_layers)
        self.max_len = self.grid * self.grid + 1  # <bos> and every cell's digit
        self.embed = PatchEmbedding(d_model, self.grid * PIXELS)
        self.encoder = nn.ModuleList(
            EncoderBlock(d_model, num_heads, d_ff) for _ in range(encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model)
        self.tokens = nn.Embedding(READER_VOCAB, d_model)
        positions = sinusoidal_encoding(self.max_len, d_model)  # (max_len, d_model)
        self.register_buffer("positions", positions, persistent=False)
        self.decoder = nn.ModuleList(
            DecoderBlock(d_model, num_heads, d_ff) for _ in range(decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, READER_VOCAB)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 1, 24, 24) -> (B, 36, d_model)."""
        return self._encode(_check_images(self, images))

    def _encode(self, images: torch.Tensor) -> torch.Tensor:
        x = self.embed.embedded(images)  # (B, 36, d_model)
        for block in self.encoder:
            x = block(x, None)
        memory = self.encoder_norm(x)
        if not memory.isfinite().all():
            raise Overflow(
                f"the encoder's output overflows to inf or NaN in {memory.dtype}: "
                f"{self._largest_weight()} are too large"
            )
        return memory

    def decode(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """tokens (B, T), memory (B, 36, d_model) -> (B, T, 13) logits."""
        _check_memory(memory, self.head.weight)
        self._check_decoding(tokens, memory)
        return self._decode(tokens, memory)

    def _decode(self, tokens: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        y = self.tokens(tokens) + self.positions[:length]  # (B, T, d_model)
        mask = causal_mask(length).to(tokens.device)  # (T, T), True where allowed
        for block in self.decoder:
            y = block(y, memory, mask, None)
        logits = self.head(self.decoder_norm(y))  # (B, T, 13)
        if not logits.isfinite().all():
            raise Overflow(
                f"the logits overflow to inf or NaN in {logits.dtype}: memory (values up to "
                f"{memory.abs().max().item():.3g}; encode()'s final LayerNorm keeps them near 1) "
                f"or {self._largest_weight()} are too large"
            )
        return logits

    def _reading_work(self) -> int:
        """About how many multiply-adds read_canvas takes for one canvas: the encoder's blocks
        once, then at each of max_len steps every decoder block over the t tokens written so
        far, again (attention to them and to the patches, projections, feed-forward)."""
        patches, d_model = self.embed.positions.shape
        d_ff = max(block.ffn.linear1.out_features for block in [*self.encoder, *self.decoder])
        per_position = 4 * d_model**2 + 2 * d_model * d_ff  # projections, feed-forward
        encoder = len(self.encoder) * patches * (2 * patches * d_model + per_position)
        steps = range(1, self.max_len + 1)
        tokens = sum(steps)  # the tokens decoded in all
        attended = sum(t * (t + patches) for t in steps)  # their keys, written and patches
        decoder = len(self.decoder) * (2 * attended * d_model + tokens * 2 * per_position)
        return encoder + decoder

    def _decoder_activations(self, length: int, patches: int) -> dict[str, int]:
        """The numbers per canvas of the largest tensors decode builds for `length` tokens over a
        memory of `patches` patches, by name."""
        heads = max(block.cross_attention.num_heads for block in self.decoder)
        d_ff = max(block.ffn.linear1.out_features for block in self.decoder)
        per_head = f"{heads} head(s) x {length} tokens"
        return {
            f"cross-attention weights ({per_head} x {patches} patches)": heads * length * patches,
            f"self-attention weights ({per_head} x {length} tokens)": heads * length**2,
            f"feed-forward activations ({length} tokens x d_ff {d_ff})": length * d_ff,
            "logits": length * READER_VOCAB,
        }

    def _largest_weight(self) -> str:
        return largest_weight(self)

    def forward(self, images: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        memory = self.encode(images)  # (B, 36, d_model)
        self._check_decoding(tokens, memory)
        return self._decode(tokens, memory)

    def _check_decoding(self, tokens: object, memory: torch.Tensor) -> None:
        """Tokens of memory's batch, and every tensor of decoding them small enough."""
        _check_tokens(tokens, len(memory), self.max_len)
        length = tokens.shape[1]
        _check_activations(
            len(memory), self._decoder_activations(length, memory.shape[1]), memory.dtype,
            f"decoding {length} tokens of {len(memory):,} canvases",
        )  # fmt: skip


class Overflow(ValueError):
    """A model's activations or logits overflow to inf or NaN: its weights (or the memory it was
    given) are too large."""


def largest_weight(model: nn.Module) -> str:
    """The model's weights, by the largest of them, for an overflow's message."""
    name, size = _largest(model)
    return f"the weights (up to {size:.3g}, in {name})"


def _largest(model: nn.Module) -> tuple[str, float]:
    """The name and size of the model's largest weight; a TypeError for what holds none."""
    weights = model.state_dict() if isinstance(model, nn.Module) else {}
    sizes = {name: weight.abs().max().item() for name, weight in weights.items() if weight.numel()}
    if not sizes:
        held = type(model).__name__ if isinstance(model, nn.Module) else validation.shown(model)
        raise TypeError(f"expected a model with weights (an nn.Module), got {held}")
    return max(sizes.items(), key=lambda item: (not math.isfinite(item[1]), item[1]))  # NaN first


def finite_logits(logits: torch.Tensor, model: nn.Module) -> torch.Tensor:
    """logits, or an Overflow if any is inf or NaN, naming the model's largest weight when the
    weights are large enough to be the cause (finite ones can overflow float32 on the way)."""
    validation.tensor(logits, "logits", "of floating point")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating point tensor, got {logits.dtype}")
    if logits.isfinite().all():
        return logits
    size = _largest(model)[1]
    # Trained weights are near 1; past 1/eps an input's unit is lost in the weight's rounding.
    if not math.isfinite(size) or size > 1 / torch.finfo(logits.dtype).eps:
        raise Overflow(
            f"the logits overflow to inf or NaN in {logits.dtype}: {largest_weight(model)} are "
            f"too large"
        )
    raise Overflow(
        f"the logits are not finite ({(~logits.isfinite()).sum().item():,} of {logits.numel():,} "
        f"are inf or NaN), though {largest_weight(model)} are not too large"
    )


@plainly
def reading_order(canvases: Canvases) -> tuple[torch.Tensor, torch.Tensor]:
    """(cells, counts): cells (B, cells) lists each canvas's filled cells in reading order
    first (the rest after them), counts (B,) how many are filled."""
    return _reading_order(check_canvases(canvases))


def _reading_order(canvases: Canvases) -> tuple[torch.Tensor, torch.Tensor]:
    filled = canvases.digits >= 0  # (B, cells)
    index = torch.arange(filled.shape[1])  # (cells,)
    key = torch.where(filled, index, index + filled.shape[1])  # empty cells sort last
    return key.argsort(1), filled.sum(1)


@plainly
def reader_sequences(canvases: Canvases) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets), each (B, cells + 1): inputs <bos> then the digits in reading order,
    targets the digits then <eos>; both padded with <pad>. Teacher forcing feeds inputs and
    asks for targets."""
    return _reader_sequences(check_canvases(canvases))


def _reader_sequences(canvases: Canvases) -> tuple[torch.Tensor, torch.Tensor]:
    cells, counts = _reading_order(canvases)
    batch, length = len(canvases), cells.shape[1] + 1  # every cell filled, then <eos>
    digits = canvases.digits.gather(1, cells)  # (B, cells): filled cells' labels first
    position = torch.arange(length)  # (L,)
    targets = torch.full((batch, length), PAD, dtype=torch.long)
    targets[:, :-1] = torch.where(position[:-1] < counts[:, None], digits, PAD)
    targets[position[None] == counts[:, None]] = EOS
    inputs = torch.cat([torch.full((batch, 1), BOS), targets[:, :-1]], dim=1)  # (B, L)
    return inputs.masked_fill(inputs == EOS, PAD), targets


@torch.no_grad()
@plainly
def read_canvas(model: CanvasReader, images: torch.Tensor) -> torch.Tensor:
    """Greedy decoding: (B, 1, 24, 24) -> (B, cells + 1) tokens, the digits then <eos>, <pad>
    after it (a row that never writes <eos> holds cells + 1 digits). A model with a forward hook
    or pre-hook is refused, as evaluate_reader refuses it."""
    check_model(model, CanvasReader)
    _refuse_hooks(  # evaluate_reader reads through a float64 copy, which has none
        model,
        "read_canvas refuses it as evaluate_reader and the explorers do, so that they all read "
        "alike: they read through a float64 copy rebuilt from the model's sizes and weights, "
        "which neither a hook nor a replaced forward would follow",
    )
    _rebuilt(model)  # names a grid or max_len changed by hand
    _check_reading(model, images)
    return _read(model, images)


@torch.no_grad()
def _read(model: CanvasReader, images: torch.Tensor) -> torch.Tensor:
    """read_canvas on a model it (or float64_copy) took, of images _check_reading took."""
    memory = model._encode(images)  # (B, 36, d_model)
    written = torch.full((len(images), 1), BOS, dtype=torch.long)  # (B, 1)
    done = torch.zeros(len(images), dtype=torch.bool)
    for _ in range(model.max_len):
        next_token = model._decode(written, memory)[:, -1].argmax(-1)  # (B,)
        next_token = next_token.masked_fill(done, PAD)
        done |= next_token == EOS
        written = torch.cat([written, next_token[:, None]], dim=1)
        if done.all():
            break
    tokens = torch.full((len(images), model.max_len), PAD, dtype=torch.long)
    tokens[:, : written.shape[1] - 1] = written[:, 1:]
    return tokens


@torch.no_grad()
@plainly
def evaluate_reader(model: CanvasReader, canvases: Canvases, layer: int = -1) -> dict:
    """{"exact_match": the share of canvases read exactly (greedy: every digit in order, then
    <eos>), "attention_share": the mean over canvases of the mean over their digits of the
    cross-attention (decoder block `layer`, averaged over heads) on the 4 patches of that
    digit's cell, as the digit is written (teacher forcing with the true digits)}."""
    model = _float64_copy(check_model(model, CanvasReader))  # names a grid changed by hand
    canvases = _check_canvases(canvases, model)
    if not (canvases.digits >= 0).any():
        raise ValueError("canvases must hold at least one digit to read: every cell is empty")
    layer = _check_layer(layer, len(model.decoder))
    images = canvases.images.double()
    _check_reading(model, images)
    inputs, targets = _reader_sequences(canvases)
    exact = (_read(model, images) == targets).all(1)  # (B,): the copy, checked above
    model._decode(inputs, model._encode(images))
    weights = model.decoder[layer].cross_attention.attention_weights.mean(1)  # (B, L, 36)
    cells, counts = _reading_order(canvases)
    on_cells = cell_masks(model.grid)[cells]  # (B, cells, 36): row t, the t-th digit's cell
    share = (weights[:, :-1] * on_cells).sum(-1)  # (B, cells): as the t-th digit is written
    written = torch.arange(share.shape[1]) < counts[:, None]  # (B, cells)
    per_canvas = (share * written).sum(1) / counts.clamp(min=1)  # (B,)
    return {
        "exact_match": exact.double().mean().item(),
        "attention_share": per_canvas[counts > 0].mean().item(),
    }


# 4. Recipes, training, the saved file


@dataclass(frozen=True)
class Recipe:
    """How a model is trained; each default says why. VitRecipe, FinderRecipe and ReaderRecipe
    add the sizes of their model."""

    steps: int = 1000
    batch_size: int = 64
    learning_rate: float = 3e-3  # small models, pre-norm: a large step trains in seconds
    weight_decay: float = 0.01
    log_every: int = 50  # steps between two rows of the log
    seed: int = 0

    def __post_init__(self):
        learning_rate, weight_decay = validation.adamw_rates(self.learning_rate, self.weight_decay)
        object.__setattr__(self, "learning_rate", learning_rate)
        object.__setattr__(self, "weight_decay", weight_decay)
        kinds = {  # in the fields' order
            field.name: _layers(field.name)
            if field.name.endswith("layers")
            else validation.recipe_size
            for field in fields(self)
            if field.name not in ("learning_rate", "weight_decay")
        }
        validation.coerce_fields(self, {**kinds, "seed": validation.seed})


def _layers(name: str):
    """The check of a recipe's count of blocks: an encoder may have none, a decoder not."""
    return functools.partial(validation.layer_count, minimum=0 if name == "encoder_layers" else 1)


@dataclass(frozen=True)
class VitRecipe(Recipe):
    d_model: int = 32  # 4 patches of 16 pixels: 32 dimensions are plenty
    num_heads: int = 2
    num_layers: int = 2
    d_ff: int = 64
    steps: int = 1500  # about 67 passes over the 1,438 training digits

    def __post_init__(self):
        super().__post_init__()
        _check_sizes(self.d_model, self.num_heads, self.d_ff)
        _check_parameters(self.d_model, self.d_ff, self.num_layers)
        each = _encoder_activations(PIXELS, self.d_model, self.num_heads, self.d_ff, True)
        _check_activations(self.batch_size, each, torch.float32, f"batch_size {self.batch_size:,}")


def _check_canvas_batch(
    recipe: "FinderRecipe | ReaderRecipe", most: int, num_heads: int, d_ff: int
) -> None:
    """A batch of canvases of up to `most` digits that make_canvases builds in seconds, and
    that the model (of encoder blocks of num_heads and d_ff, 0 if none) can read."""
    check_placed_digits(recipe.batch_size, most, "batch_size")
    each = _encoder_activations(GRID * PIXELS, recipe.d_model, num_heads, d_ff)
    _check_activations(recipe.batch_size, each, torch.float32, f"batch_size {recipe.batch_size:,}")


@dataclass(frozen=True)
class FinderRecipe(Recipe):
    d_model: int = 32
    encoder_layers: int = 1  # local (within a cell); without it about 86% accuracy in trials
    d_ff: int = 64
    steps: int = 2000  # fresh canvases every step

    def __post_init__(self):
        super().__post_init__()
        _check_sizes(self.d_model, 1, self.d_ff)
        _check_parameters(self.d_model, self.d_ff, self.encoder_layers + 1)
        local = self.encoder_layers > 0  # one head, of the local blocks
        _check_canvas_batch(self, FINDER_DIGITS, int(local), self.d_ff if local else 0)


@dataclass(frozen=True)
class ReaderRecipe(Recipe):
    d_model: int = 64
    num_heads: int = 4
    encoder_layers: int = 2  # enough to tell each filled cell how many come before it
    decoder_layers: int = 2
    d_ff: int = 128
    fewest: int = 1  # digits per training and test canvas
    most: int = 4
    steps: int = 2000

    def __post_init__(self):
        super().__post_init__()
        _check_sizes(self.d_model, self.num_heads, self.d_ff)
        if self.encoder_layers < 1:
            raise ValueError(
                f"encoder_layers must be a whole number >= 1 (the reader's encoder), got "
                f"{self.encoder_layers}"
            )
        _check_parameters(self.d_model, self.d_ff, self.encoder_layers, self.decoder_layers)
        if not self.fewest <= self.most <= GRID * GRID:
            raise ValueError(
                f"digits per canvas must satisfy 1 <= fewest ({self.fewest}) <= most "
                f"({self.most}) <= {GRID * GRID} cells"
            )
        _check_canvas_batch(self, self.most, self.num_heads, self.d_ff)


MODELS = {"vit": VitRecipe, "finder": FinderRecipe, "reader": ReaderRecipe}
MODEL_KINDS = (VisionTransformer, DigitFinder, CanvasReader)


def build(recipe: Recipe) -> nn.Module:
    """The untrained model a recipe describes."""
    if isinstance(recipe, VitRecipe):
        return VisionTransformer(recipe.d_model, recipe.num_heads, recipe.num_layers, recipe.d_ff)
    if isinstance(recipe, FinderRecipe):
        return DigitFinder(recipe.d_model, recipe.encoder_layers, recipe.d_ff)
    if isinstance(recipe, ReaderRecipe):
        return CanvasReader(
            recipe.d_model,
            recipe.num_heads,
            recipe.encoder_layers,
            recipe.decoder_layers,
            recipe.d_ff,
        )
    raise TypeError(
        f"recipe must be a VitRecipe, FinderRecipe or ReaderRecipe, got {type(recipe).__name__}"
    )


def vit_loss(
    model: VisionTransformer, recipe: VitRecipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor:
    """Cross-entropy on a batch of random training digits."""
    _check_step(model, VisionTransformer, recipe, VitRecipe, digits, generator)
    _check_batch(recipe.batch_size, model, f"recipe.batch_size {recipe.batch_size:,}")
    check_pixels(digits.images, "images", f"(B, 1, {PIXELS}, {PIXELS})")
    _check_weights_take(model.embed.project.weight, digits.images)
    return _vit_loss(model, recipe, digits, generator)


def _vit_loss(
    model: VisionTransformer, recipe: VitRecipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor:
    batch = torch.randint(len(digits), (recipe.batch_size,), generator=generator)
    return F.cross_entropy(model._forward(digits.images[batch]), digits.labels[batch])


def finder_loss(
    model: DigitFinder, recipe: FinderRecipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor:
    """Cross-entropy of the cell, on fresh canvases of FINDER_DIGITS distinct training digits."""
    _check_step(model, DigitFinder, recipe, FinderRecipe, digits, generator)
    _check_room(model, FINDER_DIGITS, f"its training canvases hold {FINDER_DIGITS} digits")
    _check_batch(recipe.batch_size, model, f"recipe.batch_size {recipe.batch_size:,}")
    check_canvas_request(digits, recipe.batch_size, FINDER_DIGITS, model.grid, True, generator)
    _check_weights_take(model.embed.project.weight, digits.images)
    return _finder_loss(model, recipe, digits, generator)


def _finder_loss(
    model: DigitFinder, recipe: FinderRecipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor:
    span = (FINDER_DIGITS, FINDER_DIGITS)
    canvases = _make_canvases(digits, recipe.batch_size, span, model.grid, True, generator)
    words, cells = _finder_questions(canvases, generator)
    return F.cross_entropy(model._forward(canvases.images, words), cells)


def reader_loss(
    model: CanvasReader, recipe: ReaderRecipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor:
    """Teacher-forced cross-entropy of every written token (not the padding), on fresh canvases
    of training digits (labels may repeat)."""
    _check_step(model, CanvasReader, recipe, ReaderRecipe, digits, generator)
    _check_room(model, recipe.most, f"the recipe's canvases hold up to most = {recipe.most} digits")
    _check_batch(recipe.batch_size, model, f"recipe.batch_size {recipe.batch_size:,}")
    span = (recipe.fewest, recipe.most)
    check_canvas_request(digits, recipe.batch_size, span, model.grid, False, generator)
    _check_weights_take(model.embed.project.weight, digits.images)
    return _reader_loss(model, recipe, digits, generator)


def _reader_loss(
    model: CanvasReader, recipe: ReaderRecipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor:
    span = (recipe.fewest, recipe.most)
    canvases = _make_canvases(digits, recipe.batch_size, span, model.grid, False, generator)
    inputs, targets = _reader_sequences(canvases)
    logits = model._decode(inputs, model._encode(canvases.images))  # (B, L, 13)
    return F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=PAD)


LOSSES = {VitRecipe: vit_loss, FinderRecipe: finder_loss, ReaderRecipe: reader_loss}
_LOSS_CORES = {VitRecipe: _vit_loss, FinderRecipe: _finder_loss, ReaderRecipe: _reader_loss}


def train(recipe: Recipe, progress: bool = False) -> dict:
    """Train the model a recipe describes on the training digits; returns {"model" (eval mode),
    "log": {"step": [...], "loss": [...]} every recipe.log_every steps, "seconds"}. Runs on one
    thread with its own seeded generators, so a rerun is bit-identical on the same machine and
    the caller's random numbers stay theirs. Inside, gradients are on and the model is built in
    float32, whatever the caller set (torch.no_grad(), torch.inference_mode(), another default
    dtype); the caller's settings are put back."""
    if type(recipe) not in LOSSES:
        raise TypeError(
            f"recipe must be a VitRecipe, FinderRecipe or ReaderRecipe, got {type(recipe).__name__}"
        )
    progress = validation.flag(progress, "progress")
    with one_torch_thread(), keeping_random_state(), trainable_float32():
        return _fit(recipe, progress)


def _fit(recipe: Recipe, progress: bool) -> dict:
    torch.manual_seed(recipe.seed)
    model = build(recipe)
    loss_of = _LOSS_CORES[type(recipe)]  # build and load_digits made what they check
    train_digits, _ = load_digits()
    generator = torch.Generator().manual_seed(recipe.seed + 1)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=recipe.learning_rate, weight_decay=recipe.weight_decay
    )
    log, start = {"step": [], "loss": []}, time.perf_counter()
    name = type(model).__name__
    for step in tqdm(range(1, recipe.steps + 1), desc=name, disable=not progress):
        loss = _finite_loss(loss_of, model, recipe, train_digits, generator)
        if loss is None:
            raise _divergence(name, f"at step {step}", recipe)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % recipe.log_every == 0 or step == recipe.steps:
            log["step"].append(step)
            log["loss"].append(loss.item())
    with torch.no_grad():  # the last step's update, which no logged loss has seen
        final = _finite_loss(loss_of, model, recipe, train_digits, generator)
    if final is None or not all(weight.isfinite().all() for weight in model.parameters()):
        raise _divergence(name, f"in its last step ({recipe.steps})", recipe)
    return {"model": model.eval(), "log": log, "seconds": time.perf_counter() - start}


def _finite_loss(
    loss_of, model: nn.Module, recipe: Recipe, digits: Digits, generator: torch.Generator
) -> torch.Tensor | None:
    """The loss of one training step, or None where it is NaN or inf (or where the reader's
    numbers overflow, which it refuses)."""
    try:
        loss = loss_of(model, recipe, digits, generator)
    except Overflow:
        return None
    return loss if loss.isfinite() else None


def _divergence(name: str, when: str, recipe: Recipe) -> ValueError:
    return ValueError(
        f"training {name} diverged {when}: its loss or weights became NaN or inf; the learning "
        f"rate {recipe.learning_rate:g} is too large (the recipe's default is "
        f"{type(recipe).learning_rate:g})"
    )


def train_vit(recipe: VitRecipe = VitRecipe(), progress: bool = False) -> dict:
    """train() for the Vision Transformer."""
    return train(_check_recipe(recipe, VitRecipe), progress)


def train_finder(recipe: FinderRecipe = FinderRecipe(), progress: bool = False) -> dict:
    """train() for the digit finder."""
    return train(_check_recipe(recipe, FinderRecipe), progress)


def train_reader(recipe: ReaderRecipe = ReaderRecipe(), progress: bool = False) -> dict:
    """train() for the canvas reader."""
    return train(_check_recipe(recipe, ReaderRecipe), progress)


TEST_CANVASES = 1000  # canvases of test digits each measurement uses


@plainly
def finder_test_set(count: int = TEST_CANVASES, seed: int = 1) -> tuple:
    """(canvases, words, cells): canvases of 3 distinct TEST digits, the word asked of each and
    the cell that holds it; the same on every call. make_canvases bounds the count."""
    generator = torch.Generator().manual_seed(validation.seed(seed))
    canvases = make_canvases(load_digits()[1], count, FINDER_DIGITS, GRID, True, generator)
    return (canvases, *finder_questions(canvases, generator))


@plainly
def reader_test_set(
    count: int = TEST_CANVASES, seed: int = 2, recipe: ReaderRecipe = ReaderRecipe()
) -> Canvases:
    """Canvases of recipe.fewest to recipe.most TEST digits (labels may repeat); the same on
    every call. make_canvases bounds the count."""
    _check_recipe(recipe, ReaderRecipe)
    generator = torch.Generator().manual_seed(validation.seed(seed))
    span = (recipe.fewest, recipe.most)
    return make_canvases(load_digits()[1], count, span, GRID, False, generator)


def train_and_save(path: str | Path = SAVED_MODELS, recipes: dict | None = None) -> dict:
    """Train the three models (recipes: {"vit", "finder", "reader"} -> their recipes, the
    defaults if None) and save their weights, recipes and logs in one checksummed file.
    Returns {name: seconds of training}; the file holds no timings, so a rerun on the same
    machine writes the same bytes."""
    path = savable_path(path)
    recipes = _check_recipes(
        {name: kind() for name, kind in MODELS.items()} if recipes is None else recipes
    )
    results = {name: train(recipe, progress=True) for name, recipe in recipes.items()}
    save_checkpoint(
        path,
        {
            "recipes": {name: asdict(recipe) for name, recipe in recipes.items()},
            "weights": {name: result["model"].state_dict() for name, result in results.items()},
            "logs": {name: result["log"] for name, result in results.items()},
        },
    )
    return {name: result["seconds"] for name, result in results.items()}


@plainly
def load_vision_models(path: str | Path = SAVED_MODELS) -> dict:
    """The saved models (checksum verified, weights_only=True): {"vit": VisionTransformer,
    "finder": DigitFinder, "reader": CanvasReader} in eval mode, built in float32 and ready to
    train further, whatever the caller set (torch.inference_mode(), another default dtype),
    plus "recipes" {name: recipe} and "logs" {name: {"step", "loss"}}."""
    saved = load_checkpoint(path, SAVED_KEYS, REMAKE)
    extra = sorted(set(saved) - set(SAVED_KEYS), key=str)
    if extra:
        raise CheckpointError(
            f"{path} should hold {list(SAVED_KEYS)} alone, found also {extra}: "
            f"rebuild it with `{REMAKE}`"
        )
    for key in SAVED_KEYS:
        if not isinstance(saved[key], dict) or set(saved[key]) != set(MODELS):
            found = (
                sorted(saved[key], key=str)
                if isinstance(saved[key], dict)
                else type(saved[key]).__name__
            )
            raise CheckpointError(f"{path}: its {key} should name {sorted(MODELS)}, found {found}")
    loaded = {"recipes": {}, "logs": {}}
    weights = {}
    for name, kind in MODELS.items():  # everything checked before any model is built
        where = f"{path} ({name})"
        recipe = _saved_recipe(where, kind, saved["recipes"][name])
        loaded["recipes"][name] = recipe
        loaded["logs"][name] = _checked_log(where, saved["logs"][name], recipe)
        weights[name] = float_weights(saved["weights"][name], where)
    for name in MODELS:
        where = f"{path} ({name})"
        # initial weights, overwritten: not the caller's random numbers; as train() builds them
        with keeping_random_state(), trainable_float32():
            model = build(loaded["recipes"][name])
            load_weights(model, weights[name], where)
        loaded[name] = model.eval()
    return loaded


def _saved_recipe(where: str, kind: type, found: object) -> Recipe:
    expected = {field.name for field in fields(kind)}
    if not isinstance(found, dict) or set(found) != expected:
        got = sorted(found, key=str) if isinstance(found, dict) else type(found).__name__
        raise CheckpointError(f"{where}: its recipe should hold {sorted(expected)}, found {got}")
    try:
        return kind(**found)
    except (TypeError, ValueError) as error:
        raise CheckpointError(f"{where}: its recipe is not a valid one ({error})") from None


def main() -> None:
    """python -m helpers.vision_models: retrain chapter 14's three models and save them."""
    argparse.ArgumentParser(
        description="Retrain chapter 14's three models and store them in data/."
    ).parse_args()
    print({name: f"{s:.1f} s" for name, s in train_and_save().items()})


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def _check_grid(grid: object) -> int:
    grid = validation.whole_number(grid, "grid")
    if grid > LARGEST_GRID:
        raise ValueError(
            f"grid must be at most {LARGEST_GRID} cells across, got {validation.shown(grid)}"
        )
    return grid


def _check_images(
    module: nn.Module, images: object, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """images (B, 1, S, S) for the image size S of module (a model or its PatchEmbedding),
    pixels in 0..1, in the dtype of its weights, of a batch whose every tensor in a forward pass
    of module fits in LARGEST_ACTIVATION (_check_activations). With a dtype, the images may be
    of any floating dtype: the caller converts them to that one."""
    embed = module if isinstance(module, PatchEmbedding) else module.embed
    size = embed.image_size
    shape = f"(B, 1, {size}, {size})"
    validation.tensor(images, "images", shape)
    refuse_nested(images, "images", f"pixels {shape}")
    if images.dim() != 4 or tuple(images.shape[1:]) != (1, size, size):
        raise ValueError(f"images must be {shape}, got {tuple(images.shape)}")
    weight = embed.project.weight
    batch = f"a batch of {images.shape[0]:,} images"
    _check_activations(images.shape[0], _activations(module), dtype or weight.dtype, batch)
    check_pixels(images, "images", shape)
    if dtype is None:
        _check_weights_take(weight, images)
    return images


def _check_weights_take(weight: torch.Tensor, images: torch.Tensor) -> None:
    """Images in the dtype and on the device of a model's weight."""
    if images.dtype != weight.dtype or images.device != weight.device:
        raise ValueError(
            f"images are {images.dtype} on {images.device} but the model's weights are "
            f"{weight.dtype} on {weight.device}: convert them with images.to(...)"
        )


def _check_batch(batch: int, model: nn.Module, what: str) -> None:
    """_check_activations of a batch for the model, in the dtype of its weights."""
    _check_activations(batch, _activations(model), model.embed.project.weight.dtype, what)


def _check_words(words: object, batch: int) -> torch.Tensor:
    validation.token_ids(words, "words", NUM_CLASSES, shape="(B,) digit ids 0..9", dim=1)
    if len(words) != batch:
        raise ValueError(f"words must hold one id per canvas ({batch}), got {len(words)}")
    return words


def _check_cells(cells: object, batch: int, count: int) -> torch.Tensor:
    validation.tensor(cells, "cells", f"(B,) cell indices 0..{count - 1}")
    refuse_nested(cells, "cells", f"(B,) cell indices 0..{count - 1}")
    if cells.dim() != 1 or len(cells) != batch:
        raise ValueError(
            f"cells must hold one cell per canvas, ({batch},), got shape {tuple(cells.shape)}"
        )
    if cells.is_meta:
        raise ValueError("cells is on the meta device: it has a shape but no cells to read")
    if cells.layout != torch.strided:
        raise ValueError(
            f"cells must be a dense tensor of cell indices, got a {cells.layout} one: convert it "
            "with .to_dense()"
        )
    if cells.dtype not in (torch.int64, torch.int32):  # torch reads uint8 as a mask, not indices
        raise ValueError(
            f"cells must hold int64 or int32 cell indices 0..{count - 1}, got {cells.dtype}: "
            "convert them with .long()"
        )
    if len(cells) and (int(cells.min()) < 0 or int(cells.max()) >= count):
        raise ValueError(
            f"cells must be cell indices 0..{count - 1}, got {int(cells.min())}..{int(cells.max())}"
        )
    return cells.long()


def _check_canvases(canvases: object, model: "DigitFinder | CanvasReader") -> Canvases:
    """Canvases of at least one canvas, of the model's grid, a batch it can read in the dtype of
    its weights."""
    canvases = check_canvases(canvases)
    grid = model.grid
    if canvases.grid != grid:
        raise ValueError(f"canvases must have a {grid} x {grid} grid, got {canvases.grid}")
    if not len(canvases):
        raise ValueError("canvases must hold at least one canvas: a share of none is undefined")
    _check_batch(len(canvases), model, f"{len(canvases):,} canvases")
    return canvases


def _check_distinct(canvases: Canvases) -> None:
    """No canvas holds a digit twice (checked Canvases), so that each word names one cell."""
    ordered = canvases.digits.sort(1).values  # (B, cells): the empty cells' -1 first
    twice = ((ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)).any(1)  # (B,)
    if twice.any():
        row = canvases.digits[int(twice.nonzero()[0, 0])]
        raise ValueError(
            "canvases must hold distinct digits (make_canvases(..., distinct=True)): a word "
            f"must name one cell, got a canvas with {row[row >= 0].tolist()}"
        )


def _check_memory(memory: object, weight: torch.Tensor) -> torch.Tensor:
    """The encoder's output (B, n, d_model), finite, in the dtype of the decoder's weights."""
    d_model = weight.shape[1]
    validation.tensor(memory, "memory", f"(B, n, {d_model}) from encode()")
    if memory.is_nested or memory.is_meta or memory.layout != torch.strided:
        kind = "nested" if memory.is_nested else "meta" if memory.is_meta else memory.layout
        raise ValueError(
            f"memory must be encode()'s output, a dense tensor of numbers, got a {kind} one"
        )
    if memory.dim() != 3 or memory.shape[-1] != d_model or not memory.shape[1]:
        raise ValueError(
            f"memory must be (B, n, {d_model}) from encode(), n >= 1 patches to attend to, got "
            f"{tuple(memory.shape)}"
        )
    if memory.numel() > LARGEST_TENSOR:  # an expanded view holds them for free
        raise ValueError(
            f"memory holds {memory.numel():,} numbers (shape {tuple(memory.shape)}), more than "
            f"the 2^28 = {LARGEST_TENSOR:,} decode attends to at once: pass fewer canvases"
        )
    if memory.dtype != weight.dtype or memory.device != weight.device:
        raise ValueError(
            f"memory is {memory.dtype} on {memory.device} but the model's weights are "
            f"{weight.dtype} on {weight.device}: convert it with memory.to(...)"
        )
    if not memory.isfinite().all():
        raise ValueError("memory holds NaN or inf: it must be encode()'s finite output")
    return memory


def _check_tokens(tokens: object, batch: int, max_len: int) -> torch.Tensor:
    validation.token_ids(tokens, "tokens", READER_VOCAB, shape="(B, T) ids 0..12")
    if len(tokens) != batch or not 1 <= tokens.shape[1] <= max_len:
        raise ValueError(
            f"tokens must be (B={batch}, T) with 1 <= T <= {max_len}, got {tuple(tokens.shape)}"
        )
    return tokens


def _check_layer(layer: object, num_layers: int) -> int:
    expected = f"layer must be a decoder block's index in -{num_layers}..{num_layers - 1}"
    try:
        index = validation.whole_number(layer, "layer", minimum=-num_layers)
    except ValueError:
        raise ValueError(f"{expected}, got {validation.shown(layer)}") from None
    if index >= num_layers:
        raise ValueError(f"{expected}, got {validation.shown(layer)}")
    return index % num_layers


def _check_step(
    model: object, kind: type, recipe: object, recipe_kind: type, digits: object, generator: object
) -> None:
    """The arguments of one training step, by their types and the digits' labels: check_model and
    check_digits read every weight and pixel, too slow for each step of a loop (the model checks
    the pixels of its batch; train checks the model it builds once)."""
    if not isinstance(model, kind):
        raise TypeError(f"model must be a {kind.__name__}, got {type(model).__name__}")
    _check_recipe(recipe, recipe_kind)
    check_digit_labels(digits)
    if not len(digits):
        raise ValueError("digits must hold at least one image: a batch cannot be drawn from none")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {validation.shown(generator)}")


def _check_reading(model: CanvasReader, images: object) -> None:
    """Images the reader takes, few enough to read in about 10 s."""
    _check_images(model, images)
    work = len(images) * model._reading_work()
    if work > MOST_READING_WORK:
        raise ValueError(
            f"reading {len(images):,} canvases of {model.grid} x {model.grid} cells would take "
            f"about {work:,} multiply-adds, more than {MOST_READING_WORK:,} (about 10 s): each "
            f"of the {model.max_len} tokens decodes every token before it again; pass fewer "
            "canvases at a time"
        )


def _check_room(model: DigitFinder | CanvasReader, most: int, why: str) -> None:
    """The model's grid has a cell for each digit of its training canvases."""
    if model.grid**2 < most:
        raise ValueError(
            f"the model's grid must have at least {most} cells ({why}), got a grid of "
            f"{model.grid} x {model.grid}"
        )


def _check_recipe(recipe: object, kind: type) -> Recipe:
    if not isinstance(recipe, kind):
        raise TypeError(f"recipe must be a {kind.__name__}, got {type(recipe).__name__}")
    return recipe


def _check_recipes(recipes: object) -> dict:
    if not isinstance(recipes, dict) or set(recipes) != set(MODELS):
        found = sorted(recipes, key=str) if isinstance(recipes, dict) else type(recipes).__name__
        raise ValueError(f"recipes must be a dict with keys {sorted(MODELS)}, got {found}")
    for name, kind in MODELS.items():
        _check_recipe(recipes[name], kind)
    return {name: recipes[name] for name in MODELS}


def _checked_log(where: str, log: object, recipe: Recipe) -> dict:
    """A log as train writes it for the recipe: {"step": the steps it logged (every log_every
    and the last), "loss": a number for each}."""
    if not isinstance(log, dict) or set(log) != {"step", "loss"}:
        found = sorted(log, key=str) if isinstance(log, dict) else type(log).__name__
        raise CheckpointError(f"{where}: its log should hold ['loss', 'step'], found {found}")
    every, last = recipe.log_every, recipe.steps
    count = last // every + (last % every > 0)  # the steps train logs: every `every`, the last
    logged = log["step"]
    if not (
        isinstance(logged, list)
        and len(logged) == count
        and all(
            type(step) is int and step == min((i + 1) * every, last)
            for i, step in enumerate(logged)
        )
    ):
        raise CheckpointError(
            f"{where}: its log should hold the steps its recipe logs (every {every} of {last}, "
            f"and the last), found {validation.shown(logged)}"
        )
    losses = log["loss"]
    if not isinstance(losses, list):
        raise CheckpointError(
            f"{where}: its log's losses should be a list of floats, one per logged step, found "
            f"a {type(losses).__name__}"
        )
    if len(losses) != count:
        raise CheckpointError(
            f"{where}: its log should hold one loss per logged step ({count}), found {len(losses)}"
        )
    largest = torch.finfo(torch.float32).max  # each is a float32 loss's .item()
    for loss in losses:
        if type(loss) is not float or not math.isfinite(loss) or not 0 <= loss <= largest:
            raise CheckpointError(
                f"{where}: its log's losses should be cross-entropies of float32 (at most "
                f"{largest:.4g}), finite floats >= 0, found {validation.shown(loss)}"
            )
    return log


if __name__ == "__main__":
    main()
