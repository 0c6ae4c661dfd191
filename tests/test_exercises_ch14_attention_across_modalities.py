"""Chapter 14's checkers: its solutions, right answers written in other styles, and typical
wrong answers, each refused with the message that names its mistake."""

import math
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from helpers.exercises import check_attention_centroid, check_patchify, check_sinusoidal_2d
from helpers.exercises.ch14_attention_across_modalities import (
    PATCH_SIZES,
    SINUSOIDAL_2D_SIZES,
    _centroid_mistakes,
    _patchify_mistakes,
    _sinusoidal_2d_mistakes,
    centroid_cases,
    patchify_cases,
)
from helpers.exercises.ch14_attention_across_modalities import (
    attention_centroid as reference_centroid,
)
from helpers.exercises.framework import TORCH_GLOBAL_SETTINGS_NAMED
from helpers.positional import sinusoidal_encoding
from helpers.vision import patchify as helpers_patchify
from helpers.vision import sinusoidal_2d as helpers_sinusoidal_2d
from solutions.ch14_attention_across_modalities import (
    attention_centroid,
    patchify,
    sinusoidal_2d,
)

CHECKERS = {
    "patchify": (check_patchify, patchify),
    "2-D sinusoidal encoding": (check_sinusoidal_2d, sinusoidal_2d),
    "attention centroid": (check_attention_centroid, attention_centroid),
}


# 1. Patchify: typical wrong answers


def _grid(images, p):
    """(B, C, rows, p, cols, p) and the sizes."""
    batch, channels, height, width = images.shape
    return images.reshape(batch, channels, height // p, p, width // p, p), batch, channels


def patchify_down_the_columns_first(images, p):
    grid, batch, channels = _grid(images, p)
    return grid.permute(0, 4, 2, 1, 3, 5).reshape(batch, -1, channels * p * p)


def patchify_channels_last(images, p):
    grid, batch, channels = _grid(images, p)
    return grid.permute(0, 2, 4, 3, 5, 1).reshape(batch, -1, channels * p * p)


def patchify_column_by_column_within_a_patch(images, p):
    grid, batch, channels = _grid(images, p)
    return grid.permute(0, 2, 4, 1, 5, 3).reshape(batch, -1, channels * p * p)


def patchify_by_a_plain_reshape(images, p):
    batch, channels = images.shape[:2]
    return images.reshape(batch, -1, channels * p * p)


def patchify_by_unfold_without_the_transpose(images, p):
    return F.unfold(images, p, stride=p)


def patchify_by_unfold_without_the_stride(images, p):
    return F.unfold(images, p).transpose(1, 2)


def patchify_splitting_each_side_the_wrong_way(images, p):
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, p, height // p, p, width // p)
    return grid.permute(0, 3, 5, 1, 2, 4).reshape(batch, -1, channels * p * p)


def patchify_as_a_grid(images, p):
    grid, batch, channels = _grid(images, p)
    return grid.permute(0, 2, 4, 1, 3, 5).flatten(3)


def patchify_with_view_after_the_permute(images, p):
    grid, batch, channels = _grid(images, p)
    return grid.permute(0, 2, 4, 1, 3, 5).view(batch, -1, channels * p * p)


def patchify_with_the_helper(images, p):
    return helpers_patchify(images, p)


def patchify_clamping_in_place(images, p):
    return patchify(images.clamp_(0, 1), p)


def patchify_detached(images, p):
    return patchify(images.detach(), p)


def patchify_in_float32(images, p):
    return patchify(images.float(), p)


# 2. The 2-D sinusoidal encoding: typical wrong answers


def _row_and_column(rows, cols):
    return torch.arange(rows).repeat_interleave(cols), torch.arange(cols).repeat(rows)


def sinusoidal_2d_column_first(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    half = d_model // 2
    return torch.cat(
        [sinusoidal_encoding(cols, half)[col], sinusoidal_encoding(rows, half)[row]], 1
    )


def sinusoidal_2d_of_the_flattened_index(rows, cols, d_model):
    return sinusoidal_encoding(rows * cols, d_model)


def sinusoidal_2d_interleaved(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    half = d_model // 2
    encoding = torch.empty(rows * cols, d_model)
    by_row, by_col = sinusoidal_encoding(rows, half)[row], sinusoidal_encoding(cols, half)[col]
    encoding[:, 0::4], encoding[:, 1::4] = by_row[:, 0::2], by_row[:, 1::2]  # row's (sin, cos)
    encoding[:, 2::4], encoding[:, 3::4] = by_col[:, 0::2], by_col[:, 1::2]  # column's
    return encoding


def sinusoidal_2d_with_the_full_width_frequencies(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    half = d_model // 2
    frequencies = 10000 ** (-torch.arange(0, half, 2) / d_model)  # BUG: d_model, not d_model/2

    def encode(positions):
        angles = positions[:, None] * frequencies  # (n, half / 2)
        return torch.stack([angles.sin(), angles.cos()], -1).flatten(1)

    return torch.cat([encode(row), encode(col)], 1).float()


def sinusoidal_2d_down_the_columns_first(rows, cols, d_model):
    col, row = _row_and_column(cols, rows)  # BUG: patch k in row k % rows
    half = d_model // 2
    return torch.cat(
        [sinusoidal_encoding(rows, half)[row], sinusoidal_encoding(cols, half)[col]], 1
    )


def sinusoidal_2d_added(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    return sinusoidal_encoding(rows, d_model)[row] + sinusoidal_encoding(cols, d_model)[col]


def sinusoidal_2d_as_a_grid(rows, cols, d_model):
    return sinusoidal_2d(rows, cols, d_model).reshape(rows, cols, d_model)


def sinusoidal_2d_in_float64(rows, cols, d_model):
    return sinusoidal_2d(rows, cols, d_model).double()


def sinusoidal_2d_with_the_helper(rows, cols, d_model):
    return helpers_sinusoidal_2d(rows, cols, d_model)


# 3. The attention's centroid: typical wrong answers


def _centres(grid_size, p, dtype, offset=None):
    rows, cols = grid_size
    row, col = _row_and_column(rows, cols)
    offset = (p - 1) / 2 if offset is None else offset
    return torch.stack([row, col], -1).to(dtype) * p + offset


def centroid_as_x_y(weights, grid_size, p):
    return attention_centroid(weights, grid_size, p)[..., [1, 0]]


def centroid_of_the_corners(weights, grid_size, p):
    return weights @ _centres(grid_size, p, weights.dtype, 0) / weights.sum(-1, keepdim=True)


def centroid_half_a_pixel_too_far(weights, grid_size, p):
    return weights @ _centres(grid_size, p, weights.dtype, p / 2) / weights.sum(-1, keepdim=True)


def centroid_of_the_patch_indices(weights, grid_size, p):
    return weights @ _centres(grid_size, 1, weights.dtype, 0) / weights.sum(-1, keepdim=True)


def centroid_in_column_major_order(weights, grid_size, p):
    rows, cols = grid_size
    index = torch.arange(rows * cols)
    centres = torch.stack([index % rows, index // rows], -1).to(weights.dtype) * p + (p - 1) / 2
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_not_divided_by_the_total(weights, grid_size, p):
    return weights @ _centres(grid_size, p, weights.dtype)


def centroid_as_a_plain_mean(weights, grid_size, p):
    return (weights[..., None] * _centres(grid_size, p, weights.dtype)).mean(-2)


def centroid_of_the_centres_alone(weights, grid_size, p):
    centre = _centres(grid_size, p, weights.dtype).mean(0)
    return centre.expand(*weights.shape[:-1], 2) + 0 * weights.sum(-1, keepdim=True)


def centroid_with_the_grid_read_as_cols_rows(weights, grid_size, p):
    cols, rows = grid_size
    return attention_centroid(weights, (rows, cols), p)


def centroid_stacked_first(weights, grid_size, p):
    centroid = attention_centroid(weights, grid_size, p)
    return torch.stack([centroid[..., 0], centroid[..., 1]])


def centroid_with_float32_centres(weights, grid_size, p):
    return weights @ _centres(grid_size, p, torch.float32) / weights.sum(-1, keepdim=True)


def centroid_normalising_in_place(weights, grid_size, p):
    weights /= weights.sum(-1, keepdim=True)
    return weights @ _centres(grid_size, p, weights.dtype)


def centroid_through_numpy(weights, grid_size, p):
    centres = _centres(grid_size, p, torch.float64).numpy()
    w = weights.detach().numpy()
    return torch.from_numpy(w @ centres / w.sum(-1, keepdims=True)).to(weights.dtype)


# Regressions from a learner's and a hostile pass: mistakes answered by the general hint only,
# an error without advice, and torch's grad mode switched off for good


def patchify_reading_the_sides_as_width_height(images, p):
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, width // p, p, height // p, p)  # BUG: (W, H)
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(batch, -1, channels * p * p)


def _sines_and_cosines(positions, width, pair):
    """(n, width): chapter 05's angles for width, each frequency's (sin, cos) made by pair."""
    frequencies = 10000 ** (-torch.arange(0, width, 2, dtype=torch.float64) / width)
    return pair(positions.double()[:, None] * frequencies).float()


def sinusoidal_2d_sines_then_cosines(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)

    def pair(angles):
        return torch.cat([angles.sin(), angles.cos()], -1)  # BUG: not interleaved

    half = d_model // 2
    return torch.cat([_sines_and_cosines(row, half, pair), _sines_and_cosines(col, half, pair)], 1)


def sinusoidal_2d_cos_then_sin(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)

    def pair(angles):
        return torch.stack([angles.cos(), angles.sin()], -1).flatten(1)  # BUG: (cos, sin)

    half = d_model // 2
    return torch.cat([_sines_and_cosines(row, half, pair), _sines_and_cosines(col, half, pair)], 1)


def centroid_divided_by_every_querys_total(weights, grid_size, p):
    return weights @ _centres(grid_size, p, weights.dtype) / weights.sum()


def centroid_divided_without_keepdim(weights, grid_size, p):
    return weights @ _centres(grid_size, p, weights.dtype) / weights.sum(-1)


def centroid_with_gradients_switched_off(weights, grid_size, p):
    torch.set_grad_enabled(False)  # BUG: for all of torch, and never switched back on
    return attention_centroid(weights, grid_size, p)


WRONG = [
    ("patchify", patchify_down_the_columns_first, "the patches run top to bottom first"),
    ("patchify", patchify_channels_last, "flattened in (p, p, C) order, channels last"),
    ("patchify", patchify_column_by_column_within_a_patch, "flattened column by column"),
    ("patchify", patchify_by_a_plain_reshape, "a plain reshape without the permute"),
    ("patchify", patchify_by_unfold_without_the_transpose, "F.unfold's (B, C*p*p, n) without"),
    ("patchify", patchify_by_unfold_without_the_stride, "F.unfold without stride=p slides"),
    ("patchify", patchify_splitting_each_side_the_wrong_way, "splits each side as (p, H/p)"),
    ("patchify", patchify_as_a_grid, "returns the grid of patches (B, rows, cols, C*p*p)"),
    ("patchify", patchify_with_view_after_the_permute, ".view needs memory laid out in order"),
    ("patchify", patchify_with_the_helper, "calls helpers.vision.patchify"),
    ("patchify", patchify_clamping_in_place, "runs an in-place operation on its input `images`"),
    ("patchify", patchify_detached, "no gradient flows back to the inputs"),
    ("patchify", patchify_in_float32, "dtype torch.float32, expected torch.float64"),
    ("2-D sinusoidal encoding", sinusoidal_2d_column_first, "the halves are swapped"),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_of_the_flattened_index,
        "chapter 05's 1-D encoding of the patch's index r * cols + c",
    ),
    ("2-D sinusoidal encoding", sinusoidal_2d_interleaved, "(sin, cos) pairs are interleaved"),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_with_the_full_width_frequencies,
        "each half's frequencies are 10000^(-2j/d_model), the fastest half of a d_model-wide",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_down_the_columns_first,
        "(the patches are in column-major order",  # named alone where the grid is not square
    ),
    ("2-D sinusoidal encoding", sinusoidal_2d_added, "adds a d_model-wide encoding of the row"),
    ("2-D sinusoidal encoding", sinusoidal_2d_as_a_grid, "returns the grid (rows, cols, d_"),
    ("2-D sinusoidal encoding", sinusoidal_2d_in_float64, "returned float64: return float32"),
    ("2-D sinusoidal encoding", sinusoidal_2d_with_the_helper, "calls helpers.vision.sinusoidal"),
    ("attention centroid", centroid_as_x_y, "the two coordinates come out swapped, (column,"),
    ("attention centroid", centroid_of_the_corners, "places each patch at its top-left corner"),
    ("attention centroid", centroid_half_a_pixel_too_far, "at r*p + p/2, half a pixel too far"),
    ("attention centroid", centroid_of_the_patch_indices, "returns patch indices (r, c)"),
    (
        "attention centroid",
        centroid_in_column_major_order,
        "(reads the patches in column-major order",  # named alone where the grid is not square
    ),
    ("attention centroid", centroid_not_divided_by_the_total, "does not divide by the total"),
    ("attention centroid", centroid_not_divided_by_the_total, "changes no value but does change"),
    ("attention centroid", centroid_as_a_plain_mean, "divides by the number of patches"),
    ("attention centroid", centroid_of_the_centres_alone, "ignores the weights"),
    ("attention centroid", centroid_with_the_grid_read_as_cols_rows, "reads grid_size as (cols"),
    ("attention centroid", centroid_stacked_first, "stacks (row, column) along the first axis"),
    ("attention centroid", centroid_with_float32_centres, "build the centres with dtype=weights"),
    ("attention centroid", centroid_normalising_in_place, "changes its input `weights` in place"),
    ("attention centroid", centroid_through_numpy, "no gradient flows back to the inputs"),
    ("patchify", patchify_reading_the_sides_as_width_height, "reads the image's sides as (W, H)"),
    ("2-D sinusoidal encoding", sinusoidal_2d_sines_then_cosines, "its sines first, then its"),
    ("2-D sinusoidal encoding", sinusoidal_2d_cos_then_sin, "each (sin, cos) pair is written"),
    (
        "attention centroid",
        centroid_divided_by_every_querys_total,
        "divides by the total of every query's weights together",
    ),
    ("attention centroid", centroid_divided_without_keepdim, "keep it with keepdim=True"),
    (
        "attention centroid",
        centroid_with_gradients_switched_off,
        "leaves gradients switched off for all of torch",
    ),
]


# Right answers written in other styles: each must be accepted.


def patchify_by_unfold(images, p):
    return F.unfold(images, kernel_size=p, stride=p).transpose(1, 2)


def patchify_by_a_loop(images, p):
    height, width = images.shape[-2:]
    patches = [
        images[:, :, top : top + p, left : left + p].flatten(1)  # (B, C p p)
        for top in range(0, height, p)
        for left in range(0, width, p)
    ]
    return torch.stack(patches, dim=1)


def patchify_by_tensor_unfold(images, p):
    windows = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, rows, cols, p, p)
    return windows.permute(0, 2, 3, 1, 4, 5).flatten(3).flatten(1, 2)


def patchify_by_einsum_and_flatten(images, p):
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, height // p, p, width // p, p)
    return torch.einsum("bcrhsw->brschw", grid).flatten(3).flatten(1, 2)


def sinusoidal_2d_from_the_formula(rows, cols, d_model):
    half = d_model // 2
    row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    frequencies = 10000 ** (-torch.arange(0, half, 2, dtype=torch.float64) / half)

    def encode(positions):  # (n,) -> (n, half), sin and cos alternating
        angles = positions.flatten()[:, None].double() * frequencies
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)

    return torch.cat([encode(row), encode(col)], dim=1).float()


def sinusoidal_2d_by_a_loop(rows, cols, d_model):
    half = d_model // 2
    by_row, by_col = sinusoidal_encoding(rows, half), sinusoidal_encoding(cols, half)
    encoding = torch.zeros(rows * cols, d_model)
    for r in range(rows):
        for c in range(cols):
            encoding[r * cols + c, :half] = by_row[r]
            encoding[r * cols + c, half:] = by_col[c]
    return encoding


def sinusoidal_2d_by_expanding(rows, cols, d_model):
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half)[:, None, :].expand(-1, cols, -1)
    by_col = sinusoidal_encoding(cols, half)[None, :, :].expand(rows, -1, -1)
    return torch.cat([by_row, by_col], dim=-1).reshape(rows * cols, d_model)


def centroid_by_a_loop(weights, grid_size, p):
    rows, cols = grid_size
    total = torch.zeros(*weights.shape[:-1], 2, dtype=weights.dtype)
    for k in range(rows * cols):
        r, c = divmod(k, cols)
        centre = torch.tensor([r * p + (p - 1) / 2, c * p + (p - 1) / 2], dtype=weights.dtype)
        total = total + weights[..., k, None] * centre
    return total / weights.sum(-1, keepdim=True)


def centroid_by_einsum_after_normalising(weights, grid_size, p):
    rows, cols = grid_size
    weights = weights / weights.sum(-1, keepdim=True)
    grid = weights.unflatten(-1, (rows, cols))  # (..., rows, cols)
    centre_rows = torch.arange(rows, dtype=weights.dtype) * p + (p - 1) / 2
    centre_cols = torch.arange(cols, dtype=weights.dtype) * p + (p - 1) / 2
    return torch.stack(
        [
            torch.einsum("...rc,r->...", grid, centre_rows),
            torch.einsum("...rc,c->...", grid, centre_cols),
        ],
        dim=-1,
    )


def centroid_over_the_pixels(weights, grid_size, p):
    """The weights spread over each patch's pixels, then the mean of the pixels' coordinates."""
    rows, cols = grid_size
    pixels = weights.unflatten(-1, (rows, cols))
    pixels = pixels.repeat_interleave(p, dim=-2).repeat_interleave(p, dim=-1)  # (..., H, W)
    y = torch.arange(rows * p, dtype=weights.dtype)
    x = torch.arange(cols * p, dtype=weights.dtype)
    total = pixels.sum((-2, -1))
    return torch.stack(
        [(pixels.sum(-1) * y).sum(-1) / total, (pixels.sum(-2) * x).sum(-1) / total], dim=-1
    )


RIGHT = [
    ("patchify", patchify_by_unfold),
    ("patchify", patchify_by_a_loop),
    ("patchify", patchify_by_tensor_unfold),
    ("patchify", patchify_by_einsum_and_flatten),
    ("2-D sinusoidal encoding", sinusoidal_2d_from_the_formula),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_a_loop),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_expanding),
    ("attention centroid", centroid_by_a_loop),
    ("attention centroid", centroid_by_einsum_after_normalising),
    ("attention centroid", centroid_over_the_pixels),
]


# A learner's pass (issue 31): answers written from the prompts alone, in the styles a learner
# reaches for. Each right one must be accepted, each wrong one refused with its mistake named.


def _patch_grid(images, p):
    """(B, rows, cols, C, p, p): the blocks of each image, patch by patch."""
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, height // p, p, width // p, p)
    return grid.permute(0, 2, 4, 1, 3, 5)


def patchify_image_by_image(images, p):
    return torch.stack([patchify(image[None], p)[0] for image in images])


def patchify_with_contiguous_views(images, p):
    batch, channels, height, width = images.shape
    grid = images.contiguous().view(batch, channels, height // p, p, width // p, p)
    return grid.permute(0, 2, 4, 1, 3, 5).contiguous().view(batch, -1, channels * p * p)


def patchify_by_unflatten(images, p):
    height, width = images.shape[-2:]
    grid = images.unflatten(2, (height // p, p)).unflatten(4, (width // p, p))
    return grid.permute(0, 2, 4, 1, 3, 5).flatten(3).flatten(1, 2)


def patchify_by_split(images, p):
    strips = images.split(p, dim=2)
    return torch.stack([block.flatten(1) for strip in strips for block in strip.split(p, 3)], 1)


def patchify_by_cat(images, p):
    batch = images.shape[0]
    return torch.cat(
        [
            images[:, :, top : top + p, left : left + p].reshape(batch, 1, -1)
            for top in range(0, images.shape[2], p)
            for left in range(0, images.shape[3], p)
        ],
        dim=1,
    )


def patchify_by_indexing(images, p):
    batch, channels, height, width = images.shape
    rows, cols = height // p, width // p
    top = torch.arange(rows).repeat_interleave(cols)[:, None] * p
    left = torch.arange(cols).repeat(rows)[:, None] * p
    down, across = torch.arange(p).repeat_interleave(p)[None], torch.arange(p).repeat(p)[None]
    pixels = (top + down) * width + left + across  # (n, p * p): each patch's pixels, row by row
    blocks = images.flatten(2)[:, :, pixels]  # (B, C, n, p * p)
    return blocks.permute(0, 2, 1, 3).reshape(batch, rows * cols, channels * p * p)


def patchify_by_transposes(images, p):
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, height // p, p, width // p, p)
    grid = grid.transpose(1, 2).transpose(3, 4).transpose(2, 3)  # (B, rows, cols, C, p, p)
    return grid.reshape(batch, -1, channels * p * p)


def patchify_by_movedim(images, p):
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, height // p, p, width // p, p)
    return torch.movedim(grid, (2, 4), (1, 2)).flatten(3).flatten(1, 2)


def patchify_strip_by_strip(images, p):
    batch, channels, height, width = images.shape
    strips = []
    for top in range(0, height, p):
        strip = images[:, :, top : top + p].reshape(batch, channels, p, width // p, p)
        strips.append(strip.permute(0, 3, 1, 2, 4).reshape(batch, width // p, -1))
    return torch.cat(strips, dim=1)


def patchify_by_chunk(images, p):
    rows, cols = images.shape[2] // p, images.shape[3] // p
    blocks = [block for strip in images.chunk(rows, 2) for block in strip.chunk(cols, 3)]
    return torch.stack([block.flatten(1) for block in blocks], 1)


def patchify_by_unfold_and_permute(images, p):
    return F.unfold(images, kernel_size=(p, p), stride=(p, p)).permute(0, 2, 1)


def patchify_for_square_images(images, p):
    batch, channels, height = images.shape[:3]
    side = height // p  # BUG: the width's patches counted from the height
    grid = images.reshape(batch, channels, side, p, side, p).permute(0, 2, 4, 1, 3, 5)
    return grid.reshape(batch, side * side, channels * p * p)


def patchify_stopping_a_row_short(images, p):
    return torch.stack(
        [
            images[:, :, top : top + p, left : left + p].flatten(1)
            for top in range(0, images.shape[2] - p, p)  # BUG: the last row of patches
            for left in range(0, images.shape[3], p)
        ],
        1,
    )


def patchify_stopping_a_column_short(images, p):
    return torch.stack(
        [
            images[:, :, top : top + p, left : left + p].flatten(1)
            for top in range(0, images.shape[2], p)
            for left in range(0, images.shape[3] - p, p)  # BUG: the last column of patches
        ],
        1,
    )


def patchify_merging_the_batch(images, p):
    return _patch_grid(images, p).reshape(-1, images.shape[1] * p * p)


def patchify_of_the_first_image(images, p):
    return patchify(images, p)[0]


def patchify_rebuilt_from_a_list(images, p):
    return torch.tensor(patchify(images, p).tolist(), dtype=images.dtype)


def patchify_of_the_data(images, p):
    return patchify(images.data, p)


def patchify_into_float32_zeros(images, p):
    patches = patchify(images, p)
    out = torch.zeros(patches.shape)  # BUG: float32 whatever the images are
    out[:] = patches
    return out


def patchify_averaging_the_channels(images, p):
    return patchify(images.mean(1, keepdim=True), p)


def patchify_of_the_first_channel(images, p):
    return patchify(images[:, :1], p)


def patchify_as_a_list(images, p):
    return list(patchify(images, p).unbind(1))


def patchify_bottom_up(images, p):
    batch, channels = images.shape[:2]
    return _patch_grid(images, p).flip(1).reshape(batch, -1, channels * p * p)


def sinusoidal_2d_by_meshgrid(rows, cols, d_model):
    half = d_model // 2
    row, col = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    by_row = sinusoidal_encoding(rows, half)[row.flatten()]
    return torch.cat([by_row, sinusoidal_encoding(cols, half)[col.flatten()]], 1)


def sinusoidal_2d_by_cartesian_product(rows, cols, d_model):
    half = d_model // 2
    places = torch.cartesian_prod(torch.arange(rows), torch.arange(cols)).reshape(-1, 2)
    by_row = sinusoidal_encoding(rows, half)[places[:, 0]]
    return torch.cat([by_row, sinusoidal_encoding(cols, half)[places[:, 1]]], 1)


def _sines_and_cosines_filled(positions, width):
    """Chapter 05's encoding written out in float64: sines in 0::2, cosines in 1::2."""
    frequencies = 1 / 10000 ** (torch.arange(0, width, 2, dtype=torch.float64) / width)
    angles = positions.double()[:, None] * frequencies
    encoding = torch.zeros(len(positions), width, dtype=torch.float64)
    encoding[:, 0::2], encoding[:, 1::2] = angles.sin(), angles.cos()
    return encoding


def sinusoidal_2d_by_division_and_remainder(rows, cols, d_model):
    index = torch.arange(rows * cols)
    half = d_model // 2
    return torch.cat(
        [
            _sines_and_cosines_filled(index // cols, half),
            _sines_and_cosines_filled(index % cols, half),
        ],
        1,
    ).float()


def sinusoidal_2d_by_repeat(rows, cols, d_model):
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half).repeat_interleave(cols, dim=0)
    return torch.cat([by_row, sinusoidal_encoding(cols, half).repeat(rows, 1)], dim=1)


def sinusoidal_2d_row_block_by_row_block(rows, cols, d_model):
    half = d_model // 2
    by_col = sinusoidal_encoding(cols, half)
    return torch.cat(
        [torch.cat([row.expand(cols, half), by_col], 1) for row in sinusoidal_encoding(rows, half)]
    )


def sinusoidal_2d_by_kron(rows, cols, d_model):
    half = d_model // 2
    by_row = torch.kron(sinusoidal_encoding(rows, half), torch.ones(cols, 1))
    by_col = torch.kron(torch.ones(rows, 1), sinusoidal_encoding(cols, half))
    return torch.cat([by_row, by_col], 1)


def sinusoidal_2d_stacked_patch_by_patch(rows, cols, d_model):
    by_row = sinusoidal_encoding(rows, d_model // 2)
    by_col = sinusoidal_encoding(cols, d_model // 2)
    return torch.stack(
        [torch.cat([by_row[r], by_col[c]]) for r in range(rows) for c in range(cols)]
    )


def sinusoidal_2d_by_exp_and_log(rows, cols, d_model):
    half = d_model // 2
    rates = torch.exp(torch.arange(0, half, 2).float() * (-math.log(10000.0) / half))

    def encode(positions):
        encoding = torch.zeros(len(positions), half)
        encoding[:, 0::2] = torch.sin(positions[:, None].float() * rates)
        encoding[:, 1::2] = torch.cos(positions[:, None].float() * rates)
        return encoding

    index = torch.arange(rows * cols)
    return torch.cat([encode(index // cols), encode(index % cols)], 1)


def sinusoidal_2d_from_one_longer_table(rows, cols, d_model):
    table = sinusoidal_encoding(max(rows, cols), d_model // 2)  # position r is the same row
    index = torch.arange(rows * cols)
    return torch.cat([table[index // cols], table[index % cols]], 1)


def sinusoidal_2d_into_an_empty_tensor(rows, cols, d_model):
    half = d_model // 2
    encoding = torch.empty(rows * cols, d_model)
    encoding[:, :half] = sinusoidal_encoding(rows, half).repeat_interleave(cols, 0)
    encoding[:, half:] = sinusoidal_encoding(cols, half).repeat(rows, 1)
    return encoding


def sinusoidal_2d_of_the_index_in_each_half(rows, cols, d_model):
    encoding = sinusoidal_encoding(rows * cols, d_model // 2)
    return torch.cat([encoding, encoding], 1)


def sinusoidal_2d_counting_from_one(rows, cols, d_model):
    half = d_model // 2
    index = torch.arange(rows * cols)
    by_row = sinusoidal_encoding(rows + 1, half)[index // cols + 1]
    return torch.cat([by_row, sinusoidal_encoding(cols + 1, half)[index % cols + 1]], 1)


def sinusoidal_2d_of_the_column_twice(rows, cols, d_model):
    column_half = sinusoidal_2d(rows, cols, d_model).chunk(2, dim=1)[1]
    return torch.cat([column_half, column_half], 1)


def sinusoidal_2d_of_the_row_twice(rows, cols, d_model):
    row_half = sinusoidal_2d(rows, cols, d_model).chunk(2, dim=1)[0]
    return torch.cat([row_half, row_half], 1)


def sinusoidal_2d_stacked_below(rows, cols, d_model):
    row_half, column_half = sinusoidal_2d(rows, cols, d_model).chunk(2, dim=1)
    return torch.cat([row_half, column_half], dim=0)  # BUG: side by side is dim=1


def sinusoidal_2d_transposed(rows, cols, d_model):
    return sinusoidal_2d(rows, cols, d_model).T


def sinusoidal_2d_of_sines_only(rows, cols, d_model):
    encoding = sinusoidal_2d(rows, cols, d_model).clone()
    encoding[:, 1::2] = encoding[:, 0::2]  # BUG: the cosines' columns hold the sines again
    return encoding


def sinusoidal_2d_of_the_row_only(rows, cols, d_model):
    encoding = sinusoidal_2d(rows, cols, d_model).clone()
    encoding[:, d_model // 2 :] = 0
    return encoding


def sinusoidal_2d_with_a_float_width(rows, cols, d_model):
    half = d_model / 2  # BUG: a float
    return torch.cat([sinusoidal_encoding(rows, half), sinusoidal_encoding(cols, half)], 1)


def _centres_of(grid_size, p, dtype):
    rows, cols = grid_size
    index = torch.arange(rows * cols)
    return torch.stack([index // cols, index % cols], 1).to(dtype) * p + (p - 1) / 2


def centroid_by_meshgrid(weights, grid_size, p):
    row, col = torch.meshgrid(torch.arange(grid_size[0]), torch.arange(grid_size[1]), indexing="ij")
    centres = (torch.stack([row.flatten(), col.flatten()], 1) * p + (p - 1) / 2).to(weights.dtype)
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_by_marginals(weights, grid_size, p):
    rows, cols = grid_size
    grid = weights.unflatten(-1, (rows, cols))
    total = grid.sum((-2, -1))
    down = torch.arange(rows, dtype=weights.dtype) * p + (p - 1) / 2
    across = torch.arange(cols, dtype=weights.dtype) * p + (p - 1) / 2
    return torch.stack(
        [(grid.sum(-1) * down).sum(-1) / total, (grid.sum(-2) * across).sum(-1) / total], -1
    )


def centroid_by_tensordot(weights, grid_size, p):
    centres = _centres_of(grid_size, p, weights.dtype)
    return torch.tensordot(weights, centres, dims=1) / weights.sum(-1)[..., None]


def centroid_by_broadcasting(weights, grid_size, p):
    centres = _centres_of(grid_size, p, weights.dtype)
    return (weights[..., None] * centres).sum(-2) / weights.sum(-1, keepdim=True)


def centroid_in_float64(weights, grid_size, p):
    return attention_centroid(weights.double(), grid_size, p).to(weights.dtype)


def centroid_of_half_pixel_centres(weights, grid_size, p):
    rows, cols = grid_size
    index = torch.arange(rows * cols, dtype=weights.dtype)
    centres = torch.stack(
        [(torch.floor(index / cols) + 0.5) * p - 0.5, (index % cols + 0.5) * p - 0.5], 1
    )
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_of_l1_normalised_weights(weights, grid_size, p):
    return F.normalize(weights, p=1, dim=-1) @ _centres_of(grid_size, p, weights.dtype)


def centroid_from_a_list_of_centres(weights, grid_size, p):
    rows, cols = grid_size
    centres = torch.tensor(
        [[r * p + (p - 1) / 2, c * p + (p - 1) / 2] for r in range(rows) for c in range(cols)],
        dtype=weights.dtype,
    )
    return torch.matmul(weights, centres) / torch.sum(weights, dim=-1, keepdim=True)


def centroid_half_a_pixel_too_near(weights, grid_size, p):
    centres = _centres_of(grid_size, p, weights.dtype) - 0.5  # BUG: r*p + p/2 - 1
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_of_softmaxed_weights(weights, grid_size, p):
    return weights.softmax(-1) @ _centres_of(grid_size, p, weights.dtype)


def centroid_of_the_most_attended_patch(weights, grid_size, p):
    return _centres_of(grid_size, p, weights.dtype)[weights.argmax(-1)] + 0 * weights[..., :1]


def centroid_rounded(weights, grid_size, p):
    return attention_centroid(weights, grid_size, p).round()


def centroid_with_rows_from_k_over_rows(weights, grid_size, p):
    rows, cols = grid_size
    index = torch.arange(rows * cols)
    centres = torch.stack([index // rows, index % cols], 1).to(weights.dtype) * p + (p - 1) / 2
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_under_no_grad(weights, grid_size, p):
    with torch.no_grad():
        return attention_centroid(weights, grid_size, p)


def centroid_over_a_detached_total(weights, grid_size, p):
    total = weights.sum(-1, keepdim=True).detach()
    return weights @ _centres_of(grid_size, p, weights.dtype) / total


RIGHT += [
    ("patchify", patchify_image_by_image),
    ("patchify", patchify_with_contiguous_views),
    ("patchify", patchify_by_unflatten),
    ("patchify", patchify_by_split),
    ("patchify", patchify_by_cat),
    ("patchify", patchify_by_indexing),
    ("patchify", patchify_by_transposes),
    ("patchify", patchify_by_movedim),
    ("patchify", patchify_strip_by_strip),
    ("patchify", patchify_by_chunk),
    ("patchify", patchify_by_unfold_and_permute),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_meshgrid),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_cartesian_product),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_division_and_remainder),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_repeat),
    ("2-D sinusoidal encoding", sinusoidal_2d_row_block_by_row_block),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_kron),
    ("2-D sinusoidal encoding", sinusoidal_2d_stacked_patch_by_patch),
    ("2-D sinusoidal encoding", sinusoidal_2d_by_exp_and_log),
    ("2-D sinusoidal encoding", sinusoidal_2d_from_one_longer_table),
    ("2-D sinusoidal encoding", sinusoidal_2d_into_an_empty_tensor),
    ("attention centroid", centroid_by_meshgrid),
    ("attention centroid", centroid_by_marginals),
    ("attention centroid", centroid_by_tensordot),
    ("attention centroid", centroid_by_broadcasting),
    ("attention centroid", centroid_in_float64),
    ("attention centroid", centroid_of_half_pixel_centres),
    ("attention centroid", centroid_of_l1_normalised_weights),  # refused before: |w|' at w = 0
    ("attention centroid", centroid_from_a_list_of_centres),
]
WRONG += [
    ("patchify", patchify_for_square_images, "this case's images are not square (H = 8, W = 12)"),
    ("patchify", patchify_stopping_a_row_short, "leaves out the last row of patches"),
    ("patchify", patchify_stopping_a_column_short, "leaves out the last column of patches"),
    ("patchify", patchify_merging_the_batch, "merges the batch and the patches into one axis"),
    ("patchify", patchify_of_the_first_image, "returns the patches of the first image only"),
    ("patchify", patchify_rebuilt_from_a_list, "no gradient flows back to the inputs"),
    ("patchify", patchify_of_the_data, "no gradient flows back to the inputs"),
    ("patchify", patchify_into_float32_zeros, "dtype torch.float32, expected torch.float64"),
    ("patchify", patchify_averaging_the_channels, "averages the channels"),
    ("patchify", patchify_of_the_first_channel, "keeps one channel only"),
    ("patchify", patchify_as_a_list, "returned a list of 4 tensors, expected one tensor"),
    ("patchify", patchify_bottom_up, "the patch rows run bottom to top"),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_of_the_index_in_each_half,
        "encodes the patch's index r * cols + c in each half",
    ),
    ("2-D sinusoidal encoding", sinusoidal_2d_counting_from_one, "counts rows and columns from 1"),
    ("2-D sinusoidal encoding", sinusoidal_2d_of_the_column_twice, "the column in both halves"),
    ("2-D sinusoidal encoding", sinusoidal_2d_of_the_row_twice, "the row in both halves"),
    ("2-D sinusoidal encoding", sinusoidal_2d_stacked_below, "(torch.cat along dim 0)"),
    ("2-D sinusoidal encoding", sinusoidal_2d_transposed, "returns the encoding transposed"),
    ("2-D sinusoidal encoding", sinusoidal_2d_of_sines_only, "writes sin in both columns"),
    ("2-D sinusoidal encoding", sinusoidal_2d_of_the_row_only, "leaves the second half zeros"),
    ("2-D sinusoidal encoding", sinusoidal_2d_with_a_float_width, "d_model / 2 is a float"),
    ("attention centroid", centroid_half_a_pixel_too_near, "half a pixel too near"),
    ("attention centroid", centroid_of_softmaxed_weights, "applies a softmax to the weights"),
    ("attention centroid", centroid_of_the_most_attended_patch, "most attended patch (argmax)"),
    ("attention centroid", centroid_rounded, "rounds the centroid to whole pixels"),
    ("attention centroid", centroid_with_rows_from_k_over_rows, "puts patch k in row k // rows"),
    ("attention centroid", centroid_under_no_grad, "no gradient flows back to the inputs"),
    ("attention centroid", centroid_over_a_detached_total, "weights.sum(-1) (not detached)"),
]


@pytest.mark.parametrize(("exercise", "answer"), RIGHT, ids=[a.__name__ for _, a in RIGHT])
def test_a_right_answer_written_another_way_is_accepted(exercise, answer, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is True and out.startswith("Correct"), out


def test_mistakes_that_coincide_in_a_case_are_named_together(run_checker):
    """On a square grid, (x, y) order and column-major patches give the same centroid."""
    _, out = run_checker(check_attention_centroid, centroid_as_x_y)
    assert "returned as (x, y), or patch k placed in row k % cols, column k // cols" in out
    assert "the centroid is (row, column), the order an image is indexed in, " in out
    square = next(line for line in out.splitlines() if "6 x 6 patches" in line)
    assert "; or reads the patches in column-major order" in square, square


# The cases themselves: every named mistake is either the right answer in that case (then the
# checker leaves it out) or far from it, so no wrong answer passes by rounding.


def far_or_equal(mistakes: dict, right: torch.Tensor) -> None:
    """A mistake that loses precision on the way is close by design: it need only lie outside
    the checkers' tolerance, 1e-5 (a centroid of weights rounded to float16 moves by 5e-5)."""
    for diagnosis, answer in mistakes.items():
        if answer.shape == right.shape:
            error = (answer.double() - right.double()).abs().max()
            same = torch.allclose(answer.double(), right.double(), atol=1e-7)  # as wrong_only
            far = 2e-5 if "significant digits" in diagnosis else 1e-3
            assert same or error > far, (diagnosis, error)


@pytest.mark.parametrize("case", patchify_cases(), ids=lambda case: case[0])
def test_every_patchify_mistake_is_far_from_the_right_answer(case):
    _, images, p = case
    far_or_equal(_patchify_mistakes(images, p), helpers_patchify(images, p))


@pytest.mark.parametrize(
    "index", range(len(SINUSOIDAL_2D_SIZES)), ids=map(str, SINUSOIDAL_2D_SIZES)
)
def test_every_sinusoidal_2d_mistake_is_far_from_the_right_answer(index):
    sizes = SINUSOIDAL_2D_SIZES[index]
    mistakes = _sinusoidal_2d_mistakes(*sizes, SINUSOIDAL_2D_SIZES[:index])
    far_or_equal(mistakes, helpers_sinusoidal_2d(*sizes))


@pytest.mark.parametrize("case", centroid_cases(), ids=lambda case: case[0])
def test_every_centroid_mistake_is_far_from_the_right_answer(case):
    _, weights, grid_size, p = case
    far_or_equal(
        _centroid_mistakes(weights, grid_size, p), reference_centroid(weights, grid_size, p)
    )


def test_the_cases_are_what_the_docstrings_say():
    """Each checker's docstring (and the your-turn cell's) names the cases' sizes: these."""
    shapes = [images.shape for _, images, _ in patchify_cases()]
    assert {shape[1] for shape in shapes} == {1, 2, 3}  # C from 1 to 3
    # p from 1 to 4, every one of them (p = 3, a patch with a middle pixel, was never run)
    assert {p for _, _, p in patchify_cases()} == set(PATCH_SIZES) == {1, 2, 3, 4}
    assert any(shape[2] != shape[3] for shape in shapes)  # H and W not always equal
    assert any(not images.is_contiguous() for _, images, _ in patchify_cases())
    assert {images.dtype for _, images, _ in patchify_cases()} == {torch.float32, torch.float64}
    sizes = torch.tensor(SINUSOIDAL_2D_SIZES)
    assert sizes[:, :2].min() == 1 and sizes[:, :2].max() == 8  # rows and cols from 1 to 8
    assert (sizes[:, 2] % 4 == 0).all() and (sizes[:, 2].min(), sizes[:, 2].max()) == (8, 32)
    # a case sharing rows with an earlier one, not its cols or d_model: a cache keyed on rows
    assert any(
        later[0] == earlier[0] and later != earlier
        for index, later in enumerate(SINUSOIDAL_2D_SIZES)
        for earlier in SINUSOIDAL_2D_SIZES[:index]
    )
    cases = centroid_cases()
    assert {weights.dim() for _, weights, _, _ in cases} == {1, 2, 3, 4}  # 1 to 4 dims
    assert any(1 in weights.shape[:-1] for _, weights, _, _ in cases)  # even a size-1 axis
    assert all((weights > 0).all() for _, weights, _, _ in cases)  # each weight > 0
    totals = [weights.sum(-1) for _, weights, _, _ in cases]
    assert any((total - 1).abs().max() > 0.1 for total in totals)  # not every row sums to one
    assert any(rows != cols for _, _, (rows, cols), _ in cases)  # not always square
    assert {p for _, _, _, p in cases} == {1, 2, 4}
    assert {weights.dtype for _, weights, _, _ in cases} == {torch.float32, torch.float64}


NOTEBOOK = Path(__file__).parents[1] / "notebooks" / "14_attention_across_modalities.ipynb"
INPUT_AUTOGRAD = "its requires_grad as it came, no hook left on it, and no backward pass inside"
RULES = {  # what every prompt states, and the checkers enforce
    "patchify": [
        "Without calling helpers.vision.patchify",
        "within 5 s",
        TORCH_GLOBAL_SETTINGS_NAMED,
        "no in-place operation on it, even one that changes no value",
        INPUT_AUTOGRAD,
    ],
    "sinusoidal_2d": [
        "Without calling helpers.vision.sinusoidal_2d",
        "within 5 s",
        TORCH_GLOBAL_SETTINGS_NAMED,
    ],
    "attention_centroid": [
        "even one of size 1",
        "within 5 s",
        TORCH_GLOBAL_SETTINGS_NAMED,
        "no in-place operation on it, even one that changes no value",
        INPUT_AUTOGRAD,
    ],
}


@pytest.mark.parametrize("function", RULES)
def test_the_your_turn_docstrings_state_the_rules_the_checkers_enforce(function):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [cell for cell in notebook.cells if cell.get("id") == f"your-turn-{function}"]
    source = " ".join(cell.source.split())
    for rule in RULES[function]:
        assert rule in source, rule
    exercises = next(c.source for c in notebook.cells if c.source.startswith("## Exercises"))
    exercises = " ".join(exercises.split())
    assert "Each call must return within 5 s" in exercises
    assert "calling that copy is refused, by name" in exercises
    assert "no loop" not in exercises  # a loop is advice, not a rule: loops are accepted


@pytest.mark.parametrize("exercise", CHECKERS)
def test_the_checker_docstrings_state_the_time_limit_and_the_ban(exercise):
    doc = " ".join(CHECKERS[exercise][0].__doc__.split())
    assert "within ANSWER_TIME_LIMIT_SECONDS (5 s)" in doc
    assert TORCH_GLOBAL_SETTINGS_NAMED in doc
    if exercise != "2-D sinusoidal encoding":  # (it takes no tensor)
        assert INPUT_AUTOGRAD in doc
    if exercise != "attention centroid":
        assert "refused by name" in doc and "a loop over the patches is accepted" in doc
    else:
        assert "every leading axis of the weights kept, even one of size 1" in doc


def test_the_reference_centroid_of_one_patch_is_its_centre():
    one_hot = torch.zeros(6)
    one_hot[4] = 1.0  # row 1, column 1 of a 2 x 3 grid
    assert reference_centroid(one_hot, (2, 3), 4).tolist() == [5.5, 5.5]
    assert reference_centroid(3 * one_hot, (2, 3), 4).tolist() == [5.5, 5.5]


# Answers that are not answers


def not_written_yet(*args):
    raise NotImplementedError  # your code here


@pytest.mark.parametrize("exercise", CHECKERS)
@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (lambda *args: None, "returned None: did the function forget to `return`"),
        (lambda *args: 0.5, "returned a Python float, 0.5"),
        (lambda *args: np.zeros(3), "returned a numpy value"),
        (lambda *args: "patches", "returned a str, expected a tensor"),
        (lambda *args: torch.zeros(2, 3, dtype=torch.complex64), "complex tensor"),
    ],
    ids=["None", "float", "numpy", "str", "complex"],
)
def test_an_answer_that_is_not_a_tensor_is_refused_by_what_it_is(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    assert verdict is False and out.startswith("Not yet") and words in out, out


@pytest.mark.parametrize("exercise", CHECKERS)
def test_a_function_not_written_yet_gets_one_friendly_line(exercise, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], not_written_yet)
    assert verdict is False
    assert out == "Not yet: `not_written_yet` is not written yet (it raised NotImplementedError).\n"


def test_grad_mode_switched_off_by_an_answer_is_put_back(run_checker):
    verdict, out = run_checker(check_attention_centroid, centroid_with_gradients_switched_off)
    cases = len(centroid_cases())
    assert verdict is False and out.startswith(f"Not yet: {cases} of {cases} checks"), out
    assert torch.is_grad_enabled()


# Regressions from a third learner's pass: advice about .view given to an answer that used
# .reshape (the case's name holds "view"), and mistakes answered by the general hint only


def sinusoidal_2d_for_square_grids(rows, cols, d_model):
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half)[:, None, :].expand(rows, rows, half)
    by_col = sinusoidal_encoding(rows, half)[None, :, :].expand(rows, rows, half)  # BUG: rows
    return torch.cat([by_row, by_col], -1).reshape(rows * rows, d_model)


def centroid_divided_by_the_largest_weight(weights, grid_size, p):
    centres = _centres(grid_size, p, weights.dtype)
    return weights @ centres / weights.max(-1, keepdim=True).values


def centroid_in_float32(weights, grid_size, p):
    return attention_centroid(weights.float(), grid_size, p)


def centroid_clamping_in_place(weights, grid_size, p):
    weights.clamp_(min=0)  # the weights are > 0: no value changes, still in place
    return attention_centroid(weights, grid_size, p)


REFUSED_AFTER_A_THIRD_PASS = [
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_for_square_grids,
        "shape (4, 8), expected (6, 8); 4 = rows * rows vectors, as if the grid were square",
    ),
    (
        "attention centroid",
        centroid_divided_by_the_largest_weight,
        "divides by the largest weight: a weighted mean divides by the sum of the weights",
    ),
    ("attention centroid", centroid_in_float32, "dtype torch.float32, expected torch.float64"),
    (
        "attention centroid",
        centroid_clamping_in_place,
        "runs an in-place operation on its input `weights`, which changes no value",
    ),
]

WRONG += REFUSED_AFTER_A_THIRD_PASS  # tests/test_exercises.py names each


def test_an_answer_for_square_images_is_told_about_the_sides_not_about_view(run_checker):
    """The channels-last case's name says "a permuted view": the advice about .view went to any
    answer that raised there, .reshape or not."""
    verdict, out = run_checker(check_patchify, patchify_for_square_images)
    assert verdict is False and ".view needs memory" not in out, out
    assert "this case's images are not square (H = 4, W = 8)" in out, out


# Regressions from a fourth learner's pass: a reshape that leaves the channels out (told the
# images were not square), a base other than 10000 (told of a d_model-wide encoding's
# frequencies), a patch index split the wrong way round (told it returned (x, y)), and four
# mistakes that got the general hint


def patchify_for_one_channel(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, H // p, p, W // p, p).permute(0, 1, 3, 2, 4)  # BUG: C = 1 assumed
    return x.reshape(B, -1, p * p)


def patchify_through_as_strided(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size  # BUG: the strides of a contiguous buffer, whatever the images' own
    x = images.as_strided((B, C, H // p, p, W // p, p), (C * H * W, H * W, p * W, W, p, 1))
    return x.permute(0, 2, 4, 1, 3, 5).reshape(B, -1, C * p * p)


def sinusoidal_2d_with_the_base_100(rows, cols, d_model):
    half = d_model // 2
    idx = torch.arange(rows * cols)
    by_row = sinusoidal_encoding(rows, half, base=100.0)[idx // cols]  # BUG: base 100
    by_col = sinusoidal_encoding(cols, half, base=100.0)[idx % cols]
    return torch.cat([by_row, by_col], 1)


def sinusoidal_2d_interleaved_number_by_number(rows, cols, d_model):
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half)[:, None, :].expand(rows, cols, half)
    by_col = sinusoidal_encoding(cols, half)[None, :, :].expand(rows, cols, half)
    return torch.stack([by_row, by_col], dim=-1).reshape(rows * cols, d_model)  # BUG: stack


def sinusoidal_2d_a_quarter_wide_and_padded(rows, cols, d_model):
    q = d_model // 4  # BUG: each half d_model/4 wide, then zeros
    idx = torch.arange(rows * cols)
    z = torch.zeros(rows * cols, q)
    return torch.cat(
        [sinusoidal_encoding(rows, q)[idx // cols], z, sinusoidal_encoding(cols, q)[idx % cols], z],
        1,
    )


def centroid_with_the_index_split_the_wrong_way(weights, grid_size, p):
    rows, cols = grid_size
    idx = torch.arange(rows * cols)
    r, c = idx % cols, idx // cols  # BUG: the row is k // cols
    centres = torch.stack([r * p + (p - 1) / 2, c * p + (p - 1) / 2], -1).to(weights.dtype)
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_over_the_first_axis_too(weights, grid_size, p):
    centres = _centres(grid_size, p, weights.dtype)
    return weights @ centres / weights.sum(0, keepdim=True).sum(-1, keepdim=True)  # BUG: sum(0)


CHANNELS_LEFT_OUT = "C = {} times as many: a reshape to (B, H/p, p, W/p, p) leaves the channel"
REFUSED_AFTER_A_FOURTH_PASS = [
    ("patchify", patchify_for_one_channel, CHANNELS_LEFT_OUT.format(3)),
    ("patchify", patchify_for_one_channel, CHANNELS_LEFT_OUT.format(2)),  # square images too
    (
        "patchify",
        patchify_through_as_strided,
        "reads the images' memory as if it were laid out (B, C, H, W), in order",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_with_the_base_100,
        "the same numbers as those of the base 100 at width d_model/2",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_interleaved_number_by_number,
        "the row's and the column's encodings are interleaved number by number",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_a_quarter_wide_and_padded,
        "each half is an encoding of width d_model/4 padded with zeros",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_a_quarter_wide_and_padded,
        "d_model // 4 = 3 is odd here, and no width for an encoding",
    ),
    (
        "attention centroid",
        centroid_with_the_index_split_the_wrong_way,
        "or patch k placed in row k % cols, column k // cols (its index split the wrong way",
    ),
    (
        "attention centroid",
        centroid_over_the_first_axis_too,
        "divides by weights.sum(0).sum(-1), a total over the first axis as well as the patches",
    ),
]

WRONG += REFUSED_AFTER_A_FOURTH_PASS  # tests/test_exercises.py names each

GENERAL_HINTS = {
    "patchify": "flattened)",
    "2-D sinusoidal encoding": "for patch r * cols + c)",
    "attention centroid": "over the total weight)",
}


@pytest.mark.parametrize(
    ("exercise", "answer"),
    sorted({(exercise, answer) for exercise, answer, _ in REFUSED_AFTER_A_FOURTH_PASS}, key=str),
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_fourth_pass_mistake_gets_no_general_hint_and_no_other_diagnosis(
    exercise, answer, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    assert not any(line.endswith(GENERAL_HINTS[exercise]) for line in failures), out
    for wrong in ("images are not square", "each half uses the frequencies", "returns (x, y)"):
        assert wrong not in out, out


# Regressions from a fifth learner's pass: a squeezed centroid and a cache keyed on rows judged
# Correct (no case had a size-1 axis, every case its own rows), a hard-coded patch size told the
# images were not square, a detached total told about weights that sum to one where they do
# not, and mistakes answered by the general hint or a bare error


def patchify_with_a_hard_coded_patch_size(images, p):
    return patchify(images, 4)  # BUG: the patch_size argument unused


def patchify_of_the_transposed_image(images, p):
    return patchify(images.transpose(2, 3), p)  # BUG: (B, C, W, H)


def patchify_with_p_patches_per_side(images, p):
    batch, channels, height, width = images.shape
    grid = images.reshape(batch, channels, p, height // p, p, width // p)  # BUG: p patches a side
    return grid.permute(0, 2, 4, 1, 3, 5).reshape(batch, p * p, -1)


def patchify_of_the_first_image_as_a_batch(images, p):
    return patchify(images[:1], p)


def sinusoidal_2d_cached_by_rows(rows, cols, d_model, _cache={}):  # noqa: B006 (the mistake)
    if rows not in _cache:  # BUG: cols and d_model left out of the key
        _cache[rows] = sinusoidal_2d(rows, cols, d_model)
    return _cache[rows]


def sinusoidal_2d_in_maes_layout(rows, cols, d_model):
    half = d_model // 2

    def sines_then_cosines(n):
        encoding = sinusoidal_encoding(n, half)
        return torch.cat([encoding[:, 0::2], encoding[:, 1::2]], 1)

    by_row = sines_then_cosines(rows).repeat_interleave(cols, 0)
    return torch.cat([sines_then_cosines(cols).repeat(rows, 1), by_row], 1)  # the column first


def sinusoidal_2d_of_the_canvas(rows, cols, d_model):
    return sinusoidal_2d(6, 6, d_model)


def sinusoidal_2d_of_width_32(rows, cols, d_model):
    return sinusoidal_2d(rows, cols, 32)


def sinusoidal_2d_with_a_column_table_of_rows(rows, cols, d_model):
    by_row = sinusoidal_encoding(rows, d_model // 2)
    by_col = sinusoidal_encoding(rows, d_model // 2)  # BUG: rows positions, not cols
    return torch.stack(
        [torch.cat([by_row[r], by_col[c]]) for r in range(rows) for c in range(cols)]
    )


def sinusoidal_2d_with_a_row_table_of_cols(rows, cols, d_model):
    by_row = sinusoidal_encoding(cols, d_model // 2)  # BUG: cols positions, not rows
    by_col = sinusoidal_encoding(cols, d_model // 2)
    return torch.stack(
        [torch.cat([by_row[r], by_col[c]]) for r in range(rows) for c in range(cols)]
    )


def centroid_squeezed(weights, grid_size, p):
    return attention_centroid(weights, grid_size, p).squeeze()


def centroid_at_the_bottom_right_pixel(weights, grid_size, p):
    centres = _centres(grid_size, p, weights.dtype, p - 1)
    return weights @ centres / weights.sum(-1, keepdim=True)


def centroid_counting_pixels_from_one(weights, grid_size, p):
    return attention_centroid(weights, grid_size, p) + 1


def centroid_normalised_over_the_first_axis(weights, grid_size, p):
    return weights / weights.sum(0, keepdim=True) @ _centres(grid_size, p, weights.dtype)


def centroid_for_a_square_grid(weights, grid_size, p):
    rows, _ = grid_size
    return attention_centroid(weights, (rows, rows), p)  # BUG: rows x rows centres


REFUSED_AFTER_A_FIFTH_PASS = [
    (
        "patchify",
        patchify_with_a_hard_coded_patch_size,
        "shape '[3, 3, 1, 4, 1, 4]' is invalid for input of size 216; patches of 4 x 4 though "
        "patch_size is 2: use the patch_size argument",
    ),
    ("patchify", patchify_with_a_hard_coded_patch_size, "(patches of 4 x 4 though patch_size"),
    ("patchify", patchify_of_the_transposed_image, "patchifies the image transposed (its H and W"),
    (
        "patchify",
        patchify_with_p_patches_per_side,
        "uses patch_size as the number of patches per side",
    ),
    (
        "patchify",
        patchify_of_the_first_image_as_a_batch,
        "returns the patches of the first image only (images[:1], a batch of one)",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_cached_by_rows,
        "2 x 5 patches, d_model = 16: shape (6, 8), expected (10, 16) (returns its result of an "
        "earlier case, 2 x 3 patches with d_model = 8, which shares rows with this one",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_in_maes_layout,
        "the column's half comes first, and each half holds its sines first",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_of_the_canvas,
        "returns the encoding of a 6 x 6 grid (section 2's canvas) whatever rows and cols",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_of_width_32,
        "returns vectors of d_model = 32 whatever d_model",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_with_a_column_table_of_rows,
        "an index past the end of a table of rows = 2 positions: the column runs to cols - 1 = 2",
    ),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_with_a_row_table_of_cols,
        "an index past the end of a table of cols = 2 positions: the row runs to rows - 1 = 3",
    ),
    (
        "attention centroid",
        centroid_squeezed,
        "shape (2,), expected (1, 1, 2) (squeeze drops size-1 axes",
    ),
    (
        "attention centroid",
        centroid_over_a_detached_total,
        "divides by a detached total: no gradient flows through the total",
    ),
    (
        "attention centroid",
        centroid_at_the_bottom_right_pixel,
        "places each patch's centre at its bottom-right pixel, r*p + p - 1",
    ),
    ("attention centroid", centroid_counting_pixels_from_one, "counts pixels from 1"),
    (
        "attention centroid",
        centroid_normalised_over_the_first_axis,
        "normalises the weights over the first axis (weights.sum(0))",
    ),
    (
        "attention centroid",
        centroid_for_a_square_grid,
        "(1x6 and 4x2); 4 = rows * rows centres against 6 weights, as if the grid were square",
    ),
]

WRONG += REFUSED_AFTER_A_FIFTH_PASS  # tests/test_exercises.py names each


NAMED_ON_EVERY_FAILING_CASE = {  # each fifth-pass answer: words in each of its failures
    patchify_with_a_hard_coded_patch_size: "though patch_size is",
    patchify_of_the_transposed_image: "patchifies the image transposed",
    patchify_with_p_patches_per_side: "uses patch_size as the number of patches per side",
    patchify_of_the_first_image_as_a_batch: "the first image only",
    sinusoidal_2d_cached_by_rows: "returns its result of an earlier case",
    sinusoidal_2d_in_maes_layout: "the layout of MAE's get_2d_sincos_pos_embed",
    sinusoidal_2d_of_the_canvas: "returns the encoding of a 6 x 6 grid",
    sinusoidal_2d_of_width_32: "returns vectors of d_model = 32",
    sinusoidal_2d_with_a_column_table_of_rows: "an index past the end of a table of rows",
    sinusoidal_2d_with_a_row_table_of_cols: "an index past the end of a table of cols",
    centroid_squeezed: "squeeze drops size-1 axes",
    centroid_over_a_detached_total: "detached",
    centroid_at_the_bottom_right_pixel: "bottom-right pixel",
    centroid_counting_pixels_from_one: "counts pixels from 1",
    centroid_normalised_over_the_first_axis: "over the first axis (weights.sum(0))",
    centroid_for_a_square_grid: "as if the grid were square",
}


@pytest.mark.parametrize(
    ("exercise", "answer"),
    sorted({(exercise, answer) for exercise, answer, _ in REFUSED_AFTER_A_FIFTH_PASS}, key=str),
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_fifth_pass_mistake_is_named_on_every_case_it_fails(exercise, answer, run_checker):
    """Not the general hint, nor a bare error or shape, on any case."""
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        assert NAMED_ON_EVERY_FAILING_CASE[answer] in line, line
        assert not line.endswith(GENERAL_HINTS[exercise]), line


def test_a_hard_coded_patch_size_is_not_told_the_images_are_not_square(run_checker):
    _, out = run_checker(check_patchify, patchify_with_a_hard_coded_patch_size)
    assert "not square" not in out, out


def test_a_detached_total_is_named_where_the_weights_do_not_sum_to_one(run_checker):
    _, out = run_checker(check_attention_centroid, centroid_over_a_detached_total)
    sums = {name: weights.sum(-1) for name, weights, _, _ in centroid_cases()}
    not_one = [name for name, total in sums.items() if (total - 1).abs().max() > 0.1]
    assert len(not_one) >= 2
    for name in not_one:
        (line,) = [line for line in out.splitlines() if line.startswith(f"  - {name}:")]
        assert "divides by a detached total" in line and "sum to one, dividing" not in line, line


def centroid_reseeding_torch(weights, grid_size, p):
    torch.manual_seed(12345)
    return attention_centroid(weights, grid_size, p)


def centroid_drawing_from_torch(weights, grid_size, p):
    torch.rand(1)
    return attention_centroid(weights, grid_size, p)


@pytest.mark.parametrize("answer", [centroid_reseeding_torch, centroid_drawing_from_torch])
def test_an_answer_that_uses_torchs_random_generator_is_refused_and_the_state_put_back(
    answer, run_checker
):
    torch.manual_seed(7)
    state = torch.random.get_rng_state()
    verdict, out = run_checker(check_attention_centroid, answer)
    assert verdict is False, out
    assert "reseeds or draws from torch's global random generator" in out, out
    assert torch.equal(torch.random.get_rng_state(), state)


# Regressions from a sixth learner's pass: a patch flattened as (row, C, column), the batch axis
# permuted in among the patches, a cols x rows grid, the flat index in the first half, and a
# centre at (r + 1) * p / 2 got the general hint; p = 3, in the docstring's range, never ran


def patchify_moving_the_channel_between_the_pixel_axes(images, p):
    grid, batch, channels = _grid(images, p)  # (B, C, rows, p, cols, p)
    patches = grid.movedim(1, 3).movedim(4, 2)  # BUG: (B, rows, cols, p, C, p)
    return patches.reshape(batch, -1, channels * p * p)


def patchify_with_the_batch_among_the_patches(images, p):
    grid, batch, channels = _grid(images, p)
    patches = grid.permute(2, 4, 0, 1, 3, 5)  # BUG: (rows, cols, B, C, p, p)
    return patches.reshape(batch, -1, channels * p * p)


def sinusoidal_2d_of_a_cols_by_rows_grid(rows, cols, d_model):
    return sinusoidal_2d(cols, rows, d_model)  # BUG: the sizes swapped


def sinusoidal_2d_with_the_flat_index_in_the_first_half(rows, cols, d_model):
    _, col = _row_and_column(rows, cols)
    half = d_model // 2
    by_index = sinusoidal_encoding(rows * cols, half)  # BUG: patch r * cols + c, not row r
    return torch.cat([by_index, sinusoidal_encoding(cols, half)[col]], 1)


def centroid_at_half_the_far_edge(weights, grid_size, p):
    centres = _centres(grid_size, 1, weights.dtype, 1) * p / 2  # BUG: (r + 1) * p / 2
    return weights @ centres / weights.sum(-1, keepdim=True)


REFUSED_AFTER_A_SIXTH_PASS = [
    (
        "patchify",
        patchify_moving_the_channel_between_the_pixel_axes,
        "each patch is flattened in (row, C, column) order",
    ),
    (
        "patchify",
        patchify_with_the_batch_among_the_patches,
        "the batch axis is permuted in among the patches (permute(2, 4, 0, 1, 3, 5)",
    ),
    ("2-D sinusoidal encoding", sinusoidal_2d_of_a_cols_by_rows_grid, "encodes a cols x rows grid"),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_with_the_flat_index_in_the_first_half,
        "the first half encodes the patch's index r * cols + c: it encodes the patch's row r",
    ),
    (
        "attention centroid",
        centroid_at_half_the_far_edge,
        "places the patch in row r at (r + 1) * p / 2",
    ),
]

WRONG += REFUSED_AFTER_A_SIXTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_SIXTH_PASS,
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_sixth_pass_mistake_is_named_on_every_case_it_fails(exercise, answer, words, run_checker):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        assert words in line, line
        assert not line.endswith(GENERAL_HINTS[exercise]), line


# Regressions from a seventh learner's pass: a backward pass inside patchify was judged Correct
# (reshape and permute save nothing, so the checker's own backward pass still ran); rescaled
# values, the first image's patches for every image, the channel axis before the patch axes, a
# sine-only encoding, the base 1000, halves joined along dim 0, a half width of 16, the index
# split by rows, a patch size of 4 whatever patch_size and a division by the mean weight got the
# general hint; the prompts did not list every global setting the checkers watch


def patchify_checking_its_gradient_with_backward(images, p):
    patches = patchify(images, p)
    patches.sum().backward()  # BUG: fills the .grad of the caller's tensors
    return patches


def patchify_divided_by_the_largest_value(images, p):
    patches = patchify(images, p)
    return patches / patches.amax(dim=(1, 2), keepdim=True)  # BUG: rescaled


def patchify_of_the_first_image_for_every_image(images, p):
    return patchify(images[:1], p).expand(len(images), -1, -1)  # BUG: images[0] only


def patchify_by_tensor_unfold_without_the_permute(images, p):
    batch, channels = images.shape[:2]
    grid = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, rows, cols, p, p)
    return grid.reshape(batch, -1, channels * p * p)  # BUG: the channel axis first


def _sines_only(positions, width):
    frequencies = 10000.0 ** (-torch.arange(width, dtype=torch.float64) / width)
    return torch.sin(positions[:, None].double() * frequencies).float()


def sinusoidal_2d_of_sines_only(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    half = d_model // 2
    return torch.cat([_sines_only(row, half), _sines_only(col, half)], 1)  # BUG: no cosines


def sinusoidal_2d_with_the_base_1000(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    half = d_model // 2
    by_row = sinusoidal_encoding(rows, half, base=1000.0)[row]  # BUG: base 1000
    return torch.cat([by_row, sinusoidal_encoding(cols, half, base=1000.0)[col]], 1)


def sinusoidal_2d_joined_along_dim_0(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    half = d_model // 2
    halves = [sinusoidal_encoding(rows, half)[row], sinusoidal_encoding(cols, half)[col]]
    return torch.cat(halves, 0).reshape(rows * cols, d_model)  # BUG: dim 0


def sinusoidal_2d_with_halves_16_wide(rows, cols, d_model):
    row, col = _row_and_column(rows, cols)
    halves = [sinusoidal_encoding(rows, 16)[row], sinusoidal_encoding(cols, 16)[col]]
    return torch.cat(halves, 1)[:, :d_model]  # BUG: 16 whatever d_model


def sinusoidal_2d_splitting_the_index_by_rows(rows, cols, d_model):
    index = torch.arange(rows * cols)
    row, col = index // rows % rows, index % rows % cols  # BUG: by rows, not cols
    half = d_model // 2
    return torch.cat(
        [sinusoidal_encoding(rows, half)[row], sinusoidal_encoding(cols, half)[col]], 1
    )


def centroid_of_patches_of_4_pixels(weights, grid_size, p):
    return attention_centroid(weights, grid_size, 4)  # BUG: patch_size ignored


def centroid_divided_by_the_mean_weight(weights, grid_size, p):
    centres = _centres(grid_size, p, weights.dtype)
    return weights @ centres / weights.mean(-1, keepdim=True)  # BUG: n times too large


REFUSED_AFTER_A_SEVENTH_PASS = [
    (
        "patchify",
        patchify_checking_its_gradient_with_backward,
        "fills the .grad of `images` (a backward pass inside the function",
    ),
    ("patchify", patchify_divided_by_the_largest_value, "the values are rescaled"),
    (
        "patchify",
        patchify_of_the_first_image_for_every_image,
        "every image gets the first image's patches",
    ),
    (
        "patchify",
        patchify_by_tensor_unfold_without_the_permute,
        "the channel axis is left before the patch axes",
    ),
    ("2-D sinusoidal encoding", sinusoidal_2d_of_sines_only, "each half holds sines only"),
    ("2-D sinusoidal encoding", sinusoidal_2d_with_the_base_1000, "with the base 1000"),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_joined_along_dim_0,
        "the row's and the column's halves are joined along dim 0",
    ),
    ("2-D sinusoidal encoding", sinusoidal_2d_with_halves_16_wide, "16 wide whatever d_model"),
    (
        "2-D sinusoidal encoding",
        sinusoidal_2d_splitting_the_index_by_rows,
        "splits the patch index by rows, not cols",
    ),
    (
        "attention centroid",
        centroid_of_patches_of_4_pixels,
        "as if each were 4 x 4 pixels though patch_size is",
    ),
    ("attention centroid", centroid_divided_by_the_mean_weight, "divides by the mean weight"),
]

WRONG += REFUSED_AFTER_A_SEVENTH_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_SEVENTH_PASS,
    ids=lambda value: getattr(value, "__name__", value),
)
def test_a_seventh_pass_mistake_is_named_on_every_case_it_fails(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures, out
    for line in failures:
        assert words in line, line


def test_the_exercises_prompt_states_every_global_setting_and_the_inputs_autograd_state():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    exercises = next(c.source for c in notebook.cells if c.source.startswith("## Exercises"))
    exercises = " ".join(exercises.split())
    assert TORCH_GLOBAL_SETTINGS_NAMED in exercises
    assert (
        "their requires_grad as it came, no hook left on them, and no backward pass inside"
    ) in exercises


def patchify_through_float16(images, p):
    return patchify(images.half(), p).to(images.dtype)  # BUG: rounds every pixel


def sinusoidal_2d_through_float16(rows, cols, d_model):
    return sinusoidal_2d(rows, cols, d_model).half().float()  # BUG: rounds the encoding


def centroid_of_the_flattened_weights(weights, grid_size, p):
    return attention_centroid(weights.reshape(-1, weights.shape[-1]), grid_size, p)  # BUG


@pytest.mark.parametrize(
    ("checker", "answer", "words"),
    [
        (check_patchify, patchify_through_float16, "rounded to torch.float16 on the way"),
        (check_sinusoidal_2d, sinusoidal_2d_through_float16, "rounded to float16 on the way"),
        (
            check_attention_centroid,
            centroid_of_the_flattened_weights,
            "the leading axes are flattened into one",
        ),
    ],
    ids=["patchify in float16", "sinusoidal_2d in float16", "centroid flattened"],
)
def test_a_float16_round_trip_and_flattened_axes_are_named(checker, answer, words, run_checker):
    """Each got the general hint or a bare shape alone (a ninth learner's pass)."""
    verdict, out = run_checker(checker, answer)
    assert verdict is False and words in out, out


def centroid_in_float16(weights, grid_size, p):
    return attention_centroid(weights.half(), grid_size, p).to(weights.dtype)  # BUG


def test_a_centroid_computed_in_float16_is_named(run_checker):
    """It got the general hint, where patchify and the 2-D encoding name float16 (a tenth
    learner's pass)."""
    verdict, out = run_checker(check_attention_centroid, centroid_in_float16)
    assert verdict is False and "runs in torch.float16" in out, out


# Regressions from a learner's pass: two wrong answers that got the general hint


def sinusoidal_2d_without_cosines(rows, cols, d_model):
    encoding = sinusoidal_2d(rows, cols, d_model).clone()
    encoding[:, 1::2] = 0  # BUG: the cosines left out
    return encoding


def attention_centroid_on_a_grid_6_wide(weights, grid_size, patch_size):
    index = torch.arange(weights.shape[-1])
    patch = torch.stack([index // 6, index % 6], -1).to(weights.dtype)  # BUG: 6, not cols
    centres = patch * patch_size + (patch_size - 1) / 2
    return weights @ centres / weights.sum(-1, keepdim=True)


REFUSED_AFTER_A_LEARNERS_PASS = [
    ("2-D sinusoidal encoding", sinusoidal_2d_without_cosines, "leaves the cosines zero"),
    ("attention centroid", attention_centroid_on_a_grid_6_wide, "a grid 6 columns wide"),
]
WRONG += REFUSED_AFTER_A_LEARNERS_PASS  # tests/test_exercises.py names each


@pytest.mark.parametrize(
    ("exercise", "answer", "words"),
    REFUSED_AFTER_A_LEARNERS_PASS,
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_mistake_of_a_learners_pass_is_named_in_every_case_it_fails(
    exercise, answer, words, run_checker
):
    verdict, out = run_checker(CHECKERS[exercise][0], answer)
    failures = out.splitlines()[1:]
    assert verdict is False and failures and all(words in line for line in failures), out


def test_a_tuple_returned_is_named_as_a_tuple_not_a_list_from_tolist(run_checker):
    verdict, out = run_checker(
        check_attention_centroid, lambda weights, grid_size, patch: (1.0, 2.0)
    )
    assert verdict is False and "returned a tuple, expected a tensor" in out, out
    assert ".tolist()" not in out
