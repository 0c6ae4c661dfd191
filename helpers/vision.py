"""Attention across modalities (chapter 14): images as sequences of patches.

The data are the UCI handwritten digits (8 x 8 pixels, values 0..16), split once into training
and test images. An image becomes a sequence by cutting it into p x p patches (patchify, and its
inverse unpatchify); a patch's place is a row and a column, encoded in two halves of a vector
(sinusoidal_2d). Canvases put several digits into the cells of a grid, so that where each digit
lies is known exactly: the ground truth for where attention should look.
"""

import gzip
import math
import numbers
import re
import stat
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from helpers import validation
from helpers.checkpoints import NOT_REGULAR, as_path, shown_path
from helpers.contexts import plainly
from helpers.positional import sinusoidal_encoding

DIGITS = Path(__file__).parents[1] / "data" / "digits.csv.gz"
PIXELS = 8  # each digit is 8 x 8
MAX_INK = 16.0  # pixel values run 0..16
DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
WHOLE_NUMBER = re.compile("[0-9]+", re.ASCII)  # each cell of the digits file
LONGEST_DIGITS_TEXT = 2**22  # characters load_digits unzips: the UCI digits are 0.26 M
LARGEST_TENSOR = 2**28  # numbers in one tensor a function here builds (1 GiB of float32)


# The digits


@dataclass(frozen=True)
class Digits:
    """images (N, 1, 8, 8) float32 in 0..1 and labels (N,) int64, of one split."""

    images: torch.Tensor
    labels: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)


@plainly
def load_digits(path: str | Path = DIGITS) -> tuple[Digits, Digits]:
    """(train, test): the 1,797 digits, split once by a fixed permutation (seed 0) into 1,438
    training and 359 test images. Each row of the file is 64 pixels (0..16) and the label."""
    path = as_path(path)
    shown = shown_path(path)
    try:  # opening a pipe would wait for a writer forever
        mode = path.stat().st_mode
    except (OSError, ValueError):
        mode = None  # gzip.open below says why the path cannot be read
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise ValueError(f"cannot read the digits from {shown}: it {NOT_REGULAR}")
    try:
        with gzip.open(path, "rt") as file:
            text = file.read(LONGEST_DIGITS_TEXT + 1)  # a small gzip can unzip to gigabytes
    except (OSError, EOFError, ValueError, zlib.error) as error:  # the system's text names the path
        reason = getattr(error, "strerror", None) or error
        raise ValueError(f"cannot read the digits from {shown}: {reason}") from None
    if len(text) > LONGEST_DIGITS_TEXT:
        raise ValueError(
            f"{shown} unzips to more than {LONGEST_DIGITS_TEXT:,} characters: the UCI digits "
            "file is about 0.26 M, 64 pixels and a label a row"
        )
    rows = [line.strip().split(",") for line in text.splitlines() if line.strip()]
    width = PIXELS * PIXELS + 1
    for number, row in enumerate(rows, 1):
        if len(row) != width:  # before the cells: a trailing comma adds a cell ''
            raise ValueError(
                f"{shown}: each row must hold 64 pixels and a label: row {number} holds "
                f"{len(row)} numbers, not {width}"
            )
        for column, cell in enumerate(row, 1):  # float() would also take '1_0', 'nan', '1e1'
            if not WHOLE_NUMBER.fullmatch(cell):
                largest = 9 if column == width else int(MAX_INK)
                raise ValueError(
                    f"cannot read the digits from {shown}: row {number}, column {column} holds "
                    f"{validation.shown(cell)}, not a whole number 0..{largest}"
                )
    if not rows:
        raise ValueError(f"{shown} holds no rows: each row must hold 64 pixels and a label")
    values = torch.tensor([[float(x) for x in row] for row in rows], dtype=torch.float64)
    if len(values) < 5:
        raise ValueError(
            f"{shown} holds {len(values)} digit(s): at least 5 are needed, so that the test split "
            "(a fifth of them) holds one"
        )
    pixels, labels = values[:, :-1], values[:, -1]
    if pixels.max() > MAX_INK or labels.max() > 9:  # each cell is a whole number >= 0
        raise ValueError(f"{shown}: pixels must lie in 0..16 and labels in 0..9")
    images = (pixels / MAX_INK).float().reshape(-1, 1, PIXELS, PIXELS)  # (N, 1, 8, 8)
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    test_size = len(labels) // 5
    test, train = order[:test_size], order[test_size:]
    labels = labels.long()
    return Digits(images[train], labels[train]), Digits(images[test], labels[test])


def check_digits(digits: object, name: str = "digits") -> Digits:
    """digits itself if it is Digits as load_digits makes them: images (N, 1, 8, 8) of finite
    floating-point pixels and labels (N,) int64 0..9; otherwise an error naming what is wrong."""
    check_digit_labels(digits, name)
    check_pixels(digits.images, f"{name}.images", "(N, 1, 8, 8)")
    return digits


def check_digit_labels(digits: object, name: str = "digits") -> Digits:
    """check_digits without reading the pixels (a model reads those of the batch it is given):
    digits is Digits whose images are a tensor (N, 1, 8, 8) and whose labels are (N,) int64 0..9,
    one per image, as F.cross_entropy takes them."""
    if not isinstance(digits, Digits):
        raise TypeError(f"{name} must be Digits (load_digits()), got {type(digits).__name__}")
    images, labels = digits.images, digits.labels
    refuse_nested(images, f"{name}.images", "pixels (N, 1, 8, 8)")
    refuse_nested(labels, f"{name}.labels", "integer digit labels")
    if not isinstance(images, torch.Tensor) or images.dim() != 4 or images.shape[1:] != (1, 8, 8):
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"{name}.images must be a tensor (N, 1, 8, 8), got {got}")
    _dense(images, f"{name}.images", "pixels (N, 1, 8, 8)")
    if not isinstance(labels, torch.Tensor) or labels.shape != (len(images),):
        got = tuple(labels.shape) if isinstance(labels, torch.Tensor) else type(labels).__name__
        raise ValueError(
            f"{name}.labels must be a tensor ({len(images)},), one per image, got {got}"
        )
    _check_labels(labels, f"{name}.labels", lowest=0)
    if labels.dtype != torch.int64:
        raise ValueError(
            f"{name}.labels must be int64 digit labels, as load_digits makes them and "
            f"F.cross_entropy takes them, got {labels.dtype}: convert them with .long()"
        )
    return digits


def refuse_nested(values: object, name: str, what: str) -> None:
    """A nested tensor refused by name, before anything reads its shape (torch has none for it)."""
    if isinstance(values, torch.Tensor) and values.is_nested:
        validation.dense_tensor(values, name, what)


def _dense(values: object, name: str, what: str) -> torch.Tensor:
    """values itself if it is a tensor laid out densely, of at most LARGEST_TENSOR numbers (a
    meta one passes, of any size: what is computed from it is meta too)."""
    validation.tensor(values, name, what)
    if values.layout != torch.strided and not values.is_nested:
        raise ValueError(
            f"{name} must be a dense tensor of {what}, got a {values.layout} one: convert it "
            "with .to_dense()"
        )
    if values.is_nested or not values.is_meta:
        validation.dense_tensor(values, name, what)  # refuses nested and float8 tensors by name
    if not values.is_meta and values.numel() > LARGEST_TENSOR:  # expand() makes them for free
        raise ValueError(
            f"{name} hold {values.numel():,} numbers (shape {tuple(values.shape)}), more than "
            f"the 2^28 = {LARGEST_TENSOR:,} (1 GiB of float32) these helpers read or "
            "build at once: pass fewer at a time"
        )
    return values


def _readable(values: object, name: str, what: str) -> torch.Tensor:
    """values itself if it is a tensor whose numbers can be read: dense, not on the meta device."""
    _dense(values, name, what)
    if values.is_meta:
        raise ValueError(f"{name} is on the meta device: it has a shape but no {what} to read")
    return values


def check_pixels(images: object, name: str = "images", shape: str = "(B, 1, H, W)") -> torch.Tensor:
    """images itself if it holds pixels as the models read them: a dense floating-point tensor
    of finite numbers in 0..1 (load_digits divides the UCI digits' 0..16 by MAX_INK); otherwise
    an error naming what came and how to scale it. The shape is the caller's to check."""
    _readable(images, name, f"pixels {shape}")
    if not images.is_floating_point():
        raise ValueError(
            f"{name} must hold floating-point pixels in 0..1, got {images.dtype}: the UCI "
            f"digits' raw ink counts 0..16 become pixels with .float() / {MAX_INK:g} "
            "(helpers.vision.MAX_INK)"
        )
    if not images.isfinite().all():
        raise ValueError(f"{name} hold NaN or inf: every pixel must be a finite number in 0..1")
    if images.numel():
        low, high = images.min().item(), images.max().item()
        if low < 0 or high > 1:
            raise ValueError(
                f"{name} must hold pixels in 0..1, as load_digits scales them, got values from "
                f"{_pixel_text(low)} to {_pixel_text(high)}: divide the UCI digits' raw ink counts "
                f"0..16 by {MAX_INK:g} (helpers.vision.MAX_INK), or rescale other images into 0..1"
            )
    return images


def _pixel_text(value: float) -> str:
    """value to 4 significant digits, unless they round a value outside 0..1 into it (1.000001
    would print as 1): then all of its digits."""
    text = f"{value:.4g}"
    return text if (0 <= float(text) <= 1) == (0 <= value <= 1) else repr(value)


# Images as sequences of patches


def patchify(images: torch.Tensor, patch_size: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, (H/p)(W/p), C p p): patches left to right, then top to bottom, each
    flattened in (C, p, p) order, the layout of F.unfold(images, p, stride=p).transpose(1, 2)."""
    return _patchify(*_check_images(images, patch_size))


def _patchify(images: torch.Tensor, p: int) -> torch.Tensor:
    batch, channels, height, width = images.shape
    grid = images.reshape(
        batch, channels, height // p, p, width // p, p
    )  # (B, C, rows, p, cols, p)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return grid.reshape(batch, (height // p) * (width // p), channels * p * p)  # (B, n, C p p)


def unpatchify(patches: torch.Tensor, patch_size: int, image_size: tuple[int, int]) -> torch.Tensor:
    """The inverse of patchify: (B, (H/p)(W/p), C p p) -> (B, C, H, W) for image_size (H, W)."""
    _dense(patches, "patches", "patches (B, n, C p p)")
    p = validation.whole_number(patch_size, "patch_size")
    if not isinstance(image_size, tuple | list) or len(image_size) != 2:
        raise ValueError(f"image_size must be (H, W), got {validation.shown(image_size)}")
    height, width = (validation.whole_number(size, "image_size") for size in image_size)
    _check_size(p * p, f"a patch of size {validation.shown(p)}")
    _check_size(
        height * width,
        f"an image of {validation.shown(height)} x {validation.shown(width)} pixels",
    )
    if height % p or width % p:
        raise ValueError(
            f"the image's height {height} and width {width} must be multiples of patch_size {p}"
        )
    rows, cols = height // p, width // p
    if patches.dim() != 3 or patches.shape[1] != rows * cols or patches.shape[2] % (p * p):
        raise ValueError(
            f"patches must be (B, {rows * cols}, C * {p * p}) for {height} x {width} images cut "
            f"into {p} x {p} patches, got {tuple(patches.shape)}"
        )
    batch, channels = patches.shape[0], patches.shape[2] // (p * p)
    grid = patches.reshape(batch, rows, cols, channels, p, p)  # (B, rows, cols, C, p, p)
    grid = grid.permute(0, 3, 1, 4, 2, 5)  # (B, C, rows, p, cols, p)
    return grid.reshape(batch, channels, height, width)


def sinusoidal_2d(rows: int, cols: int, d_model: int) -> torch.Tensor:
    """(rows * cols, d_model), in patchify's order: the first half of each vector is chapter 05's
    1-D encoding of the patch's row, the second half that of its column (d_model / 2 each)."""
    rows = validation.whole_number(rows, "rows")
    cols = validation.whole_number(cols, "cols")
    d_model = validation.whole_number(d_model, "d_model")
    if d_model % 4:
        raise ValueError(
            f"d_model ({validation.shown(d_model)}) must be a multiple of 4: two halves of sin/cos "
            "pairs"
        )
    _check_size(
        rows * cols * d_model,
        f"an encoding of {validation.shown(rows)} x {validation.shown(cols)} patches, d_model "
        f"{validation.shown(d_model)},",
    )
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half)[:, None, :].expand(
        rows, cols, half
    )  # (rows, cols, d/2)
    by_col = sinusoidal_encoding(cols, half)[None, :, :].expand(rows, cols, half)
    return torch.cat([by_row, by_col], dim=-1).reshape(rows * cols, d_model)


# Canvases: digits in the cells of a grid


@dataclass(frozen=True)
class Canvases:
    """images (B, 1, grid*8, grid*8); digits (B, grid*grid) int64, the label in each cell in
    reading order, -1 where the cell is empty."""

    images: torch.Tensor
    digits: torch.Tensor
    grid: int

    def __len__(self) -> int:
        return len(self.digits)


@plainly
def make_canvases(
    source: Digits,
    count: int,
    digits_per_canvas: int | tuple[int, int] = 3,
    grid: int = 3,
    distinct: bool = True,
    generator: torch.Generator | None = None,
) -> Canvases:
    """`count` canvases of grid x grid cells of 8 x 8 pixels, each holding digits_per_canvas
    images of `source` (a number, or a (fewest, most) range) in random cells, the rest black,
    in the dtype of source's images.
    distinct: no two digits of a canvas share a label (so "find the seven" has one answer).
    At most MOST_PLACED_DIGITS digits in all (count x the most per canvas): each is placed alone."""
    count, span, grid, distinct = check_canvas_request(
        source, count, digits_per_canvas, grid, distinct, generator
    )
    return _make_canvases(source, count, span, grid, distinct, generator)


def _make_canvases(
    source: Digits,
    count: int,
    span: tuple[int, int],
    grid: int,
    distinct: bool,
    generator: torch.Generator | None,
) -> Canvases:
    """make_canvases of arguments check_canvas_request took, the span (fewest, most) per canvas."""
    fewest, most = span
    size = grid * PIXELS
    images = torch.zeros(count, 1, size, size, dtype=source.images.dtype)
    digits = torch.full((count, grid * grid), -1, dtype=torch.long)
    for index in range(count):
        how_many = int(torch.randint(fewest, most + 1, (1,), generator=generator))
        cells = torch.randperm(grid * grid, generator=generator)[:how_many]
        for cell in cells.tolist():
            choice = _pick(source, digits[index], distinct, generator)
            row, col = divmod(cell, grid)
            images[
                index, :, row * PIXELS : (row + 1) * PIXELS, col * PIXELS : (col + 1) * PIXELS
            ] = source.images[choice]
            digits[index, cell] = source.labels[choice]
    return Canvases(images, digits, grid)


MOST_PLACED_DIGITS = 40_000  # digits make_canvases places in one call, one at a time, 40-90 µs
# each here: about 3 s; 10,000 canvases of the reader's 1..4 digits


def check_placed_digits(count: int, most: int, name: str = "count") -> None:
    """count canvases of up to `most` digits each hold at most MOST_PLACED_DIGITS digits."""
    count = validation.whole_number(count, name)
    most = validation.whole_number(most, "most")
    if count * most > MOST_PLACED_DIGITS:
        raise ValueError(
            f"{name} must be at most {MOST_PLACED_DIGITS // most:,} canvases of up to {most} "
            f"digits, got {validation.shown(count)}: make_canvases places at most "
            f"{MOST_PLACED_DIGITS:,} digits in one call, one at a time (about 3 s)"
        )


def _digit_range(digits_per_canvas: object, cells: int, distinct: bool) -> tuple[int, int]:
    if isinstance(digits_per_canvas, tuple | list):
        if len(digits_per_canvas) != 2:
            raise ValueError(
                "digits_per_canvas must be a whole number >= 1 or a (fewest, most) range, got "
                f"{validation.shown(digits_per_canvas)}"
            )
        fewest, most = (validation.whole_number(n, "digits_per_canvas") for n in digits_per_canvas)
    else:
        fewest = most = validation.whole_number(digits_per_canvas, "digits_per_canvas")
    limit = min(cells, 10) if distinct else cells
    if not fewest <= most <= limit:
        raise ValueError(
            f"digits_per_canvas must be a number or a (fewest, most) range within 1..{limit} "
            f"(cells {cells}{', distinct labels' if distinct else ''}), got "
            f"{validation.shown(digits_per_canvas)}"
        )
    return fewest, most


def _pick(source: Digits, taken: torch.Tensor, distinct: bool, generator) -> int:
    """The index of a random image of source, of a label not in `taken` if distinct."""
    allowed = torch.ones(len(source), dtype=torch.bool)
    if distinct:
        allowed = ~torch.isin(source.labels, taken[taken >= 0])
    candidates = allowed.nonzero().flatten()
    return int(candidates[torch.randint(len(candidates), (1,), generator=generator)])


def check_canvases(canvases: object, name: str = "canvases") -> Canvases:
    """canvases itself if it is Canvases as make_canvases makes them: images (B, 1, grid*8,
    grid*8) of finite floating-point pixels and digits (B, grid*grid) integers -1..9; otherwise
    an error naming what is wrong. A grid held as a numpy or 0-d tensor integer comes back as a
    plain int in a copy (grid**2 would wrap around in int8)."""
    if not isinstance(canvases, Canvases):
        raise TypeError(f"{name} must be Canvases (make_canvases()), got {type(canvases).__name__}")
    grid = validation.whole_number(canvases.grid, f"{name}.grid")
    _check_size(
        grid * grid * PIXELS * PIXELS,
        f"a canvas of {name}.grid = {validation.shown(grid)} cells across",
    )
    images, digits, side = canvases.images, canvases.digits, grid * PIXELS
    refuse_nested(images, f"{name}.images", "pixels (B, 1, H, W)")
    refuse_nested(digits, f"{name}.digits", "a label per cell")
    if not isinstance(digits, torch.Tensor) or digits.dim() != 2 or digits.shape[1] != grid**2:
        got = tuple(digits.shape) if isinstance(digits, torch.Tensor) else type(digits).__name__
        raise ValueError(
            f"{name}.digits must be a tensor (B, {grid**2}), a label per cell, got {got}"
        )
    _check_labels(digits, f"{name}.digits", lowest=-1)
    expected = (len(digits), 1, side, side)
    if not isinstance(images, torch.Tensor) or tuple(images.shape) != expected:
        got = tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(
            f"{name}.images must be a tensor {expected}, one per row of digits, got {got}"
        )
    check_pixels(images, f"{name}.images", str(expected))
    return canvases if type(canvases.grid) is int else replace(canvases, grid=grid)


def cell_patches(cell: int, grid: int, patch_size: int) -> torch.Tensor:
    """The indices (in patchify's order) of the patches inside one cell of the grid."""
    grid = validation.whole_number(grid, "grid")
    cell = validation.whole_number(cell, "cell", minimum=0)
    p = validation.whole_number(patch_size, "patch_size")
    _check_size((grid * PIXELS) ** 2, f"a canvas of {validation.shown(grid)} cells across")
    if cell >= grid * grid:
        raise ValueError(
            f"cell must be one of the grid's cells 0..{grid * grid - 1}, got "
            f"{validation.shown(cell)}"
        )
    if PIXELS % p:
        raise ValueError(
            f"patch_size must divide a cell's {PIXELS} pixels, got {validation.shown(p)}"
        )
    per_cell, cols = PIXELS // p, grid * PIXELS // p  # patches across a cell, across the canvas
    row, col = divmod(cell, grid)
    rows = torch.arange(row * per_cell, (row + 1) * per_cell)
    columns = torch.arange(col * per_cell, (col + 1) * per_cell)
    return (rows[:, None] * cols + columns[None, :]).flatten()  # (per_cell ** 2,)


# A learner's drawing as a canvas (chapter 14's drawing pad)

DRAWING_SCALE = 4  # drawing-grid cells per canvas pixel: sklearn's 32 x 32 bitmaps per 8 x 8 digit
PEN_RADIUS = 2.5  # drawing-grid cells: strokes 5 wide, near the digits' ink (mean 4.9 of 16)
MOST_STROKE_POINTS = 20_000  # points (and strokes) in one drawing: more is no hand's drawing
_PIECE = 2.0  # drawing-grid cells: segments are cut into pieces this long, each inked locally
_CHUNK_CELLS = 2**22  # cells of the pieces' windows rasterise_strokes examines at a time
MOST_PEN_CELLS = 2**19  # cells round a drawing's pieces (pieces x window cells), a stroke being
# as many pieces as _PIECE cells fit in its length, however many points the pad sent along it
# (one every 0.25 cells), and a dot or a stroke shorter than that one piece: with the default
# pen (11 x 11 cells round a piece), 4,332 pieces, about 8,600 cells of stroke, some 90 times
# across the 96-cell pad (about 0.04 s on one thread). A single dot whose window holds more
# is refused as too wide a pen.
MOST_PEN_WORK = 2**22  # cells examined in all, each segment apart (a segment as many pieces as
# _PIECE cells fit in it, at least one): about 0.3 s on one thread. The default pen stays under
# it: MOST_STROKE_POINTS segments and MOST_PEN_CELLS of length make 2.9 M cells at most.


def check_strokes(strokes: object, size: int) -> list[list[tuple[float, float]]]:
    """The strokes as lists of (x, y) floats clamped to the drawing grid 0..size (x across, y
    down), or an error naming what was expected: a list of strokes, each a list of [x, y]
    points of two finite numbers, at most MOST_STROKE_POINTS points in all."""
    expected = "strokes must be a list of strokes, each a list of [x, y] points"
    size = _grid_size(size)
    if not isinstance(strokes, list | tuple):
        raise TypeError(f"{expected}, got {type(strokes).__name__}")
    if len(strokes) > MOST_STROKE_POINTS:
        raise ValueError(
            f"{expected}: at most {MOST_STROKE_POINTS:,} strokes, got {len(strokes):,}"
        )
    checked, points = [], 0
    for index, stroke in enumerate(strokes):
        if not isinstance(stroke, list | tuple):
            raise TypeError(f"{expected}; stroke {index} is a {type(stroke).__name__}")
        points += len(stroke)
        if points > MOST_STROKE_POINTS:
            raise ValueError(
                f"{expected}: at most {MOST_STROKE_POINTS:,} points in all, got more by stroke "
                f"{index}"
            )
        checked.append([_grid_point(point, index, size) for point in stroke])
    return checked


def _grid_point(point: object, stroke: int, size: int) -> tuple[float, float]:
    if (
        not isinstance(point, list | tuple)
        or len(point) != 2
        or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in point)
    ):
        raise TypeError(
            f"each point must be [x, y], two numbers; stroke {stroke} holds "
            f"{validation.shown(point)}"
        )
    try:
        x, y = float(point[0]), float(point[1])
    except OverflowError:  # an int beyond any float
        x = y = math.inf
    if not (math.isfinite(x) and math.isfinite(y)):
        raise ValueError(
            f"each point must be two finite numbers; stroke {stroke} holds "
            f"{validation.shown(point)}"
        )
    return min(max(x, 0.0), float(size)), min(max(y, 0.0), float(size))


def _grid_size(size: object) -> int:
    """size as an int, if it is a whole number >= 1 whose size x size grid fits in memory."""
    size = validation.whole_number(size, "size")
    if size * size > LARGEST_TENSOR:
        raise ValueError(
            f"a drawing grid of size {validation.shown(size)} would hold more than 2^28 = "
            f"{LARGEST_TENSOR:,} cells (1 GiB of float32): a smaller size was meant"
        )
    return size


@plainly
def rasterise_strokes(
    strokes: object, size: int = 3 * PIXELS * DRAWING_SCALE, pen_radius: float = PEN_RADIUS
) -> torch.Tensor:
    """(size, size) bool, [row, column]: the cells of the drawing grid whose centre lies within
    pen_radius of a stroke (consecutive points joined by straight segments, a lone point a dot).
    Points are (x, y) in grid cells, x across and y down; a point off the grid is clamped to it.
    No strokes: a blank grid."""
    size = _grid_size(size)
    pen_radius = validation.positive_number(pen_radius, "pen_radius")
    strokes = check_strokes(strokes, size)
    bitmap = torch.zeros(size, size, dtype=torch.bool)
    if pen_radius >= size * math.sqrt(2):  # reaches every cell from any point of the grid
        return bitmap | any(strokes)
    # cells from a piece's middle to any it inks; no cell of the grid lies further than size
    reach = min(math.ceil(_PIECE / 2 + pen_radius) + 1, size + 1)
    window = 2 * reach + 1  # cells across the square round a piece's middle
    if window**2 > MOST_PEN_CELLS:  # a single dot alone is more than a redraw can ink
        widest = (math.isqrt(MOST_PEN_CELLS) - 1) // 2 - 1 - _PIECE / 2  # largest reach's pen
        raise ValueError(
            f"pen_radius {pen_radius:g} is too large for any stroke: it reaches {window} x "
            f"{window} cells round each piece of a stroke, more than the {MOST_PEN_CELLS:,} a "
            f"redraw can ink in about a second; a smaller pen was meant, pen_radius at most "
            f"{widest:g}"
        )
    a, b = _stroke_segments(strokes)  # (segments, 2) each: (x, y)
    lengths = (b - a).norm(dim=-1)  # (segments,)
    drawn = [max(len(stroke) - 1, 1) for stroke in strokes if stroke]  # segments of each stroke
    stroke_of = torch.repeat_interleave(
        torch.arange(len(drawn)), torch.tensor(drawn, dtype=torch.long)
    )
    stroke_lengths = torch.zeros(len(drawn), dtype=torch.float64).index_add_(0, stroke_of, lengths)
    budget = MOST_PEN_CELLS // window**2  # pieces of _PIECE cells of stroke, a dot one
    drawn_pieces = int((stroke_lengths / _PIECE).ceil().clamp(min=1).sum())
    if drawn_pieces > budget:
        raise ValueError(
            f"the strokes are {lengths.sum().item():,.0f} cells long in all, in "
            f"{len(a):,} segments and dots of {len(drawn):,} stroke{'s' * (len(drawn) != 1)}: "
            f"{drawn_pieces:,} pieces "
            f"of {_PIECE:g} cells of stroke (a dot, or a stroke shorter than that, one piece), "
            f"more than a redraw inks quickly: with pen_radius {pen_radius:g}, at most "
            f"{budget:,} pieces, about {budget * _PIECE:,.0f} cells of stroke; draw fewer or "
            "shorter strokes"
        )
    pieces = (lengths / _PIECE).ceil().clamp(min=1).long()  # (segments,): each inked apart
    work = int(pieces.sum()) * window**2
    if work > MOST_PEN_WORK:  # many points close together, with a wide pen
        raise ValueError(
            f"the strokes hold {len(a):,} segments and dots, and each is inked apart (a segment "
            f"longer than {_PIECE:g} cells once per {_PIECE:g} cells of it) over the {window} x "
            f"{window} cells round it that pen_radius {pen_radius:g} can reach: {work:,} cells "
            f"in all, more than the {MOST_PEN_WORK:,} a redraw examines quickly; draw with "
            "fewer points, further apart, or with a smaller pen"
        )
    starts, ends = _stroke_pieces(a, b, pieces)  # (n, 2) each
    offsets = torch.arange(-reach, reach + 1, dtype=torch.float64)
    chunk = min(4096, _CHUNK_CELLS // window**2)  # pieces at a time
    for first in range(0, len(starts), chunk):  # chunks: pieces x window cells at a time
        a, b = starts[first : first + chunk], ends[first : first + chunk]
        middle = ((a + b) / 2).floor()  # (m, 2)
        xs = middle[:, None, None, 0] + offsets[None, None, :] + 0.5  # (m, 1, w) cell centres
        ys = middle[:, None, None, 1] + offsets[None, :, None] + 0.5  # (m, w, 1)
        direction = b - a  # (m, 2)
        length2 = (direction**2).sum(-1).clamp(min=1e-12)[:, None, None]  # (m, 1, 1)
        along = (
            (xs - a[:, None, None, 0]) * direction[:, None, None, 0]
            + (ys - a[:, None, None, 1]) * direction[:, None, None, 1]
        ) / length2
        along = along.clamp(0, 1)  # (m, w, w): the nearest point of the piece
        dx = xs - (a[:, None, None, 0] + along * direction[:, None, None, 0])
        dy = ys - (a[:, None, None, 1] + along * direction[:, None, None, 1])
        inked = (dx**2 + dy**2 <= pen_radius**2) & (xs < size) & (ys < size) & (xs > 0) & (ys > 0)
        m, rows, cols = inked.nonzero(as_tuple=True)
        bitmap[(ys[m, rows, 0] - 0.5).long(), (xs[m, 0, cols] - 0.5).long()] = True
    return bitmap


def _stroke_segments(strokes: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(starts, ends), each (segments, 2) float64: consecutive points of every stroke (a lone
    point a segment of length 0)."""
    starts, ends = [], []
    for stroke in strokes:
        if stroke:
            starts += stroke[:-1] if len(stroke) > 1 else stroke
            ends += stroke[1:] if len(stroke) > 1 else stroke
    a = torch.tensor(starts, dtype=torch.float64).reshape(-1, 2)  # (segments, 2)
    return a, torch.tensor(ends, dtype=torch.float64).reshape(-1, 2)


def _stroke_pieces(
    a: torch.Tensor, b: torch.Tensor, pieces: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(starts, ends), each (n, 2) float64: segment i from a[i] to b[i] cut into pieces[i] equal
    pieces (at most _PIECE long), so each piece inks only cells near it."""
    segment = torch.repeat_interleave(torch.arange(len(a)), pieces)  # (n,): each piece's segment
    first = torch.cumsum(pieces, 0) - pieces  # (segments,): the index of each one's first piece
    k = (torch.arange(len(segment)) - first[segment]).double()  # (n,): the piece within it
    count = pieces[segment].double()[:, None]
    step = (b - a)[segment] / count  # (n, 2)
    return a[segment] + k[:, None] * step, a[segment] + (k[:, None] + 1) * step


@plainly
def ink_counts(bitmap: torch.Tensor, block: int = DRAWING_SCALE) -> torch.Tensor:
    """(1, 1, H / block, W / block) float64: the inked cells of a bool bitmap (H, W) counted in
    block x block squares, 0..block² (0..16 for 4 x 4), as sklearn's digits were made from
    32 x 32 bitmaps. Divide by MAX_INK for the models' 0..1 pixels."""
    _dense(bitmap, "bitmap", "inked cells (H, W) bool")
    block = validation.whole_number(block, "block")
    _check_size(block * block, f"a block of size {validation.shown(block)}")
    if bitmap.dtype != torch.bool or bitmap.dim() != 2:
        raise ValueError(
            f"bitmap must be a bool tensor (H, W), got {bitmap.dtype} of shape "
            f"{tuple(bitmap.shape)}"
        )
    height, width = bitmap.shape
    if height % block or width % block:
        raise ValueError(
            f"the bitmap's height {height} and width {width} must be multiples of block {block}"
        )
    blocks = bitmap.reshape(height // block, block, width // block, block)
    return blocks.sum((1, 3), dtype=torch.float64)[None, None]


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


def check_canvas_request(
    source: object,
    count: object,
    digits_per_canvas: object,
    grid: object,
    distinct: object,
    generator: object,
) -> tuple[int, tuple[int, int], int, bool]:
    """make_canvases' arguments as it uses them: (count, (fewest, most) digits per canvas, grid,
    distinct), or an error naming what is wrong."""
    check_digits(source, "source")
    count = validation.whole_number(count, "count")
    grid = validation.whole_number(grid, "grid")
    distinct = validation.flag(distinct, "distinct")
    size = grid * PIXELS
    _check_size(
        count * size * size,
        f"{validation.shown(count)} canvases of {validation.shown(size)} pixels across",
    )
    fewest, most = _digit_range(digits_per_canvas, grid * grid, distinct)
    check_placed_digits(count, most)
    _check_source(source, most, distinct)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r:.80}")
    return count, (fewest, most), grid, distinct


def _check_labels(labels: torch.Tensor, name: str, lowest: int) -> None:
    """Integer labels lowest..9 (-1 marks an empty cell of a canvas)."""
    _readable(labels, name, "integer digit labels")
    if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(f"{name} must be integer digit labels, got {labels.dtype}")
    if labels.numel():
        low, high = int(labels.min()), int(labels.max())  # Python ints: uint8 cannot hold -1
        if low < lowest or high > 9:
            raise ValueError(f"{name} must lie in {lowest}..9, got {low}..{high}")


def _check_size(numbers: int, what: str) -> None:
    """A tensor of this many numbers fits in memory; more is a typing mistake. what names it,
    its sizes through validation.shown (an int of thousands of digits does not print)."""
    if numbers > LARGEST_TENSOR:
        raise ValueError(
            f"{what} would hold more than 2^28 = {LARGEST_TENSOR:,} numbers (1 GiB of float32): "
            "a smaller size was meant"
        )


def _check_images(images: object, patch_size: object) -> tuple[torch.Tensor, int]:
    _dense(images, "images", "pixels (B, C, H, W)")
    if images.dim() != 4:
        raise ValueError(f"images must be (B, C, H, W), got shape {tuple(images.shape)}")
    patch_size = validation.whole_number(patch_size, "patch_size")
    channels = images.shape[1]
    _check_size(  # a patch of no channels holds no numbers, but its size still must fit torch's
        patch_size**2, f"a patch of size {validation.shown(patch_size)}"
    )
    if channels * patch_size**2 > LARGEST_TENSOR:  # the channels make it large
        raise ValueError(
            f"a patch of C x p x p = {channels:,} channels x {patch_size} x {patch_size} pixels "
            f"would hold {channels * patch_size**2:,} numbers, more than 2^28 = "
            f"{LARGEST_TENSOR:,} (1 GiB of float32): images of fewer channels (C, the second "
            "size of (B, C, H, W)), or a smaller patch_size, were meant"
        )
    height, width = images.shape[-2:]
    if height % patch_size or width % patch_size:
        raise ValueError(
            f"the image's height {height} and width {width} must be multiples of patch_size "
            f"{patch_size}"
        )
    return images, patch_size


def _check_source(source: Digits, most: int, distinct: bool) -> None:
    """The source (checked Digits) holds enough images, or labels, to fill a canvas."""
    labels = source.labels
    needed = most if distinct else 1
    available = len(labels.unique()) if distinct else len(labels)
    if available < needed:
        raise ValueError(
            f"source has {available} {'distinct labels' if distinct else 'images'}, too few "
            f"for digits_per_canvas {most}{' with distinct labels' if distinct else ''}"
        )
