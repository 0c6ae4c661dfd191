import pytest
import torch
import torch.nn.functional as F

from helpers.training import sequence_cross_entropy


def test_loss_ignores_the_pad_targets():
    logits = torch.randn(2, 4, 6)
    targets = torch.tensor([[3, 2, 0, 0], [1, 2, 3, 4]])
    loss = sequence_cross_entropy(logits, targets, pad_id=0)
    real = targets != 0
    torch.testing.assert_close(loss, F.cross_entropy(logits[real], targets[real]))
    changed = logits.clone()
    changed[~real] = 1000.0
    assert torch.equal(sequence_cross_entropy(changed, targets, pad_id=0), loss)


def test_loss_refuses_bad_shapes_and_all_pad_targets():
    with pytest.raises(ValueError, match="logits must be"):
        sequence_cross_entropy(torch.randn(2, 4), torch.zeros(2, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="every target is a pad"):
        sequence_cross_entropy(torch.randn(1, 2, 3), torch.zeros(1, 2, dtype=torch.long), 0)
