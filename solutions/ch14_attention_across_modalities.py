"""Chapter 14's exercises, solved as a learner would: an image cut into a sequence of patches,
the 2-D sinusoidal encoding of the patches' places, and where in the image a query looks."""

import torch

from helpers.positional import sinusoidal_encoding


def patchify(images, patch_size):
    """images (B, C, H, W) -> (B, (H/p)(W/p), C p p): the patches left to right, then top to
    bottom, each flattened in (C, p, p) order."""
    batch, channels, height, width = images.shape
    p = patch_size
    rows, cols = height // p, width // p
    grid = images.reshape(batch, channels, rows, p, cols, p)  # (B, C, rows, p, cols, p)
    grid = grid.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return grid.reshape(batch, rows * cols, channels * p * p)  # (B, n, C p p)


def sinusoidal_2d(rows, cols, d_model):
    """(rows * cols, d_model): for the patch in row r, column c (index r * cols + c), chapter
    05's encoding of r in the first half and of c in the second."""
    half = d_model // 2
    patch_row = torch.arange(rows).repeat_interleave(cols)  # (n,): 0, 0, 0, 1, 1, 1, ...
    patch_col = torch.arange(cols).repeat(rows)  # (n,): 0, 1, 2, 0, 1, 2, ...
    by_row = sinusoidal_encoding(rows, half)[patch_row]  # (n, d_model / 2)
    by_col = sinusoidal_encoding(cols, half)[patch_col]  # (n, d_model / 2)
    return torch.cat([by_row, by_col], dim=-1)


def attention_centroid(weights, grid_size, patch_size):
    """weights (..., n) over the rows x cols patches -> (..., 2): the weighted mean of the
    patches' centres, (row, column) in pixels."""
    rows, cols = grid_size
    p = patch_size
    patch_row = torch.arange(rows, dtype=weights.dtype).repeat_interleave(cols)  # (n,)
    patch_col = torch.arange(cols, dtype=weights.dtype).repeat(rows)  # (n,)
    centres = torch.stack([patch_row, patch_col], dim=-1) * p + (p - 1) / 2  # (n, 2)
    return weights @ centres / weights.sum(dim=-1, keepdim=True)  # the weights' total may be < 1
