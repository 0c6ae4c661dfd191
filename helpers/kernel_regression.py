"""Nadaraya-Watson kernel regression: attention pooling by similarity (chapter 01).

A query x asks "what is y here?"; the training inputs are the keys, their labels
the values, and the answer is a weighted average of the values, weighted by how
similar each key is to the query.
"""

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from helpers import validation
from helpers.attention import masked_softmax


def true_function(x: torch.Tensor) -> torch.Tensor:
    """The curve the noisy training labels come from, on x >= 0."""
    if (x < 0).any():
        raise ValueError("true_function is defined for x >= 0 (x ** 0.8 of a negative x is NaN)")
    return 2 * torch.sin(x) + x**0.8


@dataclass(frozen=True)
class RegressionData:
    x_train: torch.Tensor  # (n_train,) sorted keys
    y_train: torch.Tensor  # (n_train,) noisy values
    x_test: torch.Tensor  # (n_test,) evenly spaced queries
    y_test: torch.Tensor  # (n_test,) noise-free truth at the queries


def make_data(
    n_train: int = 50, n_test: int = 51, noise: float = 0.5, seed: int = 0
) -> RegressionData:
    """Noisy samples of ``true_function`` on [0, 5], and a grid of test queries."""
    n_train = validation.whole_number(n_train, "n_train", minimum=2)
    n_test = validation.whole_number(n_test, "n_test")
    validation.positive_number(noise, "noise", allow_zero=True)
    seed = validation.whole_number(seed, "seed", minimum=0)
    if n_train < 2 or n_test < 1:
        raise ValueError(f"need n_train >= 2 and n_test >= 1, got {n_train} and {n_test}")
    generator = torch.Generator().manual_seed(seed)
    x_train, _ = torch.sort(torch.rand(n_train, generator=generator) * 5)
    y_train = true_function(x_train) + noise * torch.randn(n_train, generator=generator)
    x_test = torch.linspace(0, 5, n_test)
    return RegressionData(x_train, y_train, x_test, true_function(x_test))


def gaussian_kernel(d: torch.Tensor, width: float = 1.0) -> torch.Tensor:
    _check_width(d, width)
    return torch.exp(-(d**2) / (2 * width**2))


def boxcar_kernel(d: torch.Tensor, width: float = 1.0) -> torch.Tensor:
    _check_width(d, width)
    return (d.abs() <= width).to(d.dtype)


def epanechnikov_kernel(d: torch.Tensor, width: float = 1.0) -> torch.Tensor:
    _check_width(d, width)
    return torch.clamp(1 - (d / width) ** 2, min=0)


def constant_kernel(d: torch.Tensor, width: float = 1.0) -> torch.Tensor:
    """Every key is equally similar to every query: plain average pooling."""
    return torch.ones_like(d)


KERNELS = {
    "Gaussian": gaussian_kernel,
    "Boxcar": boxcar_kernel,
    "Epanechnikov": epanechnikov_kernel,
    "Constant": constant_kernel,
}


def kernel_pooling(
    queries: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    kernel: Callable = gaussian_kernel,
    width: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Nadaraya-Watson estimate at each query: sum_i alpha(q, k_i) v_i.

    queries: (n_queries,), keys and values: (n_keys,).
    Returns the predictions (n_queries,) and the weights (n_queries, n_keys).
    """
    for name, value in (("queries", queries), ("keys", keys), ("values", values)):
        validation.tensor(value, name, "(n,)")
    validation.same_float_dtype({"queries": queries, "keys": keys, "values": values})
    if not callable(kernel):
        raise ValueError(
            f"kernel must be a function of distance and width, such as KERNELS[{kernel!r}]"
        )
    validation.positive_number(width, "width")
    if keys.shape != values.shape or keys.dim() != 1 or queries.dim() != 1:
        raise ValueError(
            f"expected queries (n_queries,), keys and values (n_keys,); got queries "
            f"{tuple(queries.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}"
        )
    similarity = kernel(queries[:, None] - keys[None, :], width)  # (n_queries, n_keys)
    total = similarity.sum(dim=1, keepdim=True)  # (n_queries, 1)
    if (total == 0).any():
        lonely = queries[(total == 0).squeeze(1)].tolist()
        raise ValueError(f"no key lies within width {width} of the queries {lonely}")
    weights = similarity / total
    return weights @ values, weights


def gaussian_scores(
    queries: torch.Tensor, keys: torch.Tensor, sharpness: float | torch.Tensor
) -> torch.Tensor:
    """Attention scores -((q - k) w)^2 / 2 of a Gaussian kernel of width 1/w: (n_q, n_k)."""
    return -(((queries[:, None] - keys[None, :]) * sharpness) ** 2) / 2


class NadarayaWatson(nn.Module):
    """Gaussian-kernel attention pooling with one learnable sharpness w = 1 / width.

    The parameter is log w, so that w stays positive whatever step gradient descent takes.
    """

    def __init__(self, sharpness: float = 1.0):
        super().__init__()
        validation.positive_number(sharpness, "sharpness")
        self.log_w = nn.Parameter(torch.tensor(float(sharpness)).log())
        self.attention_weights = None

    @property
    def w(self) -> torch.Tensor:
        return self.log_w.exp()

    def forward(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """queries (n_q,), keys and values (n_k,), mask (n_q, n_k) True = may attend."""
        _check_pooling_inputs(queries, keys, values)
        scores = gaussian_scores(queries, keys, self.w)  # (n_q, n_k)
        self.attention_weights = masked_softmax(scores, mask=mask)  # (n_q, n_k)
        return self.attention_weights @ values  # (n_q,)


def train_sharpness(
    data: RegressionData,
    leave_one_out: bool,
    epochs: int = 500,
    lr: float = 1.0,
    sharpness: float = 1.0,
) -> tuple["NadarayaWatson", dict]:
    """Fit w by full-batch gradient descent on the squared error at the training points.

    With ``leave_one_out`` each training point predicts its own label from the others
    only (the diagonal of the mask is False); without it, a point may attend to itself.
    Returns the model and a history dict with the loss and w after every epoch.
    """
    _check_training(data, epochs, lr)
    model = NadarayaWatson(sharpness)
    n = len(data.x_train)
    mask = ~torch.eye(n, dtype=torch.bool) if leave_one_out else None  # (n, n)
    history = {"loss": [], "w": []}
    for _ in range(epochs):
        predictions = model(data.x_train, data.x_train, data.y_train, mask=mask)
        loss = ((predictions - data.y_train) ** 2).mean()
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            model.log_w -= lr * model.log_w.grad
        history["loss"].append(loss.item())
        history["w"].append(model.w.item())
    return model, history


def mean_squared_error(predictions: torch.Tensor, targets: torch.Tensor) -> float:
    validation.tensor(predictions, "predictions", "(n,)")
    validation.tensor(targets, "targets", "(n,)")
    if predictions.shape != targets.shape or predictions.numel() == 0:
        raise ValueError(
            f"predictions {tuple(predictions.shape)} and targets {tuple(targets.shape)} must "
            f"have one shape, with at least one number"
        )
    return ((predictions - targets) ** 2).mean().item()


# The checks: each public function above calls these once, at its door, and what it then
# computes trusts what passed them. Each error names what was expected and what came.


# Kernels: similarity as a function of the distance d = query - key.
def _check_width(d, width) -> None:
    validation.tensor(d, "d", "of distances query - key")
    validation.positive_number(width, "width")


def _check_pooling_inputs(queries, keys, values) -> None:
    for name, value in (("queries", queries), ("keys", keys), ("values", values)):
        if validation.tensor(value, name, "(n,)").dim() != 1:
            raise ValueError(f"{name} must be one-dimensional (n,), got {tuple(value.shape)}")
    if keys.shape != values.shape:
        raise ValueError(f"keys {tuple(keys.shape)} and values {tuple(values.shape)} differ")


def _check_training(data, epochs, lr) -> None:
    if not isinstance(data, RegressionData):
        raise ValueError(f"data must come from make_data(), got {type(data).__name__}")
    validation.whole_number(epochs, "epochs")
    validation.positive_number(lr, "lr")
