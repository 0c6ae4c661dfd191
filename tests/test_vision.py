"""helpers.vision (chapter 14): the digits and their split, patchify and unpatchify against
F.unfold, the 2-D sinusoidal encoding, canvases of digits in the cells of a grid, and the
patches of each cell."""

import gzip
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.positional import sinusoidal_encoding
from helpers.vision import (
    DIGITS,
    MOST_PEN_CELLS,
    MOST_STROKE_POINTS,
    PEN_RADIUS,
    Canvases,
    Digits,
    cell_patches,
    check_canvases,
    check_digits,
    check_strokes,
    ink_counts,
    load_digits,
    make_canvases,
    patchify,
    rasterise_strokes,
    sinusoidal_2d,
    unpatchify,
)


@pytest.fixture(scope="module")
def digits() -> tuple[Digits, Digits]:
    return load_digits()


@pytest.fixture(scope="module")
def test_digits(digits) -> Digits:
    return digits[1]


# Images as sequences of patches

SHAPES = [  # (B, C, H, W, p)
    (2, 1, 8, 8, 4),
    (1, 3, 8, 12, 4),
    (3, 2, 6, 4, 2),
    (2, 3, 4, 4, 4),  # H = W = p: one patch
    (1, 1, 3, 5, 1),  # p = 1: every pixel a patch
    (2, 3, 8, 8, 2),
    (1, 2, 4, 12, 2),
]


def unfolded(images: torch.Tensor, p: int) -> torch.Tensor:
    """The layout DESIGN.md names for patchify."""
    return F.unfold(images, p, stride=p).transpose(1, 2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
def test_patchify_equals_unfold(shape, dtype):
    *size, p = shape
    images = torch.randn(*size).to(dtype)
    patches = patchify(images, p)
    batch, channels, height, width = size
    assert patches.shape == (batch, (height // p) * (width // p), channels * p * p)
    assert patches.dtype == dtype
    assert torch.equal(patches, unfolded(images, p))


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.transpose(-1, -2).contiguous().transpose(-1, -2),
        lambda x: x.contiguous(memory_format=torch.channels_last),
        lambda x: torch.cat([x, x], dim=-1)[..., ::2],
    ],
    ids=["transposed", "channels last", "every other column"],
)
def test_patchify_of_a_non_contiguous_input_equals_unfold(view):
    images = view(torch.randn(2, 3, 8, 12))
    assert not images.is_contiguous()
    assert torch.equal(patchify(images, 4), unfolded(images, 4))


def test_patches_run_left_to_right_then_top_to_bottom():
    image = torch.arange(4 * 6.0).reshape(1, 1, 4, 6)  # each pixel holds its own index
    patches = patchify(image, 2)  # (1, 2 * 3, 4)
    corners = patches[0, :, 0]  # the top-left pixel of each patch
    assert corners.tolist() == [0, 2, 4, 12, 14, 16]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unpatchify_inverts_patchify_exactly(shape):
    *size, p = shape
    images = torch.randn(*size)
    height, width = size[-2:]
    assert torch.equal(unpatchify(patchify(images, p), p, (height, width)), images)
    patches = torch.randn(size[0], (height // p) * (width // p), size[1] * p * p)
    assert torch.equal(patchify(unpatchify(patches, p, [height, width]), p), patches)


def test_gradients_flow_through_patchify_and_unpatchify():
    images = torch.randn(2, 3, 8, 4, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(2, 8, 12, dtype=torch.float64)
    (patchify(images, 2) * upstream).sum().backward()
    assert torch.equal(images.grad, unpatchify(upstream, 2, (8, 4)))  # a permutation's gradient

    patches = upstream.clone().requires_grad_()
    (unpatchify(patches, 2, (8, 4)) * images.detach()).sum().backward()
    assert torch.equal(patches.grad, patchify(images.detach(), 2))
    assert torch.autograd.gradcheck(lambda x: patchify(x, 2), (images.detach().requires_grad_(),))


@pytest.mark.parametrize(("height", "width"), [(8, 6), (6, 8), (5, 5)])
def test_a_side_that_is_not_a_multiple_of_the_patch_size_is_refused(height, width):
    with pytest.raises(ValueError, match=rf"height {height} and width {width} must be multiples"):
        patchify(torch.zeros(1, 1, height, width), 4)
    with pytest.raises(ValueError, match="must be multiples of patch_size 4"):
        unpatchify(torch.zeros(1, 2, 16), 4, (height, width))


@pytest.mark.parametrize(
    ("images", "patch_size", "words"),
    [
        (np.zeros((1, 1, 8, 8)), 4, "images must be a torch.Tensor .* numpy array"),
        ([[[[0.0] * 8] * 8]], 4, "images must be a torch.Tensor .* got list"),
        (torch.zeros(8, 8), 4, r"images must be \(B, C, H, W\), got shape \(8, 8\)"),
        (torch.zeros(1, 8, 8), 4, r"images must be \(B, C, H, W\), got shape \(1, 8, 8\)"),
        (torch.zeros(1, 1, 1, 8, 8), 4, r"images must be \(B, C, H, W\)"),
        (torch.zeros(1, 1, 8, 8), 0, "patch_size must be a whole number >= 1, got 0"),
        (torch.zeros(1, 1, 8, 8), -4, "patch_size must be a whole number >= 1, got -4"),
        (torch.zeros(1, 1, 8, 8), 4.0, r"patch_size must be a whole number >= 1, got 4.0"),
        (torch.zeros(1, 1, 8, 8), True, "patch_size must be a whole number >= 1, got True"),
        (torch.zeros(1, 1, 8, 8), "4", "patch_size must be a whole number"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_patchify_refuses_bad_input_by_name(images, patch_size, words):
    with pytest.raises(ValueError, match=words):
        patchify(images, patch_size)


@pytest.mark.parametrize(
    ("patches", "patch_size", "image_size", "words"),
    [
        (np.zeros((1, 4, 16)), 4, (8, 8), "patches must be a torch.Tensor"),
        (torch.zeros(4, 16), 4, (8, 8), r"patches must be \(B, 4, C \* 16\) .* got \(4, 16\)"),
        (torch.zeros(1, 5, 16), 4, (8, 8), r"patches must be \(B, 4, C \* 16\)"),
        (torch.zeros(1, 4, 15), 4, (8, 8), r"got \(1, 4, 15\)"),
        (torch.zeros(1, 4, 16), 0, (8, 8), "patch_size must be a whole number >= 1"),
        (torch.zeros(1, 4, 16), True, (8, 8), "patch_size must be a whole number >= 1"),
        (torch.zeros(1, 4, 16), 4, 8, r"image_size must be \(H, W\), got 8"),
        (torch.zeros(1, 4, 16), 4, (8, 8, 1), r"image_size must be \(H, W\)"),
        (torch.zeros(1, 4, 16), 4, (8.0, 8), "image_size must be a whole number"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_unpatchify_refuses_bad_input_by_name(patches, patch_size, image_size, words):
    with pytest.raises(ValueError, match=words):
        unpatchify(patches, patch_size, image_size)


# Positions in two dimensions


@pytest.mark.parametrize(
    ("rows", "cols", "d_model"), [(2, 3, 8), (3, 3, 16), (6, 6, 32), (1, 5, 4)]
)
def test_sinusoidal_2d_is_the_rows_encoding_then_the_columns(rows, cols, d_model):
    encoding = sinusoidal_2d(rows, cols, d_model)
    assert encoding.shape == (rows * cols, d_model) and encoding.dtype == torch.float32
    grid = encoding.reshape(rows, cols, d_model)  # patchify's order: row by row
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half)[:, None, :].expand(rows, cols, half)
    by_col = sinusoidal_encoding(cols, half)[None, :, :].expand(rows, cols, half)
    assert torch.equal(grid[..., :half], by_row)  # the same along each row: the column is absent
    assert torch.equal(grid[..., half:], by_col)


def test_vertical_neighbours_are_as_close_as_horizontal_ones_unlike_in_1d():
    rows, cols, d_model = 4, 6, 32
    planar = sinusoidal_2d(rows, cols, d_model).reshape(rows, cols, d_model)
    flat = sinusoidal_encoding(rows * cols, d_model).reshape(rows, cols, d_model)
    vertical = (planar[1:] - planar[:-1]).norm(dim=-1)
    horizontal = (planar[:, 1:] - planar[:, :-1]).norm(dim=-1)
    assert torch.allclose(vertical, horizontal[0, 0].expand_as(vertical), atol=1e-5)
    assert torch.allclose(horizontal, vertical[0, 0].expand_as(horizontal), atol=1e-5)
    # In 1-D, the patch below is `cols` positions further on: further away than its neighbour.
    vertical_1d = (flat[1:] - flat[:-1]).norm(dim=-1)
    horizontal_1d = (flat[:, 1:] - flat[:, :-1]).norm(dim=-1)
    assert vertical_1d.min() > 1.5 * horizontal_1d.max()


@pytest.mark.parametrize(
    ("rows", "cols", "d_model", "words"),
    [
        (2, 3, 6, r"d_model \(6\) must be a multiple of 4"),
        (2, 3, 10, r"d_model \(10\) must be a multiple of 4"),
        (2, 3, 2, r"d_model \(2\) must be a multiple of 4"),
        (0, 3, 8, "rows must be a whole number >= 1, got 0"),
        (2, True, 8, "cols must be a whole number >= 1, got True"),
        (2, 3, 8.0, "d_model must be a whole number >= 1, got 8.0"),
    ],
)
def test_sinusoidal_2d_refuses_bad_sizes_by_name(rows, cols, d_model, words):
    with pytest.raises(ValueError, match=words):
        sinusoidal_2d(rows, cols, d_model)


# The digits


def test_the_digits_are_split_into_1438_training_and_359_test_images(digits):
    train, test = digits
    assert (len(train), len(test)) == (1438, 359)
    for split in (train, test):
        assert split.images.shape == (len(split), 1, 8, 8) and split.images.dtype == torch.float32
        assert split.labels.shape == (len(split),) and split.labels.dtype == torch.int64
        assert 0 <= split.images.min() and split.images.max() <= 1
        assert split.images.max() == 1  # 16, the most ink, becomes 1
        assert set(split.labels.tolist()) == set(range(10))


def test_the_split_is_the_same_on_every_call(digits):
    train, test = load_digits()
    for again, first in zip((train, test), digits, strict=True):
        assert torch.equal(again.images, first.images) and torch.equal(again.labels, first.labels)


def test_no_test_image_appears_in_training(digits):
    train, test = (split.images.reshape(len(split), -1) for split in digits)
    same = (test[:, None, :] == train[None, :, :]).all(-1)  # (test, train)
    assert not same.any()


def _damaged_copy(tmp_path, damage) -> str:
    """A gzip copy of the first 20 rows of the digits, after damage(rows) changed them."""
    with gzip.open(DIGITS, "rt") as file:
        rows = [line.strip().split(",") for line in file][:20]
    damage(rows)
    path = tmp_path / "digits.csv.gz"
    with gzip.open(path, "wt") as file:
        file.write("\n".join(",".join(row) for row in rows))
    return path


def test_an_undamaged_copy_is_read(tmp_path):
    train, test = load_digits(_damaged_copy(tmp_path, lambda rows: None))
    assert (len(train), len(test)) == (16, 4)


def _set(row: int, column: int, value: str):
    def damage(rows):
        rows[row][column] = value

    return damage


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda rows: rows[3].pop(), "each row must hold 64 pixels and a label|cannot read"),
        (lambda rows: rows[3].append("0"), "each row must hold 64 pixels and a label|cannot read"),
        (lambda rows: rows.__setitem__(slice(None), [row[1:] for row in rows]), "64 pixels and"),
        (_set(5, -1, "11"), "labels in 0..9"),
        (_set(5, -1, "-1"), r"row 6, column 65 holds '-1', not a whole number 0\.\.9"),
        (_set(5, -1, "3.5"), r"row 6, column 65 holds '3\.5', not a whole number 0\.\.9"),
        (_set(5, 10, "17"), "pixels must lie in 0..16"),
        (_set(5, 10, "-1"), r"row 6, column 11 holds '-1', not a whole number 0\.\.16"),
        (_set(5, 10, "inf"), r"row 6, column 11 holds 'inf', not a whole number 0\.\.16"),
        (_set(5, 10, "ink"), "cannot read the digits .* holds 'ink'"),
    ],
    ids=[
        "a short row",
        "a long row",
        "no labels",
        "label 11",
        "label -1",
        "label 3.5",
        "pixel 17",
        "pixel -1",
        "pixel inf",
        "not a number",
    ],
)
def test_a_damaged_file_is_a_value_error(tmp_path, damage, words):
    with pytest.raises(ValueError, match=words):
        load_digits(_damaged_copy(tmp_path, damage))


def test_a_pixel_that_is_not_a_number_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"row 6, column 11 holds 'nan', not a whole number"):
        load_digits(_damaged_copy(tmp_path, _set(5, 10, "nan")))


def test_a_file_that_is_not_gzip_or_not_there_is_a_value_error(tmp_path):
    plain = tmp_path / "digits.csv.gz"
    plain.write_text("0," * 64 + "3\n")
    with pytest.raises(ValueError, match="cannot read the digits from"):
        load_digits(plain)
    with pytest.raises(ValueError, match="cannot read the digits from"):
        load_digits(tmp_path / "missing.csv.gz")
    empty = tmp_path / "empty.csv.gz"
    with gzip.open(empty, "wt") as file:
        file.write("")
    with pytest.raises(ValueError, match="each row must hold 64 pixels and a label"):
        load_digits(empty)


# Canvases: digits in the cells of a grid


def _cells(canvases: Canvases) -> torch.Tensor:
    """(B, grid * grid, 64): the pixels of each cell, in reading order."""
    return patchify(canvases.images, 8)


def test_canvases_have_their_shapes(test_digits):
    canvases = make_canvases(test_digits, 5, generator=torch.Generator().manual_seed(0))
    assert len(canvases) == 5 and canvases.grid == 3
    assert canvases.images.shape == (5, 1, 24, 24) and canvases.images.dtype == torch.float32
    assert canvases.digits.shape == (5, 9) and canvases.digits.dtype == torch.int64
    larger = make_canvases(test_digits, 2, 4, grid=4, generator=torch.Generator().manual_seed(0))
    assert larger.images.shape == (2, 1, 32, 32) and larger.digits.shape == (2, 16)


@pytest.mark.parametrize(("how_many", "grid"), [(1, 3), (3, 3), (9, 3), (2, 2), (10, 4)])
def test_each_canvas_holds_the_digits_it_records_and_nothing_else(test_digits, how_many, grid):
    canvases = make_canvases(
        test_digits, 20, how_many, grid=grid, generator=torch.Generator().manual_seed(1)
    )
    filled = canvases.digits >= 0
    assert (filled.sum(1) == how_many).all()
    cells = _cells(canvases)  # (B, cells, 64)
    assert (cells[~filled] == 0).all()
    sources = test_digits.images.reshape(len(test_digits), 64)
    for cell, label in zip(cells[filled], canvases.digits[filled], strict=True):
        matches = (sources == cell).all(-1)  # which source images this cell is
        assert matches.any() and (test_digits.labels[matches] == label).all()


def test_distinct_canvases_never_repeat_a_label(test_digits):
    canvases = make_canvases(test_digits, 50, 9, generator=torch.Generator().manual_seed(2))
    for row in canvases.digits:
        labels = row[row >= 0]
        assert len(labels.unique()) == len(labels) == 9


def test_without_distinct_a_label_may_repeat():
    sevens = Digits(torch.rand(4, 1, 8, 8), torch.full((4,), 7))
    canvases = make_canvases(sevens, 3, 5, distinct=False, generator=torch.Generator())
    assert ((canvases.digits == 7).sum(1) == 5).all()


def test_a_range_of_digits_per_canvas_is_respected_and_covered(test_digits):
    canvases = make_canvases(test_digits, 200, (2, 5), generator=torch.Generator().manual_seed(3))
    counts = (canvases.digits >= 0).sum(1)
    assert set(counts.tolist()) == {2, 3, 4, 5}


def test_canvases_are_reproducible_with_a_generator(test_digits):
    first, again, other = (
        make_canvases(test_digits, 8, (1, 4), generator=torch.Generator().manual_seed(seed))
        for seed in (4, 4, 5)
    )
    assert torch.equal(first.images, again.images) and torch.equal(first.digits, again.digits)
    assert not torch.equal(first.digits, other.digits)


def test_canvases_are_built_from_the_source_given(digits):
    train, test = digits
    canvases = make_canvases(test, 30, 4, generator=torch.Generator().manual_seed(6))
    cells = _cells(canvases)[canvases.digits >= 0]  # (filled cells, 64)
    training = train.images.reshape(len(train), 64)
    assert not (cells[:, None, :] == training[None]).all(-1).any()  # no training image


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_canvases_are_built_in_the_source_images_dtype_whatever_the_default(test_digits, dtype):
    source = Digits(test_digits.images.to(dtype), test_digits.labels)
    expected = make_canvases(source, 5, generator=torch.Generator().manual_seed(3))
    torch.set_default_dtype(torch.float64 if dtype == torch.float32 else torch.float32)
    try:
        built = make_canvases(source, 5, generator=torch.Generator().manual_seed(3))
    finally:
        torch.set_default_dtype(torch.float32)
    assert built.images.dtype == expected.images.dtype == dtype
    assert torch.equal(built.images, expected.images)


@pytest.mark.parametrize(
    ("arguments", "error", "words"),
    [
        (dict(source=torch.zeros(3, 1, 8, 8)), TypeError, "source must be Digits"),
        (dict(count=0), ValueError, "count must be a whole number >= 1, got 0"),
        (dict(count=2.0), ValueError, "count must be a whole number"),
        (dict(digits_per_canvas=0), ValueError, "digits_per_canvas must be a whole number"),
        (dict(digits_per_canvas=10), ValueError, r"within 1..9 \(cells 9, distinct labels\)"),
        (dict(digits_per_canvas=(3, 2)), ValueError, "digits_per_canvas must be a number or a"),
        (dict(digits_per_canvas=(1, 10)), ValueError, "within 1..9"),
        (dict(digits_per_canvas=11, grid=4), ValueError, r"within 1..10 \(cells 16, distinct"),
        (
            dict(digits_per_canvas=(1, 2, 3)),
            ValueError,
            r"digits_per_canvas must be a whole number >= 1 or a \(fewest, most\) range, got "
            r"\(1, 2, 3\)",
        ),
        (dict(grid=0), ValueError, "grid must be a whole number >= 1, got 0"),
        (dict(distinct="no"), ValueError, "distinct must be True or False, got 'no'"),
        (dict(generator=0), TypeError, "generator must be a torch.Generator or None, got 0"),
    ],
    ids=lambda value: str(value)[:40],
)
def test_make_canvases_refuses_bad_arguments_by_name(test_digits, arguments, error, words):
    arguments = {"source": test_digits, "count": 2, **arguments}
    with pytest.raises(error, match=words):
        make_canvases(**arguments)


@pytest.mark.parametrize("size", [0, 1], ids=["an empty source", "one label, two digits"])
def test_a_source_without_enough_labels_is_refused_by_name(size):
    source = Digits(torch.rand(size, 1, 8, 8), torch.full((size,), 3))
    with pytest.raises(ValueError, match="digits_per_canvas"):
        make_canvases(source, 1, 2)


def test_a_source_of_images_that_are_not_8_by_8_is_refused_by_name():
    source = Digits(torch.rand(3, 1, 16, 16), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="8"):
        make_canvases(source, 1, 2)


# The patches of each cell


@pytest.mark.parametrize("patch_size", [4, 2, 1, 8])
def test_cell_patches_names_exactly_the_patches_inside_each_cell(patch_size):
    grid = 3
    canvas = torch.arange(grid * grid).reshape(grid, grid)  # each cell holds its own index
    canvas = canvas.repeat_interleave(8, 0).repeat_interleave(8, 1)[None, None].float()
    patches = patchify(canvas, patch_size)[0]  # (n, p * p)
    assert (patches == patches[:, :1]).all()  # no patch straddles two cells
    for cell in range(grid * grid):
        inside = (patches[:, 0] == cell).nonzero().flatten()
        named = cell_patches(cell, grid, patch_size)
        assert named.dtype == torch.int64
        assert sorted(named.tolist()) == inside.tolist()


@pytest.mark.parametrize(
    ("cell", "grid", "patch_size", "words"),
    [
        (9, 3, 4, "cell must be one of the grid's cells 0..8, got 9"),
        (-1, 3, 4, "cell must be a whole number >= 0, got -1"),
        (0, 3, 3, "patch_size must divide a cell's 8 pixels, got 3"),
        (0, 3, 16, "patch_size must divide a cell's 8 pixels, got 16"),
        (0, 0, 4, "grid must be a whole number >= 1"),
        (True, 3, 4, "cell must be a whole number"),
        (0, 3, 0, "patch_size must be a whole number >= 1"),
    ],
)
def test_cell_patches_refuses_bad_arguments_by_name(cell, grid, patch_size, words):
    with pytest.raises(ValueError, match=words):
        cell_patches(cell, grid, patch_size)


# Hostile input (issue 24's review): each refused early, by name


@pytest.mark.parametrize("path", [None, 5, ["data/digits.csv.gz"]], ids=str)
def test_load_digits_refuses_a_path_that_is_not_one_by_name(path):
    with pytest.raises(TypeError, match="path must be a file path"):
        load_digits(path)


@pytest.mark.parametrize(
    ("rows", "cols", "d_model"), [(10**12, 10**12, 8), (2, 2, 10**15), (10**6, 10**6, 4)]
)
def test_sinusoidal_2d_refuses_sizes_beyond_memory_before_building(rows, cols, d_model):
    with pytest.raises(ValueError, match=r"more than 2\^28"):
        sinusoidal_2d(rows, cols, d_model)


def _four_digits(images=None, labels=None) -> Digits:
    images = torch.full((4, 1, 8, 8), 0.5) if images is None else images
    return Digits(images, torch.tensor([1, 2, 3, 4]) if labels is None else labels)


@pytest.mark.parametrize(
    ("source", "words"),
    [
        (_four_digits(labels=torch.tensor([0.5, 1.5, 2.5, 3.5])), "integer digit labels"),
        (_four_digits(labels=torch.tensor([10, 11, 12, 13])), r"0..9, got 10..13"),
        (_four_digits(labels=torch.tensor([-1, 2, 3, 4])), r"0..9, got -1..4"),
        (_four_digits(labels=torch.tensor([True, False, True, False])), "integer digit labels"),
        (_four_digits(labels=[1, 2, 3, 4]), r"labels must be a tensor \(4,\)"),
        (_four_digits(images=torch.full((4, 1, 8, 8), float("nan"))), "NaN or inf"),
        (_four_digits(images=torch.ones(4, 1, 8, 8, dtype=torch.complex64)), "complex64"),
        (_four_digits(images=torch.ones(4, 1, 8, 8, dtype=torch.long)), "int64"),
        (_four_digits(images=np.zeros((4, 1, 8, 8))), r"images must be a tensor \(N, 1, 8, 8\)"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_a_damaged_source_is_refused_before_it_makes_canvases(source, words):
    with pytest.raises(ValueError, match=words):
        make_canvases(source, 2, 3, distinct=False)
    with pytest.raises(ValueError, match=words):
        check_digits(source)


@pytest.mark.parametrize(("count", "grid"), [(10**15, 3), (2, 10**7)])
def test_canvases_beyond_memory_are_refused_before_building(test_digits, count, grid):
    with pytest.raises(ValueError, match=r"more than 2\^28"):
        make_canvases(test_digits, count, 1, grid)


def test_check_canvases_takes_what_make_canvases_makes(test_digits):
    canvases = make_canvases(test_digits, 3, (1, 4), generator=torch.Generator().manual_seed(0))
    assert check_canvases(canvases) is canvases
    assert check_digits(test_digits) is test_digits


def _damaged_canvases(**change) -> Canvases:
    digits = torch.full((2, 9), -1)
    digits[:, 4] = 7
    parts = {"images": torch.zeros(2, 1, 24, 24), "digits": digits, "grid": 3, **change}
    return Canvases(parts["images"], parts["digits"], parts["grid"])


@pytest.mark.parametrize(
    ("canvases", "error", "words"),
    [
        ((torch.zeros(2, 1, 24, 24), torch.zeros(2, 9)), TypeError, "must be Canvases"),
        (_damaged_canvases(grid=3.0), ValueError, "canvases.grid must be a whole number"),
        (_damaged_canvases(grid=2), ValueError, r"digits must be a tensor \(B, 4\)"),
        (_damaged_canvases(digits=torch.zeros(9)), ValueError, r"digits must be a tensor \(B, 9\)"),
        (_damaged_canvases(digits=torch.zeros(2, 9)), ValueError, "integer digit labels"),
        (_damaged_canvases(digits=torch.full((2, 9), 10)), ValueError, r"-1..9, got 10..10"),
        (_damaged_canvases(digits=torch.full((2, 9), -5)), ValueError, r"-1..9, got -5..-5"),
        (_damaged_canvases(images=torch.zeros(1, 1, 24, 24)), ValueError, r"\(2, 1, 24, 24\)"),
        (_damaged_canvases(images=torch.zeros(2, 1, 24, 24).numpy()), ValueError, "tensor"),
        (_damaged_canvases(images=torch.zeros(2, 1, 24, 24).long()), ValueError, "int64"),
        (_damaged_canvases(images=torch.full((2, 1, 24, 24), float("inf"))), ValueError, "NaN"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_check_canvases_names_what_is_damaged(canvases, error, words):
    with pytest.raises(error, match=words):
        check_canvases(canvases)


# A learner's drawing as a canvas (the drawing pad of chapter 14)


def inked_by_distance(strokes: list, size: int, radius: float) -> np.ndarray:
    """The reference: every cell centre's exact distance to every segment (a lone point a
    segment of length 0), on the whole grid at once; True where it is within the radius."""
    centres = np.stack(np.meshgrid(np.arange(size) + 0.5, np.arange(size) + 0.5), -1)  # [y, x]
    inked = np.zeros((size, size), dtype=bool)
    for stroke in strokes:
        points = np.clip(np.asarray(stroke, dtype=float), 0, size)
        pairs = zip(points[:-1], points[1:], strict=True) if len(points) > 1 else [points[[0, 0]]]
        for a, b in pairs:
            direction = b - a
            along = ((centres - a) @ direction) / max(direction @ direction, 1e-12)
            nearest = a + np.clip(along, 0, 1)[..., None] * direction
            inked |= ((centres - nearest) ** 2).sum(-1) <= radius**2
    return inked


def random_strokes(seed: int, strokes: int, points: int, spread: float) -> list:
    """Strokes of random walks, some of their points off the 96 x 96 grid."""
    generator = np.random.default_rng(seed)
    drawing = []
    for _ in range(strokes):
        start = generator.uniform(-10, 106, 2)
        steps = generator.normal(0, spread, (points - 1, 2))
        drawing.append(np.vstack([start, start + steps.cumsum(0)]).tolist())
    return drawing


@pytest.mark.parametrize(
    ("seed", "strokes", "points", "spread"),
    [(0, 1, 30, 1.0), (1, 3, 12, 6.0), (2, 2, 5, 60.0), (3, 4, 1, 0.0), (4, 1, 200, 0.3)],
)
@pytest.mark.parametrize("radius", [PEN_RADIUS, 1.0, 0.5, 4.0])
def test_rasterise_strokes_inks_the_cells_within_the_pen_of_each_segment(
    seed, strokes, points, spread, radius
):
    drawing = random_strokes(seed, strokes, points, spread)
    inked = rasterise_strokes(drawing, 96, radius)
    assert inked.dtype == torch.bool and inked.shape == (96, 96)
    np.testing.assert_array_equal(inked.numpy(), inked_by_distance(drawing, 96, radius))


def test_a_dot_inks_the_cells_whose_centres_lie_within_the_pen():
    inked = rasterise_strokes([[[10.0, 20.0]]], 96, 1.5)  # centres 9.5, 10.5 across; 19.5, 20.5
    assert inked.nonzero().tolist() == [[19, 9], [19, 10], [20, 9], [20, 10]]  # [row, column]
    wide = rasterise_strokes([[[10.0, 20.0]]], 96, 2.5)  # corners at 2.12; (2.5, 0.5) at 2.55
    square = torch.zeros(96, 96, dtype=torch.bool)
    square[18:22, 8:12] = True
    assert torch.equal(wide, square)


def test_no_strokes_and_empty_strokes_are_a_blank_canvas():
    for blank in ([], [[]], [[], []], ()):
        assert not rasterise_strokes(blank).any()
        counts = ink_counts(rasterise_strokes(blank))
        assert counts.shape == (1, 1, 24, 24) and counts.dtype == torch.float64
        assert not counts.any()


def test_points_off_the_grid_are_clamped_to_its_edge():
    off = rasterise_strokes([[[-50.0, 10.0], [200.0, 10.0]], [[-3, -3]], [[1e9, 1e9]]])
    on = rasterise_strokes([[[0.0, 10.0], [96.0, 10.0]], [[0, 0]], [[96, 96]]])
    assert torch.equal(off, on) and on[10].all() and on[0, 0] and on[95, 95]
    assert check_strokes([[[-1, 5.5], [97, 1e300]]], 96) == [[(0.0, 5.5), (96.0, 96.0)]]


def test_ink_counts_counts_each_block_as_the_uci_digits_were_made():
    bitmap = torch.zeros(96, 96, dtype=torch.bool)
    bitmap[:4, :4] = True  # a full block
    bitmap[4, 4:8] = True  # a row of the next block down and across
    bitmap[93, 95] = True  # one cell of the last block
    counts = ink_counts(bitmap)
    assert counts.shape == (1, 1, 24, 24) and counts.dtype == torch.float64
    assert counts[0, 0, 0, 0] == 16 and counts[0, 0, 1, 1] == 4 and counts[0, 0, 23, 23] == 1
    assert counts.sum() == bitmap.sum() == 21 and counts.max() <= 16
    assert (ink_counts(torch.ones(96, 96, dtype=torch.bool)) == 16).all()
    assert ink_counts(bitmap, block=2).shape == (1, 1, 48, 48)


def test_a_stroke_in_one_cell_inks_only_that_cell_of_the_canvas():
    seven = [[[38.0, 37.0], [58.0, 37.0], [44.0, 60.0]]]  # inside cell 4: x and y 32..64
    counts = ink_counts(rasterise_strokes(seven))[0, 0]  # (24, 24)
    cell = torch.zeros(24, 24, dtype=torch.bool)
    cell[8:16, 8:16] = True
    assert counts[cell].sum() > 0 and counts[~cell].sum() == 0


@pytest.mark.parametrize(
    ("strokes", "error", "words"),
    [
        (
            "7",
            TypeError,
            "strokes must be a list of strokes, each a list of \\[x, y\\] points, got str",
        ),
        ({"strokes": []}, TypeError, "a list of strokes.*got dict"),
        (None, TypeError, "got NoneType"),
        (np.zeros((1, 2, 2)), TypeError, "got ndarray"),
        ([1, 2], TypeError, "stroke 0 is a int"),
        ([[[1, 2]], "ab"], TypeError, "stroke 1 is a str"),
        ([[[1, 2, 3]]], TypeError, "each point must be \\[x, y\\], two numbers; stroke 0 holds"),
        ([[[1]]], TypeError, "each point must be \\[x, y\\]"),
        ([[["1", "2"]]], TypeError, "each point must be \\[x, y\\]"),
        ([[[True, 2]]], TypeError, "each point must be \\[x, y\\]"),
        ([[[None, 2]]], TypeError, "each point must be \\[x, y\\]"),
        ([[[1, 2]], [[float("nan"), 2]]], ValueError, "two finite numbers; stroke 1 holds \\[nan"),
        ([[[1, float("inf")]]], ValueError, "two finite numbers"),
        ([[[10**400, 2]]], ValueError, "two finite numbers"),
        ([[[1, 2]] * (MOST_STROKE_POINTS + 1)], ValueError, "at most 20,000 points in all"),
        ([[[1, 2]] * 15_000, [[1, 2]] * 6_000], ValueError, "at most 20,000 points.*stroke 1"),
        ([[]] * (MOST_STROKE_POINTS + 1), ValueError, "at most 20,000 strokes, got 20,001"),
    ],
    ids=lambda value: str(value)[:30],
)
def test_hostile_strokes_are_refused_by_name(strokes, error, words):
    with pytest.raises(error, match=words):
        rasterise_strokes(strokes)


def _pieces_allowed() -> int:
    """Segments 2 cells long (one piece each) the default pen may ink: MOST_PEN_CELLS over the
    cells examined round each piece, 2 (reach + 1) + 1 across."""
    window = 2 * (math.ceil(1 + PEN_RADIUS) + 1) + 1
    return MOST_PEN_CELLS // window**2


def test_the_longest_drawing_allowed_is_rasterised():
    zigzag = [[[40, 40], [42, 40]] * (_pieces_allowed() // 2) + [[40, 40]]]
    assert len(zigzag[0]) - 1 == _pieces_allowed()
    inked = rasterise_strokes(zigzag)
    np.testing.assert_array_equal(inked.numpy(), inked_by_distance([zigzag[0][:3]], 96, PEN_RADIUS))


@pytest.mark.parametrize(
    ("strokes", "size"),
    [
        ([[[40, 40], [42, 40]] * (_pieces_allowed() // 2) + [[40, 40], [42, 40]]], 96),
        ([[[0, 0], [16384, 16384]] * 10000], 16384),  # 231 M pieces: 1.85 GB, then refused
        ([[[0, 0], [4096, 4096]]] * 10000, 4096),
        ([[[0, 0], [96, 96]] * 10000], 96),  # took 7.5 s
    ],
    ids=["one piece more", "16384", "4096", "96"],
)
def test_strokes_too_long_to_ink_in_a_second_are_refused_by_their_length(strokes, size):
    with pytest.raises(ValueError, match=r"the strokes are [\d,]+ cells long in all"):
        rasterise_strokes(strokes, size)


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"size": 0}, "size must be a whole number >= 1, got 0"),
        ({"size": 96.0}, "size must be a whole number"),
        ({"size": 10**6}, "more than 2\\^28"),
        ({"pen_radius": 0}, "pen_radius"),
        ({"pen_radius": -1.0}, "pen_radius"),
        ({"pen_radius": float("nan")}, "pen_radius"),
    ],
    ids=str,
)
def test_rasterise_strokes_names_a_bad_grid_or_pen(arguments, words):
    with pytest.raises(ValueError, match=words):
        rasterise_strokes([[[1, 2]]], **arguments)


@pytest.mark.parametrize(
    ("bitmap", "block", "words"),
    [
        (np.zeros((96, 96), dtype=bool), 4, "torch.from_numpy"),
        (torch.zeros(96, 96), 4, "bool tensor \\(H, W\\), got torch.float32"),
        (torch.zeros(1, 96, 96, dtype=torch.bool), 4, "of shape \\(1, 96, 96\\)"),
        (torch.zeros(96, 90, dtype=torch.bool), 4, "width 90 must be multiples of block 4"),
        (torch.zeros(96, 96, dtype=torch.bool), 0, "block must be a whole number >= 1"),
    ],
    ids=str,
)
def test_ink_counts_names_a_bad_bitmap(bitmap, block, words):
    with pytest.raises(ValueError, match=words):
        ink_counts(bitmap, block)


def test_many_dots_are_named_as_dots_not_as_a_length():
    """5,000 dots have no length, yet each is inked as a piece: the message counts them."""
    from helpers.vision import rasterise_strokes

    dots = [[[i % 96, (i * 37) % 96]] for i in range(5000)]
    with pytest.raises(ValueError, match=r"in 5,000 segments and dots .* draw fewer or shorter"):
        rasterise_strokes(dots)
