import pytest
import torch

from helpers.attention import masked_softmax
from helpers.kernel_regression import (
    KERNELS,
    NadarayaWatson,
    gaussian_kernel,
    gaussian_scores,
    kernel_pooling,
    make_data,
    mean_squared_error,
    train_sharpness,
)


def test_data_is_reproducible_and_sorted():
    a, b = make_data(seed=3), make_data(seed=3)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_train, b.y_train)
    assert torch.all(a.x_train[1:] >= a.x_train[:-1])
    assert not torch.equal(a.y_train, make_data(seed=4).y_train)


@pytest.mark.parametrize("name", list(KERNELS))
def test_kernel_pooling_weights_are_a_distribution(name):
    data = make_data()
    predictions, weights = kernel_pooling(data.x_test, data.x_train, data.y_train, KERNELS[name])
    assert weights.shape == (len(data.x_test), len(data.x_train))
    torch.testing.assert_close(weights.sum(1), torch.ones(len(data.x_test)))
    assert (weights >= 0).all()
    assert predictions.shape == data.x_test.shape


def test_constant_kernel_is_average_pooling():
    data = make_data()
    predictions, _ = kernel_pooling(data.x_test, data.x_train, data.y_train, KERNELS["Constant"])
    torch.testing.assert_close(predictions, data.y_train.mean().expand_as(predictions))


def test_gaussian_pooling_is_softmax_of_scores():
    data = make_data()
    width = 0.7
    _, weights = kernel_pooling(data.x_test, data.x_train, data.y_train, gaussian_kernel, width)
    softmax = torch.softmax(gaussian_scores(data.x_test, data.x_train, 1 / width), dim=1)
    torch.testing.assert_close(weights, softmax)


def test_boxcar_with_no_key_in_reach_says_so():
    with pytest.raises(ValueError, match="no key lies within width"):
        kernel_pooling(
            torch.tensor([10.0]),
            torch.tensor([0.0, 1.0]),
            torch.tensor([1.0, 2.0]),
            KERNELS["Boxcar"],
            0.5,
        )


def test_kernel_pooling_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="expected queries"):
        kernel_pooling(torch.zeros(3), torch.zeros(4), torch.zeros(5))


def test_model_matches_masked_softmax_and_stores_weights():
    data = make_data()
    model = NadarayaWatson(sharpness=2.0)
    mask = ~torch.eye(len(data.x_train), dtype=torch.bool)
    predictions = model(data.x_train, data.x_train, data.y_train, mask=mask)
    weights = masked_softmax(gaussian_scores(data.x_train, data.x_train, 2.0), mask=mask)
    torch.testing.assert_close(model.attention_weights, weights)
    torch.testing.assert_close(predictions, weights @ data.y_train)
    assert (model.attention_weights.diagonal() == 0).all()


def test_leave_one_out_converges_and_self_attention_runs_away():
    data = make_data()
    _, loo = train_sharpness(data, leave_one_out=True)
    model_self, selfish = train_sharpness(data, leave_one_out=False)
    assert abs(loo["w"][-1] - loo["w"][-100]) < 0.01  # settled
    assert selfish["w"][-1] > 4 * loo["w"][-1]  # still climbing, far past it
    assert selfish["w"][-1] - selfish["w"][-100] > 1
    assert selfish["loss"][-1] < loo["loss"][-1]  # fits its own noise better ...
    model_loo, _ = train_sharpness(data, leave_one_out=True)
    with torch.no_grad():
        test_loo = mean_squared_error(
            model_loo(data.x_test, data.x_train, data.y_train), data.y_test
        )
        test_self = mean_squared_error(
            model_self(data.x_test, data.x_train, data.y_train), data.y_test
        )
    assert test_loo < test_self  # ... and generalises worse
