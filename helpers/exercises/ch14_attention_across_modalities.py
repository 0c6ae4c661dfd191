"""Chapter 14's exercises: images as sequences of patches, and where attention looks in them.

1. check_patchify: (B, C, H, W) images cut into p x p patches, (B, (H/p)(W/p), C p p), in
   helpers.vision.patchify's order.
2. check_sinusoidal_2d: the 2-D sinusoidal encoding of a rows x cols grid of patches, the row
   in the first half of each vector and the column in the second.
3. check_attention_centroid: where in the image a query looks, in pixel coordinates: the
   weighted mean of the patches' centres.
"""

import math
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from helpers.exercises.framework import (
    LOWER_PRECISIONS,
    Refused,
    TimedAnswers,
    advise,
    exercise_checker,
    lower_precision_mistakes,
    named_together,
    report,
    run_case,
    wrong_only,
)
from helpers.positional import sinusoidal_encoding
from helpers.vision import patchify, sinusoidal_2d

__all__ = ["check_attention_centroid", "check_patchify", "check_sinusoidal_2d"]

# The reference, held under a name of its own: an answer that rebinds this module's patchify
# changes what it calls, not what it is checked against (ATTENTION_CENTROID likewise)
PATCHIFY = patchify


# 1. Patchify

PATCH_SIZES = (1, 2, 3, 4)  # the cases' patch sizes


def patchify_cases() -> list[tuple[str, torch.Tensor, int]]:
    """(name, images (B, C, H, W), patch_size) for every case the checker runs."""
    generator = torch.Generator().manual_seed(140)

    def images(*shape, dtype=torch.float32):
        return torch.rand(*shape, generator=generator, dtype=torch.float64).to(dtype)

    return [
        ("two digits (B=2, C=1, 8 x 8), p = 4", images(2, 1, 8, 8), 4),
        ("one colour image (1, 3, 8, 12), p = 4: wider than tall", images(1, 3, 8, 12), 4),
        (
            "float64 (3, 3, 6, 4), p = 2: taller than wide",
            images(3, 3, 6, 4, dtype=torch.float64),
            2,
        ),
        (
            "(2, 3, 4, 8), p = 2, stored channels last (a permuted view, not contiguous)",
            images(2, 4, 8, 3).permute(0, 3, 1, 2),
            2,
        ),
        ("(2, 2, 4, 4), p = 4: one patch per image", images(2, 2, 4, 4), 4),
        ("(1, 2, 2, 3), p = 1: every pixel a patch", images(1, 2, 2, 3), 1),
        ("(2, 3, 6, 9), p = 3: an odd patch size", images(2, 3, 6, 9), 3),
        ("two other digits, p = 4: the first case's shape, other numbers", images(2, 1, 8, 8), 4),
    ]


KEPT = (
    "returns its result for an earlier case's input of the same shape: a function keeps "
    "nothing between calls, it computes from the numbers it is given"
)


def _patchify_mistakes(images: torch.Tensor, p: int) -> dict:
    batch, channels, height, width = images.shape
    rows, cols = height // p, width // p
    grid = images.reshape(batch, channels, rows, p, cols, p)  # (B, C, rows, p, cols, p)

    def flattened(order):
        return grid.permute(order).reshape(batch, rows * cols, channels * p * p)

    mistakes = {
        "the patches run top to bottom first (down each column of patches): patchify's order "
        "runs left to right along a row of patches, then the next row, patch r * cols + c "
        "(permute to (B, rows, cols, C, p, p))": flattened((0, 4, 2, 1, 3, 5)),
        "each patch is flattened in (p, p, C) order, channels last: flatten it in (C, p, p) "
        "order, the layout of F.unfold (permute to (B, rows, cols, C, p, p))": flattened(
            (0, 2, 4, 3, 5, 1)
        ),
        "each patch is flattened column by column (its two pixel axes swapped): keep the "
        "patch's rows first, as in the image, (C, p, p) = (channel, row, column)": flattened(
            (0, 2, 4, 1, 5, 3)
        ),
        "each patch is flattened in (row, C, column) order (the channel axis moved between the "
        "patch's two pixel axes, e.g. by movedim): flatten it in (C, p, p) order, (channel, "
        "row, column), the layout of F.unfold (permute to (B, rows, cols, C, p, p))": flattened(
            (0, 2, 4, 3, 1, 5)
        ),
        "a plain reshape without the permute: images.reshape(B, -1, C*p*p) cuts the pixels "
        "in memory order (whole rows of the image), not into p x p squares; reshape to (B, C, "
        "H/p, p, W/p, p), then permute to (B, H/p, W/p, C, p, p)": images.reshape(
            batch, -1, channels * p * p
        ),
        "F.unfold's (B, C*p*p, n) without the transpose: unfold puts the patches along the "
        "last axis; .transpose(1, 2) makes them the sequence": F.unfold(images, p, stride=p),
        "the reshape splits each side as (p, H/p), not (H/p, p): each 'patch' then gathers "
        "pixels H/p apart across the whole image; split a side into (patch row, pixel row "
        "within the patch)": images.reshape(batch, channels, p, rows, p, cols)
        .permute(0, 3, 5, 1, 2, 4)
        .reshape(batch, rows * cols, channels * p * p),
    }
    mistakes[
        "reads the image's sides as (W, H): images.shape is (B, C, H, W), the height first; "
        "split H into (H/p, p) and W into (W/p, p)"
    ] = (
        images.reshape(batch, channels, cols, p, rows, p)
        .permute(0, 2, 4, 1, 3, 5)
        .reshape(batch, rows * cols, channels * p * p)
    )
    mistakes[
        "returns the grid of patches (B, rows, cols, C*p*p): flatten rows and cols into one "
        "sequence axis of (H/p)(W/p) patches"
    ] = flattened((0, 2, 4, 1, 3, 5)).reshape(batch, rows, cols, -1)
    if p > 1:
        mistakes[
            "F.unfold without stride=p slides the window one pixel at a time: overlapping "
            "patches, (H-p+1)(W-p+1) of them; pass stride=p"
        ] = F.unfold(images, p).transpose(1, 2)
    right = flattened((0, 2, 4, 1, 3, 5))  # (B, n, C p p)
    by_cell = right.reshape(batch, rows, cols, -1)
    mistakes[
        "merges the batch and the patches into one axis (B * n, C*p*p): keep the batch first, "
        "(B, n, C*p*p), one sequence of patches per image"
    ] = right.reshape(-1, channels * p * p)
    mistakes["returns the patches of the first image only: keep the batch axis, (B, n, C*p*p)"] = (
        right[0]
    )
    if channels > 1:
        mistakes[
            "the channel axis is left before the patch axes, (B, C, H/p, W/p, p, p) (a permute "
            "to (0, 1, 2, 4, 3, 5), or Tensor.unfold twice), then reshaped: the reshape then "
            "fills each patch's C*p*p numbers from one channel of several patches; permute to "
            "(B, H/p, W/p, C, p, p), the channels after the patch axes, before the reshape"
        ] = flattened((0, 1, 2, 4, 3, 5))
    if batch > 1:
        mistakes[
            "every image gets the first image's patches (images[:1] expanded or repeated over "
            "the batch): each of the B images gets its own sequence of patches, "
            "images[b] for row b"
        ] = right[:1].expand_as(right)
        mistakes[
            "returns the patches of the first image only (images[:1], a batch of one): each of "
            "the B images gets its own sequence of patches, (B, n, C*p*p)"
        ] = right[:1]
        for order in ((2, 0, 4), (2, 4, 0), (4, 0, 2), (4, 2, 0)):
            mistakes[
                f"the batch axis is permuted in among the patches (permute{(*order, 1, 3, 5)} "
                f"of the (B, C, rows, p, cols, p) grid): keep it first, permute to (B, rows, "
                f"cols, C, p, p), so that each image keeps its own patches"
            ] = flattened((*order, 1, 3, 5))
    mistakes[
        "patchifies the image transposed (its H and W swapped, e.g. images.transpose(2, 3)): the "
        "patches then run down the columns and each patch is transposed; cut the images as they "
        "come, (B, C, H, W), row r of patches from pixel rows r*p .. r*p + p - 1"
    ] = patchify(images.transpose(2, 3), p)
    mistakes[
        "uses patch_size as the number of patches per side: p x p patches of (H/p) x (W/p) pixels "
        "each; p is the side of a patch in pixels, so the image holds (H/p) x (W/p) patches of "
        "p x p"
    ] = (
        images.reshape(batch, channels, p, rows, p, cols)
        .permute(0, 2, 4, 1, 3, 5)
        .reshape(batch, p * p, -1)
    )
    for size in PATCH_SIZES:
        if size != p and height % size == 0 and width % size == 0:
            mistakes[_hard_coded_patch_size(size, p)] = patchify(images, size)
    mistakes[
        "the patch rows run bottom to top: patch 0 is the top-left one, patch r * cols + c "
        "lies r patches down from the top"
    ] = by_cell.flip(1).reshape(batch, rows * cols, -1)
    if rows > 1:
        mistakes[
            "leaves out the last row of patches: a loop over range(0, H - p, p) stops one patch "
            "short; range(0, H, p) reaches the last one"
        ] = by_cell[:, :-1].reshape(batch, (rows - 1) * cols, -1)
    if cols > 1:
        mistakes[
            "leaves out the last column of patches: a loop over range(0, W - p, p) stops one "
            "patch short; range(0, W, p) reaches the last one"
        ] = by_cell[:, :, :-1].reshape(batch, rows * (cols - 1), -1)
    if not images.is_contiguous():
        as_if_contiguous = images.detach().as_strided(images.shape, _contiguous_strides(images))
        mistakes[
            "reads the images' memory as if it were laid out (B, C, H, W), in order (as_strided "
            "with strides computed from the shape, or a view of the storage): this case's "
            "images are a channels-last view, stored (B, H, W, C), so the numbers land in the "
            "wrong places; work through the tensor's own indexing (reshape and permute follow "
            "its strides), or call .contiguous() first"
        ] = patchify(as_if_contiguous, p)
    if channels > 1:
        one_channel = images.reshape(batch, channels, rows, p, cols, p)[:, :1]
        mistakes[
            "keeps one channel only: each patch holds all C channels, C*p*p numbers, channel by "
            "channel"
        ] = one_channel.permute(0, 2, 4, 1, 3, 5).reshape(batch, rows * cols, p * p)
        averaged = images.mean(1, keepdim=True).reshape(batch, 1, rows, p, cols, p)
        mistakes[
            "averages the channels: each patch keeps all C channels, C*p*p numbers, channel by "
            "channel"
        ] = averaged.permute(0, 2, 4, 1, 3, 5).reshape(batch, rows * cols, p * p)
    mistakes.update(lower_precision_mistakes(lambda x: patchify(x, p), images, "images"))
    return named_together(mistakes)


def _hard_coded_patch_size(size: int, p: int) -> str:
    return f"patches of {size} x {size} though patch_size is {p}: use the patch_size argument"


def _contiguous_strides(tensor: torch.Tensor) -> tuple[int, ...]:
    """The strides a contiguous tensor of this shape has."""
    strides, step = [], 1
    for size in reversed(tensor.shape):
        strides.insert(0, step)
        step *= size
    return tuple(strides)


def _name_the_reshape(failures: list, name: str, images: torch.Tensor, p: int) -> None:
    """Add what a reshape that raised assumed, read from the shape in torch's error: a patch size
    of its own, one channel, or a square image."""
    found = re.search(r"shape '\[([\d, ]+)\]' is invalid for input of size", failures[-1])
    if not failures[-1].startswith(f"{name}: your function raised") or found is None:
        return
    shape = [int(size) for size in found.group(1).split(",")]
    asked = math.prod(shape)
    batch, channels, height, width = images.shape
    sizes = [
        size
        for size in PATCH_SIZES
        if size != p and shape == [batch, channels, height // size, size, width // size, size]
    ]
    if sizes:
        failures[-1] += f"; {_hard_coded_patch_size(sizes[0], p)}"
    elif channels > 1 and asked * channels == images.numel():
        failures[-1] += (
            f"; the shape asked for holds {asked} numbers, B*H*W, and the images "
            f"{images.numel()}, C = {channels} times as many: a reshape to (B, H/p, p, W/p, p) "
            f"leaves the channel axis out, as if C were 1; reshape to (B, C, H/p, p, W/p, p), "
            f"and keep all C channels in each patch"
        )
    elif height != width and asked in (batch * channels * height**2, batch * channels * width**2):
        failures[-1] += (
            f"; this case's images are not square (H = {height}, W = {width}): split H into "
            f"H/p rows and W into W/p columns of patches, each from its own side"
        )


PATCHIFY_HINT = "patch r * cols + c holds images[b, :, r*p:(r+1)*p, c*p:(c+1)*p] flattened"


def _name_a_rescaling(failures: list, got: object, right: torch.Tensor) -> None:
    """Name, in place of the general hint, an answer that is the right patches times a factor
    per image (divided by its largest value, say)."""
    if not (isinstance(got, torch.Tensor) and got.is_floating_point() and got.shape == right.shape):
        return
    got, right = got.detach().double(), right.double()
    factors = (got * right).sum((1, 2)) / (right * right).sum((1, 2))  # (B,)
    rescaled = (factors - 1).abs().max() > 1e-6 and factors.abs().min() > 1e-6  # 0: no numbers
    if not rescaled or not torch.allclose(got, factors[:, None, None] * right, atol=1e-6):
        return
    image = (factors - 1).abs().argmax().item()  # the image furthest from its own numbers
    failures[-1] = failures[-1].removesuffix(f" ({PATCHIFY_HINT})") + (
        f" (the values are rescaled: image {image}'s patches hold its numbers times "
        f"{factors[image].item():.4g} (divided by its largest value, say): a patch holds the "
        f"image's numbers as they are; normalising is the model's business, not patchify's)"
    )


@exercise_checker
def check_patchify(learner_patchify: Callable) -> bool:
    """learner_patchify(images, patch_size) -> (B, (H/p)(W/p), C p p): images (B, C, H, W)
    float32 or float64, C from 1 to 3, H and W multiples of p and not always equal, not always
    contiguous (one case is a channels-last view); patch_size p an int from 1 to 4. The patches
    left to right, then top to bottom; each flattened in (C, p, p) order, the layout of
    F.unfold(images, p, stride=p).transpose(1, 2) (which counts as right); in the images'
    dtype, with gradients; the input left as it was (no in-place operation on it, even one
    that changes no value, its requires_grad as it came, no hook left on it, and no backward pass
    inside, which would fill the .grad of the tensors the images come from). Without calling
    helpers.vision.patchify (refused by name); a loop over the patches is accepted. Each call
    must return within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode, default
    dtype, random generator, anomaly detection, deterministic-algorithms setting, thread count
    and module hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_patchify)
    earlier = []  # (images, p) of the cases run so far
    for name, images, p in patchify_cases():
        seen = {}
        kept = next(
            (
                {KEPT: patchify(before, p)}
                for before, before_p in earlier
                if before.shape == images.shape and before_p == p
            ),
            {},
        )
        earlier.append((images, p))

        def learner(x, p=p, seen=seen):
            seen["got"] = answers(x, p)
            return seen["got"]

        passed += run_case(
            name,
            learner,
            (images,),
            lambda x, p=p: PATCHIFY(x, p),
            failures,
            atol=1e-6,
            hint=PATCHIFY_HINT,
            mistakes=wrong_only({**_patchify_mistakes(images, p), **kept}, patchify(images, p)),
            forbidden={"helpers.vision.patchify": patchify},
            names=("images",),
        )
        if (
            failures
            and failures[-1].startswith(f"{name}: ")
            and failures[-1].endswith(f" ({PATCHIFY_HINT})")
        ):
            _name_a_rescaling(failures, seen.get("got"), patchify(images, p))
        advise(
            failures,
            name,
            "your function raised",
            "view size is not compatible",
            ".view needs memory laid out in order, which a permuted or channels-last tensor "
            "is not: .reshape copies when it must",
        )
        if failures:
            _name_the_reshape(failures, name, images, p)
    return report(failures, passed)


# 2. The 2-D sinusoidal encoding

# The last three each share rows with an earlier case, and d_model or cols at most: an answer
# that keeps its results between calls by rows alone is caught.
SINUSOIDAL_2D_SIZES = (
    (2, 3, 8),
    (3, 3, 16),
    (4, 2, 12),
    (1, 5, 8),
    (6, 6, 32),
    (2, 5, 16),
    (4, 6, 12),
    (1, 5, 16),
    (7, 2, 8),
    (3, 8, 12),
)
CANVAS_GRID, CANVAS_D_MODEL = (6, 6), 32  # the sizes section 2 encodes


def _halves(
    rows: int, cols: int, width: int, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """(rows, cols, width) twice: the encoding of each patch's row, and of its column, each
    a width-wide 1-D sinusoidal encoding."""
    by_row = sinusoidal_encoding(rows, width, base)[:, None, :].expand(rows, cols, width)
    by_col = sinusoidal_encoding(cols, width, base)[None, :, :].expand(rows, cols, width)
    return by_row, by_col


def _sinusoidal_2d_mistakes(
    rows: int, cols: int, d_model: int, earlier: Sequence[tuple[int, int, int]] = ()
) -> dict:
    """{diagnosis: what that mistake returns} for one case; earlier: the sizes of the cases
    run before it."""
    half = d_model // 2
    n = rows * cols
    by_row, by_col = _halves(rows, cols, half)
    wide_row, wide_col = _halves(rows, cols, d_model)
    pairs = torch.stack(
        [by_row.unflatten(-1, (half // 2, 2)), by_col.unflatten(-1, (half // 2, 2))]
    )
    sines_first = torch.cat(
        [by_row[..., 0::2], by_row[..., 1::2], by_col[..., 0::2], by_col[..., 1::2]], -1
    )
    mistakes = {
        "the halves are swapped: the first half encodes the patch's row, the second its "
        "column": torch.cat([by_col, by_row], -1).reshape(n, d_model),
        "chapter 05's 1-D encoding of the patch's index r * cols + c: the patch below is then "
        "cols positions away, further than the one beside it; encode the row in the first "
        "half and the column in the second": sinusoidal_encoding(n, d_model),
        "the row's and the column's (sin, cos) pairs are interleaved (a pair of the row, then "
        "one of the column, ...): put the row's d_model/2 numbers in the first half and the "
        "column's in the second": pairs.permute(1, 2, 3, 0, 4).reshape(n, d_model),
        "each half's frequencies are 10000^(-2j/d_model), the fastest half of a d_model-wide "
        "encoding's, and the same numbers as those of the base 100 at width d_model/2 "
        "(sinusoidal_encoding(..., base=100.0)): each half is an encoding of width d_model/2 "
        "with the base 10000, sinusoidal_encoding(rows, d_model // 2), its frequencies "
        "10000^(-2j/(d_model/2))": torch.cat(
            [wide_row[..., :half], wide_col[..., :half]], -1
        ).reshape(n, d_model),
        "the patches are in column-major order (down each column first): patchify's order "
        "runs along each row of patches, patch r * cols + c": torch.cat([by_row, by_col], -1)
        .transpose(0, 1)
        .reshape(n, d_model),
        "the row's and the column's encodings are interleaved number by number "
        "(torch.stack([row, col], dim=-1) then a reshape): put them side by side, "
        "torch.cat([row, col], dim=-1), the row's d_model/2 numbers first": torch.stack(
            [by_row, by_col], -1
        ).reshape(n, d_model),
        "each half holds its sines first, then its cosines: chapter 05's encoding interleaves "
        "them, sin then cos for each frequency (columns 0::2 the sines, 1::2 the cosines)": (
            sines_first.reshape(n, d_model)
        ),
        "each (sin, cos) pair is written (cos, sin): chapter 05's encoding puts the sine first, "
        "in the even columns 0::2, the cosine in the odd ones": torch.cat([by_row, by_col], -1)
        .unflatten(-1, (d_model // 2, 2))
        .flip(-1)
        .reshape(n, d_model),
        "adds a d_model-wide encoding of the row to one of the column: the row and the column "
        "sit side by side, each in its own half": (wide_row + wide_col).reshape(n, d_model),
        "returns the grid (rows, cols, d_model): flatten it to rows * cols vectors, in "
        "patchify's order": torch.cat([by_row, by_col], -1),
        "encodes the patch's index r * cols + c in each half: the first half encodes its row "
        "r, the second its column c": torch.cat([sinusoidal_encoding(n, half)] * 2, -1),
        "the first half encodes the patch's index r * cols + c: it encodes the patch's row r, "
        "sinusoidal_encoding(rows, d_model // 2)[r]": torch.cat(
            [sinusoidal_encoding(n, half), by_col.reshape(n, half)], -1
        ),
        "counts rows and columns from 1: the top-left patch is in row 0, column 0, and its "
        "encoding is sinusoidal_encoding(...)[0]": torch.cat(
            _halves_from(rows, cols, half, 1), -1
        ).reshape(n, d_model),
        "encodes the column in both halves: the first half is the row's": torch.cat(
            [by_col, by_col], -1
        ).reshape(n, d_model),
        "encodes the row in both halves: the second half is the column's": torch.cat(
            [by_row, by_row], -1
        ).reshape(n, d_model),
        "puts the column's half below the row's (torch.cat along dim 0): put them side by "
        "side, torch.cat([row_half, col_half], dim=-1)": torch.cat(
            [by_row.reshape(n, half), by_col.reshape(n, half)], 0
        ),
        "returns the encoding transposed, (d_model, rows * cols): one row per patch, "
        "(rows * cols, d_model)": torch.cat([by_row, by_col], -1).reshape(n, d_model).T,
        "writes sin in both columns of each pair: the odd columns hold the cosines": torch.cat(
            [by_row, by_col], -1
        )
        .reshape(n, d_model // 2, 2)[..., :1]
        .expand(n, d_model // 2, 2)
        .reshape(n, d_model),
        "leaves the cosines zero (the odd columns 1::2): each (sin, cos) pair holds the sine "
        "in column 2i and the cosine of the same angle in column 2i + 1": torch.cat(
            [by_row, by_col], -1
        )
        .reshape(n, d_model // 2, 2)
        .mul(torch.tensor([1.0, 0.0]))
        .reshape(n, d_model),
        "leaves the second half zeros: it encodes the patch's column": torch.cat(
            [by_row, torch.zeros_like(by_col)], -1
        ).reshape(n, d_model),
    }
    mistakes[
        "the column's half comes first, and each half holds its sines first, then its cosines "
        "(the layout of MAE's get_2d_sincos_pos_embed): put the row's half first, and interleave "
        "each half as chapter 05's encoding does, sin then cos for each frequency"
    ] = torch.cat(
        [by_col[..., 0::2], by_col[..., 1::2], by_row[..., 0::2], by_row[..., 1::2]], -1
    ).reshape(n, d_model)
    canvas_rows, canvas_cols = CANVAS_GRID
    mistakes[
        f"returns the encoding of a {canvas_rows} x {canvas_cols} grid (section 2's canvas) "
        f"whatever rows and cols: encode the rows x cols grid the arguments give"
    ] = sinusoidal_2d(canvas_rows, canvas_cols, d_model)
    mistakes[
        f"returns vectors of d_model = {CANVAS_D_MODEL} whatever d_model: use the d_model argument"
    ] = sinusoidal_2d(rows, cols, CANVAS_D_MODEL)
    mistakes[
        f"encodes a cols x rows grid, {cols} x {rows} (rows and cols swapped): the grid is rows x "
        f"cols, {rows} x {cols}, and patch r * cols + c lies in row r, column c"
    ] = sinusoidal_2d(cols, rows, d_model)
    for width, base, how in (
        (half, 1000.0, "with the base 1000: chapter 05's encoding uses 10000"),
        (16, 10000.0, "16 wide whatever d_model, cut to d_model: each half is d_model // 2 wide"),
    ):
        by_row_as, by_col_as = _halves(rows, cols, width, base)
        mistakes[f"each half is an encoding {how}"] = torch.cat([by_row_as, by_col_as], -1)[
            ..., :d_model
        ].reshape(n, d_model)
    sines = torch.sin(
        torch.arange(max(rows, cols), dtype=torch.float64)[:, None]
        * 10000.0 ** (-torch.arange(half, dtype=torch.float64) / half)
    ).float()  # (positions, half): a sine at each of half frequencies, no cosines
    mistakes[
        "each half holds sines only, sin(position * 10000^(-j / (d_model/2))) for j = 0 .. "
        "d_model/2 - 1: chapter 05's encoding pairs a sine and a cosine at each of d_model/4 "
        "frequencies, sin in the even columns, cos in the odd ones"
    ] = torch.cat(
        [
            sines[:rows, None, :].expand(rows, cols, half),
            sines[None, :cols, :].expand(rows, cols, half),
        ],
        -1,
    ).reshape(n, d_model)
    mistakes[
        "the row's and the column's halves are joined along dim 0 (torch.cat([row, col], 0)) "
        "and reshaped: the reshape then fills each vector from two patches' rows, or two "
        "patches' columns; join them side by side, torch.cat([row, col], dim=-1)"
    ] = torch.cat([by_row.reshape(n, half), by_col.reshape(n, half)], 0).reshape(n, d_model)
    index = torch.arange(n)
    mistakes[
        "splits the patch index by rows, not cols (row k // rows, column k % rows): patch k "
        "lies in row k // cols, column k % cols, cols patches to a row"
    ] = torch.cat(
        [
            sinusoidal_encoding(rows, half)[index // rows % rows],
            sinusoidal_encoding(cols, half)[index % rows % cols],
        ],
        -1,
    )
    quarter = d_model // 4
    if quarter % 2 == 0:
        narrow_row, narrow_col = _halves(rows, cols, quarter)
        padding = torch.zeros_like(narrow_row)
        mistakes[
            "each half is an encoding of width d_model/4 padded with zeros: each half is an "
            "encoding of width d_model/2, sinusoidal_encoding(rows, d_model // 2), every number "
            "of it a sine or a cosine"
        ] = torch.cat([narrow_row, padding, narrow_col, padding], -1).reshape(n, d_model)
    mistakes.update(_earlier_results((rows, cols, d_model), earlier))
    right = sinusoidal_2d(rows, cols, d_model)
    for low, digits in LOWER_PRECISIONS:
        mistakes[
            f"the encoding is rounded to {str(low).removeprefix('torch.')} on the way, which "
            f"keeps {digits} significant digits: compute it in float32"
        ] = right.to(low).to(right.dtype)
    return named_together(mistakes)


def _earlier_results(sizes: tuple[int, int, int], earlier: Sequence[tuple[int, int, int]]) -> dict:
    """{diagnosis: what an answer returns that hands back its result of an earlier case}: a
    cache, or a mutable default argument, whose key leaves some of the sizes out."""
    names = ("rows", "cols", "d_model")
    mistakes = {}
    for before in earlier:
        shared = [name for name, now, then in zip(names, sizes, before, strict=True) if now == then]
        left_out = [name for name in names if name not in shared]
        rows, cols, d_model = before
        mistakes[
            f"returns its result of an earlier case, {rows} x {cols} patches with d_model = "
            f"{d_model}, which shares {' and '.join(shared) or 'no size'} with this one: a result "
            f"kept between calls (a cache, or a mutable default argument) is looked up by a key "
            f"that leaves out {' and '.join(left_out)}; the encoding depends on rows, cols and "
            f"d_model together"
        ] = sinusoidal_2d(*before)
    return mistakes


def _halves_from(rows: int, cols: int, width: int, first: int) -> tuple:
    """_halves with rows and columns counted from `first`."""
    by_row = sinusoidal_encoding(rows + first, width)[first:, None, :].expand(rows, cols, width)
    by_col = sinusoidal_encoding(cols + first, width)[None, first:, :].expand(rows, cols, width)
    return by_row, by_col


def _float32_only(answers: Callable) -> Callable:
    def call(*sizes):
        got = answers(*sizes)
        if isinstance(got, torch.Tensor) and got.dtype == torch.float64:
            raise Refused(
                "returned float64: return float32, the dtype of chapter 05's "
                "sinusoidal_encoding and of the embeddings it is added to (compute in float64 "
                "if you like, then .float())"
            )
        return got

    return call


@exercise_checker
def check_sinusoidal_2d(learner_encoding: Callable) -> bool:
    """learner_encoding(rows, cols, d_model) -> (rows * cols, d_model) float32: rows and cols
    ints from 1 to 8, d_model a multiple of 4 from 8 to 32. Row r * cols + c (patchify's order)
    is the encoding of the patch in row r, column c: its first d_model/2 numbers are chapter
    05's encoding of position r, sinusoidal_encoding(rows, d_model // 2)[r], the last d_model/2
    that of position c. Without calling helpers.vision.sinusoidal_2d (refused by name; chapter
    05's sinusoidal_encoding may be used); a loop over the patches is accepted. Each call must
    return within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode, default dtype,
    random generator, anomaly detection, deterministic-algorithms setting, thread count and
    module hooks as they were."""
    failures, passed = [], 0
    answers = _float32_only(TimedAnswers(learner_encoding))
    for index, (rows, cols, d_model) in enumerate(SINUSOIDAL_2D_SIZES):
        right = sinusoidal_2d(rows, cols, d_model)
        earlier = SINUSOIDAL_2D_SIZES[:index]
        case = f"{rows} x {cols} patches, d_model = {d_model}"
        passed += run_case(
            case,
            lambda rows=rows, cols=cols, d_model=d_model: answers(rows, cols, d_model),
            (),
            lambda right=right: right,
            failures,
            atol=1e-5,
            hint="the row's encoding (width d_model/2) then the column's, for patch r * cols + c",
            mistakes=wrong_only(_sinusoidal_2d_mistakes(rows, cols, d_model, earlier), right),
            forbidden={"helpers.vision.sinusoidal_2d": sinusoidal_2d},
        )
        advise(
            failures,
            case,
            "your function raised",
            "(float)",
            "d_model / 2 is a float: the width of each half is d_model // 2, an int",
        )
        if (d_model // 4) % 2:
            advise(
                failures,
                case,
                "your function raised",
                f"d_model ({d_model // 4}) must be even",
                f"d_model // 4 = {d_model // 4} is odd here, and no width for an encoding: each "
                f"half is an encoding of width d_model // 2 = {d_model // 2}",
            )
        sides = {"rows": rows, "cols": cols}
        for short, long, axis in (("rows", "cols", "column"), ("cols", "rows", "row")):
            if sides[long] > sides[short]:
                advise(
                    failures,
                    case,
                    "your function raised IndexError",
                    f"out of bounds for dimension 0 with size {sides[short]}",
                    f"an index past the end of a table of {short} = {sides[short]} positions: "
                    f"the {axis} runs to {long} - 1 = {sides[long] - 1}, so the {axis}'s table "
                    f"needs {long} positions, sinusoidal_encoding({long}, d_model // 2)",
                )
        _name_a_square_grid(failures, case, rows, cols)
    return report(failures, passed)


def _name_a_square_grid(failures: list, case: str, rows: int, cols: int) -> None:
    """Add to a case's failure that names only a wrong number of vectors, rows * rows or
    cols * cols, that the answer took the grid for a square."""
    bare = (
        re.fullmatch(
            rf"{re.escape(case)}: shape \((\d+), \d+\), expected \(\d+, \d+\)", failures[-1]
        )
        if failures
        else None
    )
    for side, name in ((rows, "rows"), (cols, "cols")) if bare and rows != cols else ():
        if int(bare.group(1)) == side * side:
            failures[-1] += (
                f"; {side * side} = {name} * {name} vectors, as if the grid were square: this one "
                f"is {rows} x {cols}, so its rows * cols = {rows * cols} patches take their row "
                f"from range(rows) and their column from range(cols)"
            )


# 3. The attention's centroid


def _patch_centres(grid_size: tuple[int, int], p: int, dtype: torch.dtype) -> torch.Tensor:
    """(rows * cols, 2): the (row, column) of each patch's centre in pixels, patchify's order."""
    rows, cols = grid_size
    patch_row = torch.arange(rows, dtype=dtype).repeat_interleave(cols)  # patch k in row k // cols
    patch_col = torch.arange(cols, dtype=dtype).repeat(rows)
    return torch.stack([patch_row, patch_col], -1) * p + (p - 1) / 2


def attention_centroid(weights: torch.Tensor, grid_size: tuple[int, int], p: int) -> torch.Tensor:
    """The checker's reference: (..., 2), the weighted mean of the patches' centres."""
    centres = _patch_centres(grid_size, p, weights.dtype)
    return weights @ centres / weights.sum(-1, keepdim=True)


ATTENTION_CENTROID = attention_centroid


CENTROID_PATCH_SIZES = (1, 2, 4)  # the cases' patch sizes


def centroid_cases() -> list[tuple[str, torch.Tensor, tuple[int, int], int]]:
    """(name, weights (..., n), grid_size (rows, cols), patch_size) for every case."""
    generator = torch.Generator().manual_seed(142)

    def softmax(*leading, n, dtype=torch.float32):
        scores = 2 * torch.randn(*leading, n, generator=generator, dtype=torch.float64)
        return scores.softmax(-1).to(dtype)

    return [
        ("one query over 2 x 3 patches of 4 x 4 pixels", softmax(n=6), (2, 3), 4),
        (
            "(B=2, heads=3, queries=4) over a canvas's 6 x 6 patches of 4 x 4 pixels",
            softmax(2, 3, 4, n=36),
            (6, 6),
            4,
        ),
        (
            "weights (5, 8) over 2 x 4 patches of 4 x 4, each 0.993 on one patch and 0.001 on "
            "the others: each near the centre of that patch",
            0.992 * torch.eye(8)[[0, 3, 4, 6, 7]] + 0.001,
            (2, 4),
            4,
        ),
        (
            "weights that do not sum to one (3, 6), 3 x 2 patches of 2 x 2 pixels",
            3 * torch.rand(3, 6, generator=generator) + 0.1,
            (3, 2),
            2,
        ),
        (
            "float64 (2, 12) summing to 0.5 (a cell's share), 4 x 3 patches of 2 x 2",
            0.5 * softmax(2, n=12, dtype=torch.float64),
            (4, 3),
            2,
        ),
        ("(4, 16), 4 x 4 patches of one pixel each", softmax(4, n=16), (4, 4), 1),
        (
            "(B=1, queries=1, 36): one query of one image over a canvas's 6 x 6 patches of "
            "4 x 4 pixels",
            softmax(1, 1, n=36),
            (6, 6),
            4,
        ),
        (
            "(2, 3, 8): two heads' weights added, each row summing to 2, over 4 x 2 patches of "
            "4 x 4 pixels",
            softmax(2, 2, 3, n=8).sum(0),
            (4, 2),
            4,
        ),
        (
            "one query over 2 x 3 patches of 4 x 4 pixels again: the first case's shape, other "
            "weights",
            softmax(n=6),
            (2, 3),
            4,
        ),
    ]


def _centroid_mistakes(weights: torch.Tensor, grid_size: tuple[int, int], p: int) -> dict:
    rows, cols = grid_size
    w = weights.double()
    total = w.sum(-1, keepdim=True)
    centres = _patch_centres(grid_size, p, torch.float64)
    indices = _patch_centres(grid_size, 1, torch.float64)  # (r, c) of each patch
    column_major = torch.stack(
        [torch.arange(rows * cols) % rows, torch.arange(rows * cols) // rows], -1
    ).double()

    def mean_of(points):
        return (w @ points / total).to(weights.dtype)

    mistakes = {
        "the two coordinates come out swapped, (column, row): returned as (x, y), or patch k "
        "placed in row k % cols, column k // cols (its index split the wrong way round); the "
        "centroid is (row, column), the order an image is indexed in, image[row, column], and "
        "patch k lies in row k // cols, column k % cols": mean_of(centres.flip(-1)),
        "places each patch at its top-left corner (r*p, c*p): its centre lies (p - 1)/2 "
        "further on, at r*p + (p - 1)/2": mean_of(centres - (p - 1) / 2),
        "places each patch's centre at r*p + p/2, half a pixel too far: pixel i covers "
        "i - 0.5 .. i + 0.5, so the p pixels r*p .. r*p + p - 1 have their centre at "
        "r*p + (p - 1)/2": mean_of(centres + 0.5),
        "returns patch indices (r, c), not pixels: a patch's centre in pixels is "
        "r*p + (p - 1)/2, c*p + (p - 1)/2": mean_of(indices),
        "reads the patches in column-major order (down each column first): patchify's patch k "
        "lies in row k // cols, column k % cols": mean_of(column_major * p + (p - 1) / 2),
        "does not divide by the total weight: these weights do not sum to one, so their "
        "weighted sum of the centres is not a mean; divide by weights.sum(-1)": (w @ centres).to(
            weights.dtype
        ),
        "divides by the total of every query's weights together (weights.sum()): each query's "
        "centroid divides by its own total, weights.sum(-1, keepdim=True)": (
            w @ centres / w.sum()
        ).to(weights.dtype),
        "divides by the number of patches: a weighted mean divides by the sum of the weights": (
            w @ centres / w.shape[-1]
        ).to(weights.dtype),
        "divides by the mean weight, weights.mean(-1): n times the weighted mean, n the number "
        "of patches; a weighted mean divides by the sum of the weights, weights.sum(-1, "
        "keepdim=True)": (w @ centres / w.mean(-1, keepdim=True)).to(weights.dtype),
        "divides by the largest weight: a weighted mean divides by the sum of the weights, "
        "weights.sum(-1, keepdim=True)": (w @ centres / w.amax(-1, keepdim=True)).to(weights.dtype),
        "ignores the weights: the plain mean of the centres, the middle of the image": (
            torch.ones_like(total) * centres.mean(0)
        ).to(weights.dtype),
        "places each patch's centre at r*p + p/2 - 1, half a pixel too near (for p = 4, "
        "pixel 1 of 0..3): the centre of an even patch lies between its two middle pixels, "
        "at r*p + (p - 1)/2": mean_of(centres - 0.5),
        "places the patch in row r at (r + 1) * p / 2, half of its far edge (r + 1) * p: its "
        "centre lies halfway between its first pixel r*p and its last r*p + p - 1, at "
        "r*p + (p - 1)/2": mean_of((indices + 1) * p / 2),
        "applies a softmax to the weights: they are weights already, and a softmax moves "
        "them; divide by their total instead": (w.softmax(-1) @ centres).to(weights.dtype),
        "returns the centre of the most attended patch (argmax): the centroid is the weighted "
        "mean over every patch": centres[w.argmax(-1)].to(weights.dtype),
        "rounds the centroid to whole pixels: it lies between pixels in general": (
            w @ centres / total
        )
        .round()
        .to(weights.dtype),
    }
    mistakes[
        "places each patch's centre at its bottom-right pixel, r*p + p - 1: the p pixels "
        "r*p .. r*p + p - 1 have their centre halfway, at r*p + (p - 1)/2"
    ] = mean_of(centres + (p - 1) / 2)
    if cols != 6:
        six_wide = torch.stack([torch.arange(rows * cols) // 6, torch.arange(rows * cols) % 6], -1)
        mistakes[
            f"places the patches on a grid 6 columns wide (k // 6, k % 6) whatever grid_size "
            f"says: here it is {cols} columns wide, so patch k lies in row k // cols, column "
            f"k % cols, cols from grid_size"
        ] = mean_of(six_wide.double() * p + (p - 1) / 2)
    for size in CENTROID_PATCH_SIZES:
        if size not in (1, p):  # (patches of one pixel: the patch indices, named above)
            mistakes[
                f"places the patches as if each were {size} x {size} pixels though patch_size "
                f"is {p}: use the patch_size argument"
            ] = mean_of(_patch_centres(grid_size, size, torch.float64))
    mistakes[
        "counts pixels from 1: the top-left pixel is (0, 0), as in image[row, column], so the "
        "patch in row r, column c has its centre at (r*p + (p - 1)/2, c*p + (p - 1)/2)"
    ] = mean_of(centres + 1)
    if weights.dim() > 1:  # (for one dim, the first axis is the patches')
        mistakes[
            "normalises the weights over the first axis (weights.sum(0)): each query's weights "
            "are divided by their own total over the patches, the last axis, weights.sum(-1, "
            "keepdim=True)"
        ] = (w / w.sum(0, keepdim=True) @ centres).to(weights.dtype)
    if 1 in weights.shape[:-1]:
        mistakes[
            f"squeeze drops size-1 axes: this case's weights are {tuple(weights.shape)}, so "
            f"the centroid is {(*weights.shape[:-1], 2)}; keep every leading axis, even one "
            f"of size 1"
        ] = mean_of(centres).squeeze()
    if weights.dim() > 2:  # (for two dims, that is weights.sum(), named above)
        mistakes[
            "divides by weights.sum(0).sum(-1), a total over the first axis as well as the "
            "patches: each query's centroid divides by its own total, weights.sum(-1, "
            "keepdim=True)"
        ] = (w @ centres / w.sum(0, keepdim=True).sum(-1, keepdim=True)).to(weights.dtype)
    mistakes[
        "stacks (row, column) along the first axis: each centroid's pair belongs on the last "
        "axis, (..., 2), e.g. torch.stack([row, col], dim=-1)"
    ] = mean_of(centres).movedim(-1, 0)
    if rows != cols:
        mistakes[
            "reads grid_size as (cols, rows): it is (rows, cols), the patches down and across"
        ] = mean_of(_patch_centres((cols, rows), p, torch.float64))
        index = torch.arange(rows * cols)
        row_by_rows = torch.stack([index // rows, index % cols], -1).double()
        mistakes[
            "puts patch k in row k // rows: patchify's patch k lies in row k // cols (cols "
            "patches to a row), column k % cols"
        ] = mean_of(row_by_rows * p + (p - 1) / 2)
    mistakes.update(
        lower_precision_mistakes(lambda x: attention_centroid(x, grid_size, p), weights, "weights")
    )
    return named_together(mistakes)


def _gradient_of(got: object, weights: torch.Tensor) -> torch.Tensor | None:
    """d(sum(got * upstream)) / d(weights) for one fixed random upstream gradient, the graph
    kept for the checker's own backward pass; None where there is none to take."""
    if not isinstance(got, torch.Tensor) or not got.is_floating_point() or not got.requires_grad:
        return None
    generator = torch.Generator().manual_seed(0)
    upstream = torch.randn(got.shape, generator=generator, dtype=torch.float64).to(got.dtype)
    try:
        (gradient,) = torch.autograd.grad(
            (got * upstream).sum(), weights, retain_graph=True, allow_unused=True
        )
    except RuntimeError:  # the learner's graph may be anything
        return None
    return gradient


def _detached_total_gradient(
    weights: torch.Tensor, grid_size: tuple[int, int], p: int
) -> torch.Tensor:
    """The gradient _gradient_of finds for a centroid divided by a detached total."""
    w = weights.detach().clone().requires_grad_()
    centres = _patch_centres(grid_size, p, w.dtype)
    return _gradient_of(w @ centres / w.sum(-1, keepdim=True).detach(), w)


def _same_gradient(mine: torch.Tensor | None, theirs: torch.Tensor) -> bool:
    return (
        mine is not None
        and mine.shape == theirs.shape
        and torch.allclose(mine.double(), theirs.double(), atol=1e-4, rtol=1e-3)
    )


def _name_a_square_grid_of_centres(failures: list, name: str, grid_size: tuple[int, int]) -> bool:
    """Add to a case's failure where the answer raised on rows * rows (or cols * cols) centres
    against n = rows * cols weights that it took the grid for a square; whether it did."""
    rows, cols = grid_size
    if rows == cols or not failures or not failures[-1].startswith(f"{name}: your function raised"):
        return False
    n = rows * cols
    for side, axis in ((rows, "rows"), (cols, "cols")):
        square = side * side
        multiplied = re.search(rf"and {square}x2\)", failures[-1])
        broadcast = f"({square})" in failures[-1] and f"({n})" in failures[-1]
        if multiplied or broadcast:
            failures[-1] += (
                f"; {square} = {axis} * {axis} centres against {n} weights, as if the grid were "
                f"square: this one is {rows} x {cols}, so its n = {n} patches take their row "
                f"from range(rows) and their column from range(cols)"
            )
            return True
    return False


@exercise_checker
def check_attention_centroid(learner_centroid: Callable) -> bool:
    """learner_centroid(weights, grid_size, patch_size) -> (..., 2), every leading axis of the
    weights kept, even one of size 1: weights (..., n), 1 to 4 dims, float32 or float64, each
    weight > 0, over the n = rows * cols patches of an image in patchify's order; grid_size
    (rows, cols) the patches down and across, not always square; patch_size p an int, 1, 2 or
    4. The weighted mean of the patches' centres in pixels, (row, column), the patch in row r,
    column c centred at (r*p + (p - 1)/2, c*p + (p - 1)/2). The weights need not sum to one
    (e.g. the attention on one cell only, or several heads' weights added): divide by their
    total. In the weights' dtype, with gradients; the input left as it was (no in-place
    operation on it, even one that changes no value, its requires_grad as it came, no hook left on
    it, and no backward pass inside, which would fill the .grad of the tensors the weights come
    from). Each call must return within ANSWER_TIME_LIMIT_SECONDS (5 s) and leave torch's grad mode,
    default dtype, random generator, anomaly detection, deterministic-algorithms setting, thread
    count and module hooks as they were."""
    failures, passed, answers = [], 0, TimedAnswers(learner_centroid)
    gradients = {}

    def answer_and_its_gradient(w, grid_size, p):
        got = answers(w, grid_size, p)
        gradients["answer"] = _gradient_of(got, w)
        return got

    earlier = []  # (weights, grid_size, p) of the cases run so far
    for name, weights, grid_size, p in centroid_cases():
        right = attention_centroid(weights, grid_size, p)
        kept = next(
            (
                {KEPT: attention_centroid(before, grid_size, p)}
                for before, before_grid, before_p in earlier
                if (before.shape, before_grid, before_p) == (weights.shape, grid_size, p)
            ),
            {},
        )
        earlier.append((weights, grid_size, p))
        gradients.clear()
        passed += run_case(
            name,
            lambda w, grid_size=grid_size, p=p: answer_and_its_gradient(w, grid_size, p),
            (weights,),
            lambda w, grid_size=grid_size, p=p: ATTENTION_CENTROID(w, grid_size, p),
            failures,
            atol=1e-5,
            hint=(
                "sum over patches of weight * (r*p + (p-1)/2, c*p + (p-1)/2), over the total weight"
            ),
            mistakes=wrong_only({**_centroid_mistakes(weights, grid_size, p), **kept}, right),
            forbidden={"the checker's own attention_centroid": attention_centroid},
            names=("weights",),
        )
        advise(
            failures,
            name,
            "your function raised",
            "dtype",
            "this case's weights are float64: build the centres with dtype=weights.dtype",
        )
        if not _name_a_square_grid_of_centres(failures, name, grid_size):
            advise(
                failures,
                name,
                "your function raised",
                "must match the size",
                "if it divides by weights.sum(-1), that total has lost the patch axis: keep it "
                "with keepdim=True (or [..., None]) so that it divides both coordinates of each "
                "query",
            )
        leading = tuple(weights.shape[:-1])
        if len(leading) != 1:
            advise(
                failures,
                name,
                f"shape {(math.prod(leading), 2)}, expected {leading + (2,)}",
                "",
                "the leading axes are flattened into one (a reshape(-1, n) of the weights): "
                "keep every leading axis, even one of size 1, as weights @ centres does, or "
                "reshape the result back to weights.shape[:-1] + (2,)",
            )
        ones = torch.ones(weights.shape[:-1], dtype=torch.float64)
        if torch.allclose(weights.sum(-1).double(), ones, atol=1e-5):
            advise(
                failures,
                name,
                "the values are right but the gradient",
                "",
                "where the weights sum to one, dividing by their total, weights.sum(-1) (not "
                "detached), changes no value but does change the gradient: the centroid moves "
                "when the weights shift between patches, not when they all grow together",
            )
        elif _same_gradient(
            gradients.get("answer"), _detached_total_gradient(weights, grid_size, p)
        ):
            advise(
                failures,
                name,
                "the values are right but the gradient",
                "",
                "divides by a detached total: no gradient flows through the total "
                "(weights.sum(-1).detach(), or a total of weights.detach() or weights.data), so "
                "the centroid would seem to move when all the weights grow together; divide by "
                "weights.sum(-1, keepdim=True) itself",
            )
    return report(failures, passed)
