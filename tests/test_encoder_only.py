"""Chapter 15's encoder: its tokens, BERT's masking, the two masks (both ways, left only), the
fine-tuning data and the saved files."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from helpers import encoder_only as eo
from helpers.checkpoints import CheckpointError, checksum_path
from helpers.translation import PAD_ID, load_tokenizer

SPECIAL = (*eo.SPECIAL_IDS, eo.CLS_ID, eo.SEP_ID, eo.MASK_ID)
TINY = eo.EncoderConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0)


@pytest.fixture(scope="module")
def tokenizer_and_ids():
    return eo.load_encoder_tokenizer()


def random_ids(batch=64, n=12, seed=0):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, 8000, (batch, n), generator=generator)
    ids[:, 0], ids[:, -1] = eo.CLS_ID, eo.SEP_ID
    ids[: batch // 2, n - 3 :] = PAD_ID  # some rows padded
    return ids


def test_the_three_tokens_follow_chapter_08s_and_leave_every_other_id_alone(tokenizer_and_ids):
    tokenizer, ids = tokenizer_and_ids
    assert ids == {"[CLS]": eo.CLS_ID, "[SEP]": eo.SEP_ID, "[MASK]": eo.MASK_ID}
    assert tokenizer.get_vocab_size() == eo.VOCAB_SIZE == eo.EncoderConfig().vocab_size
    before = load_tokenizer().get_vocab()
    after = tokenizer.get_vocab()
    assert {token: after[token] for token in before} == before
    assert load_tokenizer().get_vocab_size() == 8000  # the shared copy gained nothing


def test_masking_chooses_only_ordinary_tokens_and_splits_them_80_10_10():
    ids = random_ids(batch=2000, n=20)
    before = ids.clone()
    inputs, targets = eo.mask_tokens(
        ids, eo.MASK_ID, eo.VOCAB_SIZE, SPECIAL, 0.15, torch.Generator().manual_seed(0)
    )
    assert torch.equal(ids, before)
    chosen = targets != eo.IGNORE
    special = torch.isin(ids, torch.tensor(SPECIAL))
    assert not (chosen & special).any()
    assert torch.equal(targets[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    share = chosen.sum() / (~special).sum()
    assert 0.14 < share < 0.16
    masked = (inputs == eo.MASK_ID) & chosen
    kept = (inputs == ids) & chosen
    replaced = chosen & ~masked & ~kept
    assert 0.78 < masked.sum() / chosen.sum() < 0.82
    assert 0.085 < kept.sum() / chosen.sum() < 0.115  # a random id equal to the old one counts here
    assert 0.085 < replaced.sum() / chosen.sum() < 0.115
    assert not torch.isin(inputs[replaced], torch.tensor(SPECIAL)).any()


def test_masking_is_the_same_for_the_same_seed_and_differs_for_another():
    ids = random_ids()
    first = eo.mask_tokens(
        ids, eo.MASK_ID, eo.VOCAB_SIZE, SPECIAL, generator=torch.Generator().manual_seed(3)
    )
    again = eo.mask_tokens(
        ids, eo.MASK_ID, eo.VOCAB_SIZE, SPECIAL, generator=torch.Generator().manual_seed(3)
    )
    other = eo.mask_tokens(
        ids, eo.MASK_ID, eo.VOCAB_SIZE, SPECIAL, generator=torch.Generator().manual_seed(4)
    )
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[1], other[1])


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"ids": [[1, 2]]}, ValueError, "ids must be a torch.Tensor"),
        ({"ids": torch.ones(2, 3)}, ValueError, "integer"),
        ({"ids": torch.full((2, 3), 9000)}, ValueError, "ids"),
        ({"mask_id": 9000}, ValueError, "mask_id"),
        ({"special_ids": (0, 1)}, ValueError, "special_ids must hold mask_id"),
        ({"special_ids": "abc"}, TypeError, "special_ids must be a collection"),
        ({"rate": 1.5}, ValueError, "rate must be a probability"),
        ({"generator": 3}, TypeError, "generator must be a torch.Generator"),
        ({"vocab_size": 0}, ValueError, "vocab_size"),
    ],
)
def test_bad_masking_arguments_are_named(arguments, error, message):
    given = {
        "ids": random_ids(4),
        "mask_id": eo.MASK_ID,
        "vocab_size": eo.VOCAB_SIZE,
        "special_ids": SPECIAL,
        **arguments,
    }
    with pytest.raises(error, match=message):
        eo.mask_tokens(**given)


def test_the_causal_twin_reads_only_the_left_and_the_encoder_both_sides():
    torch.manual_seed(0)
    ids = random_ids(4, 10)[2:]  # unpadded rows
    changed = ids.clone()
    changed[:, 6] = 17  # one token in the middle
    for causal in (False, True):
        model = eo.TextEncoder(dataclasses.replace(TINY, causal=causal)).eval()
        before, after = model(ids), model(changed)
        assert torch.equal(before[:, :6], after[:, :6]) == causal  # positions before the change
        assert not torch.allclose(before[:, 6:], after[:, 6:])


def test_pads_change_nothing_that_is_not_a_pad():
    torch.manual_seed(0)
    model = eo.TextEncoder(TINY).eval()
    row = random_ids(4, 8)[2:3]
    padded = torch.cat([row, torch.zeros(1, 5, dtype=torch.long)], dim=1)
    assert torch.allclose(model(row), model(padded)[:, :8], atol=1e-6)


def test_the_losses_are_cross_entropies_where_they_say():
    torch.manual_seed(0)
    model = eo.TextEncoder(TINY).eval()
    ids = random_ids(8, 10)
    inputs, targets = eo.mask_tokens(
        ids, eo.MASK_ID, eo.VOCAB_SIZE, SPECIAL, 0.3, torch.Generator().manual_seed(0)
    )
    logits = model.output(model(inputs))
    expected = F.cross_entropy(logits.transpose(1, 2), targets, ignore_index=eo.IGNORE)
    assert torch.allclose(eo.masked_lm_loss(model, inputs, targets), expected, atol=1e-6)
    causal = eo.TextEncoder(dataclasses.replace(TINY, causal=True)).eval()
    logits = causal.output(causal(ids[:, :-1]))
    expected = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], ignore_index=PAD_ID)
    assert torch.allclose(eo.next_token_loss(causal, ids), expected, atol=1e-6)


def test_segments_must_match_the_ids():
    model = eo.TextEncoder(TINY)
    ids = random_ids(2, 5)
    with pytest.raises(ValueError, match="segments must have the shape of ids"):
        model(ids, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="segments"):
        model(ids, torch.full((2, 5), 2))
    with pytest.raises(ValueError, match="max_len"):
        model(torch.ones(1, 81, dtype=torch.long))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"d_model": 10, "num_heads": 3}, r"d_model \(10\) must be divisible by num_heads \(3\)"),
        ({"dropout": 1.0}, "dropout must be a probability"),
        ({"causal": "yes"}, "causal must be True or False"),
        ({"num_layers": 0}, "num_layers"),
    ],
)
def test_a_bad_config_is_named(fields, message):
    with pytest.raises(ValueError, match=message):
        eo.EncoderConfig(**fields)


def test_near_misses_differ_in_exactly_one_word():
    found = eo.near_misses(["I like cats.", "I like dogs.", "You like cats.", "I like big cats."])
    assert found["I like cats."] == ["You like cats.", "I like dogs."] or set(
        found["I like cats."]
    ) == {"You like cats.", "I like dogs."}
    assert found["I like big cats."] == []


def test_pair_examples_are_balanced_and_near_misses_are_not_translations():
    examples = eo.pair_examples("train", 400, seed=1)
    kinds = [kind for *_, kind in examples]
    assert kinds.count("translation") == 200 and kinds.count("near miss") == 100
    translations = eo._translations("train")
    for english, french, label, kind in examples:
        assert (french in translations[english]) == (label == 1), (english, french, kind)
    assert examples == eo.pair_examples("train", 400, seed=1)


def test_the_pair_test_set_holds_every_test_sentence_with_its_translation():
    examples = eo.pair_test_examples()
    positives = [english for english, _, label, _ in examples if label == 1]
    assert len(positives) == len(set(positives)) == 1000
    translations = eo._translations("test")
    for english, french, label, _ in examples:
        assert (french in translations[english]) == (label == 1)


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Tom, come here!", (["tom", "come", "here"], [1, 0, 4], [1, 0, 0])),
        ("Is it yours?", (["is", "it", "yours"], [0, 0, 3], [1, 0, 0])),
        ("I don't know Mary.", (["i", "don't", "know", "mary"], [0, 0, 0, 2], [1, 0, 0, 1])),
        ('He said "no".', None),
        ("It's 3 p.m.", None),
        ("Wait...", None),
    ],
)
def test_word_tags_read_what_follows_each_word_and_its_case(sentence, expected):
    assert eo.word_tags(sentence) == expected


def test_a_words_first_piece_carries_its_tags(tokenizer_and_ids):
    tokenizer, ids = tokenizer_and_ids
    words, marks, capitals = eo.word_tags("Grab that, Tom.")
    row, mark_targets, case_targets = eo.tagging_row(tokenizer, ids, words, marks, capitals)
    pieces = tokenizer.encode(words, is_pretokenized=True)
    assert row == [eo.CLS_ID, *pieces.ids, eo.SEP_ID]
    firsts = [
        i + 1 for i, word in enumerate(pieces.word_ids) if i == 0 or word != pieces.word_ids[i - 1]
    ]
    assert [mark_targets[i] for i in firsts] == marks
    assert [case_targets[i] for i in firsts] == capitals
    others = set(range(len(row))) - set(firsts)
    assert all(mark_targets[i] == case_targets[i] == eo.IGNORE for i in others)


def test_a_pair_row_marks_its_second_sentence(tokenizer_and_ids):
    tokenizer, ids = tokenizer_and_ids
    row, segments = eo.pair_row(tokenizer, ids, "Go.", "Va !")
    first = row.index(eo.SEP_ID)
    assert row[0] == eo.CLS_ID and row[-1] == eo.SEP_ID and len(row) == len(segments)
    assert segments == [0] * (first + 1) + [1] * (len(row) - first - 1)


def test_fine_tuning_is_seeded_and_leaves_the_encoder_it_was_given_alone():
    torch.manual_seed(0)
    encoder = eo.TextEncoder(TINY)
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    examples = eo.pair_examples("train", 16)
    recipe = eo.FinetuneRecipe(steps=3, batch_size=4)
    first = eo.finetune("pair", encoder, examples, recipe)
    again = eo.finetune("pair", encoder, examples, recipe)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in first.state_dict().items())
    assert all(torch.equal(v, encoder.state_dict()[k]) for k, v in before.items())
    assert not torch.equal(first.encoder.tokens.weight, encoder.tokens.weight)


def test_saved_finetuned_models_load_with_the_scores_they_were_saved_with(tmp_path, monkeypatch):
    pretrained, pairs = tmp_path / "pretrained.pt", tmp_path / "pairs.pt"
    tiny = eo.PretrainRecipe(steps=1, batch_size=2, log_every=1)
    eo.train_and_save_pretrained(pretrained, tiny, TINY)
    eo.train_and_save_pairs(pairs, tiny, pretrained)
    tests = {"pair": eo.pair_test_examples()[:8], "tagging": eo.tagging_examples("test")[:5]}
    tagging_examples = eo.tagging_examples
    monkeypatch.setattr(eo, "BUDGETS", (6,))
    monkeypatch.setattr(eo, "pair_test_examples", lambda: tests["pair"])
    monkeypatch.setattr(
        eo,
        "tagging_examples",
        lambda split, *rest: (
            tests["tagging"] if split == "test" else tagging_examples(split, *rest)
        ),
    )
    recipe = eo.FinetuneRecipe(steps=2, batch_size=3, warmup_steps=1)
    results = eo.train_and_save_finetuned(tmp_path / "finetuned.pt", recipe, pretrained, pairs)
    loaded = eo.load_finetuned(tmp_path / "finetuned.pt")
    assert loaded["recipe"] == recipe and loaded["results"] == results
    assert set(results["pair"]) == set(eo.STARTS["pair"]) and set(
        results["pair"]["from scratch"]
    ) == {"6"}
    pair_scores = eo.pair_scores(loaded["pair"], tests["pair"])
    assert pair_scores == results["pair"]["pre-trained on pairs"]["6"]
    tagging_scores = eo.tagging_scores(loaded["tagging"], tests["tagging"])
    assert tagging_scores == results["tagging"]["pre-trained"]["6"]


def test_the_shipped_fine_tuned_models_hold_every_run_s_scores():
    loaded = eo.load_finetuned()
    assert isinstance(loaded["pair"], eo.PairClassifier) and isinstance(
        loaded["tagging"], eo.Tagger
    )
    assert loaded["recipe"] == eo.FINETUNE
    for task in eo.TASKS:
        assert set(loaded["results"][task]) == set(eo.STARTS[task])
        for start in eo.STARTS[task]:
            assert set(loaded["results"][task][start]) == {str(b) for b in eo.BUDGETS}


def test_saved_pretrained_models_load_as_they_were_saved(tmp_path):
    path = tmp_path / "pretrained.pt"
    recipe = eo.PretrainRecipe(steps=2, batch_size=4, log_every=1)
    eo.train_and_save_pretrained(path, recipe, TINY)
    loaded = eo.load_pretrained(path)
    assert loaded["causal"].config.causal and not loaded["masked"].config.causal
    assert loaded["config"] == TINY and loaded["recipe"] == recipe
    pair_recipe = eo.PretrainRecipe(steps=1, batch_size=3, log_every=1)
    eo.train_and_save_pairs(tmp_path / "pairs.pt", pair_recipe, path)
    pairs = eo.load_pairs_model(tmp_path / "pairs.pt")
    assert pairs["recipe"] == pair_recipe and pairs["log"]["step"] == [1]
    assert pairs["model"].config == TINY
    again = eo.pretrain_on_pairs(loaded["masked"], pair_recipe, progress=False)["model"]
    for key, weight in again.state_dict().items():
        assert torch.equal(pairs["model"].state_dict()[key], weight.half().float())
    assert loaded["logs"]["masked"]["step"] == [1, 2]
    trained = eo.pretrain(TINY, recipe, progress=False)["model"]
    for key, weight in trained.state_dict().items():  # the same run again, stored in float16
        assert torch.equal(loaded["masked"].state_dict()[key], weight.half().float())
    text = checksum_path(path).read_text()
    checksum_path(path).write_text(text.replace(text[0], "0" if text[0] != "0" else "1", 1))
    with pytest.raises(CheckpointError):
        eo.load_pretrained(path)


@pytest.fixture(scope="module")
def tiny_models():
    torch.manual_seed(0)
    masked = eo.TextEncoder(TINY).eval()
    causal = eo.TextEncoder(dataclasses.replace(TINY, causal=True)).eval()
    return masked, causal


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda m, c: eo.fill_in(m, [[8000, 5, 8001]], [0]),
            ValueError,
            r"positions\[0\] must be a piece",
        ),
        (lambda m, c: eo.fill_in(m, [[8000, 5, 8001]], [2]), ValueError, r"1\.\.1 \(not \[CLS\]"),
        (lambda m, c: eo.fill_in(m, [[8000, 5, 8001]], [1, 1]), ValueError, "one position per row"),
        (lambda m, c: eo.fill_in(m, [], []), TypeError, "rows must be a non-empty list"),
        (
            lambda m, c: eo.fill_in(m, [[8000, 9000, 8001]], [1]),
            ValueError,
            "outside the vocabulary",
        ),
        (
            lambda m, c: eo.fill_in(m, [[8000, *[5] * 80, 8001]], [1]),
            ValueError,
            "more than max_len",
        ),
        (lambda m, c: eo.fill_in(m, [[8000, 5, 8001]], [1], k=0), ValueError, "k must be"),
        (
            lambda m, c: eo.fill_in("model", [[8000, 5, 8001]], [1]),
            TypeError,
            "model must be a TextEncoder",
        ),
        (
            lambda m, c: eo.masked_token_accuracy(c, [[8000, 5, 8001]]),
            ValueError,
            "the encoder, not the twin",
        ),
        (lambda m, c: eo.masked_token_accuracy(m, [[8000, 8001]]), ValueError, "hid no token"),
        (
            lambda m, c: eo.recovery_by_position(c, m, [[8000, 5, 6, 7, 8001]]),
            ValueError,
            "masked must be",
        ),
        (
            lambda m, c: eo.recovery_by_position(m, c, [[8000, 5, 8001]]),
            ValueError,
            "near the start, in the middle",
        ),
        (
            lambda m, c: eo.next_token_loss(m, torch.ones(1, 3, dtype=torch.long)),
            ValueError,
            "causal twin",
        ),
        (
            lambda m, c: eo.next_token_loss(c, torch.tensor([[8000, 0, 0]])),
            ValueError,
            "a token after the first",
        ),
        (
            lambda m, c: eo.masked_lm_loss(
                m, torch.ones(1, 3, dtype=torch.long), torch.full((1, 3), -100)
            ),
            ValueError,
            "hold no label",
        ),
        (
            lambda m, c: eo.masked_lm_loss(
                m, torch.ones(1, 3, dtype=torch.long), torch.ones(1, 2, dtype=torch.long)
            ),
            ValueError,
            "targets must be integer class indices",
        ),
        (lambda m, c: eo.PairClassifier("encoder"), TypeError, "encoder must be a TextEncoder"),
        (
            lambda m, c: eo.finetune("pairs", m, [("a", "b", 1, "translation")]),
            ValueError,
            "task must be one of",
        ),
        (
            lambda m, c: eo.finetune("pair", m, [("a", "b", 1, "random")]),
            ValueError,
            r"examples\[0\] must have label 1",
        ),
        (
            lambda m, c: eo.finetune("tagging", m, [(["a"], [0], [2])]),
            ValueError,
            "each capital must be 0 or 1",
        ),
        (lambda m, c: eo.finetune("pair", m, []), TypeError, "examples must be a non-empty list"),
        (
            lambda m, c: eo.pair_scores(eo.Tagger(m), [("a", "b", 1, "translation")]),
            TypeError,
            "PairClassifier",
        ),
        (lambda m, c: eo.word_tags(3), TypeError, "sentence"),
        (
            lambda m, c: eo.near_misses("I like cats."),
            TypeError,
            "englishes must be a non-empty list",
        ),
        (lambda m, c: eo.pair_examples("train", 0), ValueError, "count"),
        (lambda m, c: eo.tagging_examples("dev"), ValueError, "split"),
        (
            lambda m, c: eo.tagging_loss(
                torch.zeros(1, 2, 5),
                torch.zeros(1, 2, dtype=torch.long),
                torch.zeros(1, 2, dtype=torch.long),
            ),
            ValueError,
            "a Tagger's",
        ),
        (
            lambda m, c: eo.sentence_rows(load_tokenizer(), ["Go."], {}),
            ValueError,
            "ids must be the dict",
        ),
        (lambda m, c: eo.padded([[1, -2]]), ValueError, "whole numbers >= 0"),
    ],
)
def test_bad_arguments_are_named_at_the_door(tiny_models, call, error, message):
    with pytest.raises(error, match=message):
        call(*tiny_models)


def test_the_longest_rows_are_what_the_constants_say(tokenizer_and_ids):
    tokenizer, ids = tokenizer_and_ids
    from helpers.translation import clean, load_pairs

    longest = {"sentence": 0, "pair": 0}
    for split in ("train", "valid", "test"):
        pairs = load_pairs(split)
        encoded = tokenizer.encode_batch([clean(text) for pair in pairs for text in pair])
        for first, second in zip(encoded[::2], encoded[1::2], strict=True):
            longest["sentence"] = max(longest["sentence"], len(first.ids) + 2, len(second.ids) + 2)
            longest["pair"] = max(longest["pair"], len(first.ids) + len(second.ids) + 3)
    assert longest == {"sentence": eo.LONGEST_SENTENCE_ROW, "pair": eo.LONGEST_PAIR_ROW}


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: eo.fill_in(
                eo.TextEncoder(dataclasses.replace(TINY, vocab_size=100)), [[1, 10, 2]], [1]
            ),
            ValueError,
            "encoder tokenizer's 8003 ids",
        ),
        (
            lambda: eo.pretrain(dataclasses.replace(TINY, max_len=8), eo.PretrainRecipe(steps=1)),
            ValueError,
            "max_len is 8, but a training sentence may hold 38",
        ),
        (
            lambda: eo.pretrain_on_pairs(
                eo.TextEncoder(dataclasses.replace(TINY, max_len=40)), eo.PretrainRecipe(steps=1)
            ),
            ValueError,
            "a training pair may hold 69",
        ),
        (lambda: eo.add_encoder_tokens(load_tokenizer()), ValueError, "shared copy"),
        (
            lambda: eo.whole_word_mask(
                torch.tensor([[1, 2]]), torch.tensor([[0, 0]], dtype=torch.int8), 3
            ),
            ValueError,
            "int64 or int32",
        ),
        (
            lambda: eo.whole_word_mask(torch.tensor([[1, 2]]), torch.tensor([[0, 5]]), 3),
            ValueError,
            "fewer than 6 words",
        ),
        (
            lambda: eo.whole_word_mask(
                torch.tensor([[1, 2]], dtype=torch.int32), torch.tensor([[0, 1]]), 2**40
            ),
            ValueError,
            "does not fit",
        ),
        (lambda: eo.segment_ids(torch.tensor([[1, 2]]), 2**70), ValueError, "does not fit"),
        (lambda: eo.pair_examples("train", 10**7), ValueError, "count must be at most"),
        (
            lambda: eo.token_classification_loss(
                torch.full((1, 2, 3), float("nan")), torch.tensor([[0, 1]])
            ),
            ValueError,
            "NaN or inf",
        ),
        (
            lambda: eo.sentence_rows(
                eo.load_encoder_tokenizer()[0], ["Go."], {"[CLS]": "x", "[SEP]": None, "[MASK]": 1}
            ),
            ValueError,
            "ids must be the dict",
        ),
    ],
)
def test_what_the_hostile_pass_found_is_named_at_the_door(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_integer_ids_and_labels_of_any_width_are_read_as_int64(tiny_models):
    masked, causal = tiny_models
    ids = random_ids(4, 8)
    inputs, targets = eo.mask_tokens(
        ids.int(), eo.MASK_ID, eo.VOCAB_SIZE, SPECIAL, 0.5, torch.Generator().manual_seed(0)
    )
    assert inputs.dtype == torch.int32
    expected = eo.masked_lm_loss(masked, inputs.long(), targets)
    assert torch.equal(eo.masked_lm_loss(masked, inputs, targets.int()), expected)
    assert torch.equal(eo.next_token_loss(causal, ids.int()), eo.next_token_loss(causal, ids))
    assert eo.padded([(1, 2), (3,)]).tolist() == [[1, 2], [3, 0]]


def test_a_saved_file_with_the_wrong_contents_is_a_checkpoint_error(tmp_path):
    from helpers.checkpoints import load_checkpoint, save_checkpoint

    tiny_recipe = eo.PretrainRecipe(steps=1, batch_size=2, log_every=1)
    eo.train_and_save_pretrained(tmp_path / "pretrained.pt", tiny_recipe, TINY)
    eo.train_and_save_pairs(tmp_path / "pairs.pt", tiny_recipe, tmp_path / "pretrained.pt")
    saved = load_checkpoint(tmp_path / "pairs.pt", ("config", "recipe", "weights", "log"), "x")
    for damage in (
        lambda s: s["weights"].pop("tokens.weight"),
        lambda s: s["config"].update(causal=True),
        lambda s: s["config"].update(extra=1),
        lambda s: s.update(log=None),
    ):
        damaged = {k: dict(v) if isinstance(v, dict) else v for k, v in saved.items()}
        damage(damaged)
        save_checkpoint(tmp_path / "damaged.pt", damaged)
        with pytest.raises(CheckpointError, match="rebuild it with"):
            eo.load_pairs_model(tmp_path / "damaged.pt")


def test_a_vocabulary_too_large_to_draw_from_and_one_dimensional_ids_are_named():
    ids = torch.tensor([[8000, 5, 6, 8001]])
    for vocab_size in (10**11, 2**70):
        with pytest.raises(ValueError, match="vocab_size must be at most 2\\^24"):
            eo.mask_tokens(ids, 8002, vocab_size, [0, 8000, 8001, 8002])
    with pytest.raises(ValueError, match="ids must be"):
        eo.TextEncoder(TINY).attention_mask(torch.tensor([8000, 5, 8001]))
