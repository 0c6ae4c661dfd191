"""Chapter 15's exercises, solved as a learner would: the loss of a token classifier over its
labelled positions only, the segment ids of a pair of sentences, and whole-word masking."""

import torch

IGNORE = -100  # the label of a position that carries none


def token_classification_loss(logits, labels):
    """logits (B, n, classes), labels (B, n) -> a 0-d tensor: the mean cross-entropy over the
    positions whose label is not IGNORE."""
    log_probabilities = logits.log_softmax(dim=-1)  # (B, n, classes), stable for large logits
    labelled = labels != IGNORE  # (B, n)
    picked = log_probabilities[labelled]  # (labelled positions, classes)
    chosen = picked.gather(-1, labels[labelled][:, None])  # (labelled positions, 1)
    return -chosen.mean()  # one mean over the whole batch, not per row


def segment_ids(ids, sep_id, pad_id):
    """ids (B, n), rows [CLS] first [SEP] second [SEP] <pad> ... -> (B, n) int64: 0 up to and
    including the first [SEP], 1 after it, 0 on the pads."""
    is_sep = (ids == sep_id).long()  # (B, n)
    seps_before = is_sep.cumsum(dim=1) - is_sep  # (B, n): the [SEP]s strictly before t
    return ((seps_before >= 1) & (ids != pad_id)).long()


def whole_word_mask(ids, word_ids, mask_id, rate, seed):
    """ids (B, n), word_ids (B, n) (-1 for [CLS], [SEP], pads) -> (B, n): every piece of each
    chosen word replaced by mask_id."""
    words = max(int(word_ids.max()) + 1, 1)
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.rand((ids.shape[0], words), generator=generator) < rate  # (B, words)
    hidden = chosen.gather(1, word_ids.clamp(min=0))  # (B, n): the draw of each piece's word
    hidden = hidden & (word_ids >= 0)  # [CLS], [SEP] and pads belong to no word
    return ids.masked_fill(hidden, mask_id)
