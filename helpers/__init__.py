"""The package every chapter imports: each idea is written once here, tested in tests/, and
built step by step in the chapter that teaches it.

Modules, by the chapter that introduces them:

- 01 ``kernel_regression``: Nadaraya-Watson pooling, kernels, the learnable sharpness.
- 02 ``attention.masked_softmax`` and friends: valid lengths, boolean masks, empty rows.
- 03 ``attention`` (DotProductAttention, AdditiveAttention), ``scoring``: why divide by sqrt(d).
- 04 ``attention.MultiHeadAttention``, split/merge heads; ``neighbour_task``: two heads, two jobs.
- 05 ``positional``: the sinusoidal encoding and its rotations.
- 06 ``masks``: one convention (True = may attend), converters, padding and causal masks;
  ``attention.KeyValueCache``; ``training.sequence_cross_entropy``.
- 07 ``transformer``: the encoder-decoder (TransformerConfig, Seq2SeqTransformer);
  ``training``: the teacher-forced loop; ``dates``: the date task and its saved model.
- 08 ``translation``: English-French pairs held out by English sentence, the subword
  tokenizer, batches, greedy decoding, BLEU; ``bahdanau``: the RNN encoder-decoder with and
  without attention, and its two saved models.
- 09 ``transformer_translation``: the Transformer on the same sentences, tied embeddings, its
  recipe and two saved models; ``translation.beam_search`` and ``choose_hypothesis``;
  label smoothing in ``training.sequence_cross_entropy``; ``translation_models``: the saved
  translators of 08 and 09 by name and their test BLEU (above both, as ``translation`` is
  below them).
- 10 ``efficient``: byte counts, the online softmax, FlashAttention's tiles (tiled_attention),
  peak_bytes; ``attention.MultiHeadAttention(num_kv_heads=...)``: grouped-query attention.
- 11 ``positional.apply_rope`` and ``positional.alibi_bias``: RoPE and ALiBi; ``long_context``:
  the length-extrapolation task and its saved models, sparse patterns, linear attention.
- 12 ``gpt``: the decoder-only model (GPTConfig, GPT) and generate(): greedy decoding and
  sampling with temperature, top-k and top-p, with the key/value cache; ``decoder_only``:
  chapter 09's sentences as one sequence with a <sep>, the loss over the answer, the
  prefix-LM mask, decoding through chapter 08's step interface, its two saved models.
- 13 ``induction``: random tokens with a repeated block, the previous-token and induction
  scores of attention patterns, zeroing heads, the training recipe with its logs and snapshots,
  and the two saved attention-only models (``gpt.GPTConfig(attention_only=True)``).
- 14 ``vision``: the UCI digits, patchify and unpatchify, 2-D sinusoidal positions, canvases of
  digits in a grid; ``vision_models``: a small ViT, the digit finder (a word's cross-attention
  over a canvas) and the canvas reader (patch encoder and chapter 07's decoder), their saved models.
- 15 ``encoder_only``: chapter 08's tokenizer with [CLS], [SEP] and [MASK]; BERT's masking
  (mask_tokens) and whole-word masking; the bidirectional TextEncoder and its causal twin,
  pre-trained on chapter 08's sentences; filling in a blank, both ways against the left only;
  fine-tuning through [CLS] (is this French a translation?) and per token (punctuation and
  capitals), pre-trained against from scratch at several label budgets; their saved models.
- 16 ``todays_attention``: the attention inside today's open models: a softmax with a learned
  sink logit per head; multi-head latent attention (one cached latent per position, a rotated
  key part shared by the heads, the absorbed form used when decoding, its LatentCache) and the
  cache bytes of published models; CausalSelfAttention with GQA, QK-norm, sink logits and a
  sliding window with kept positions, and its RollingCache; ``todays_models``: one small decoder
  with any of these attentions, its training windows and loop, generate() for prompts of
  different lengths, the held-out and streaming losses (a sliding window with or without the
  first positions kept, or recomputed) and the saved models.

Shared by all of them: ``plotting`` (every drawing), ``widgets`` (the explorers, nothing else;
one module per chapter), ``exercises`` (the checkers, one module per chapter), ``checkpoints``
(checksummed weights), ``timing`` (medians of repeated runs), ``validation`` (argument checks
with named messages), ``contexts`` (the settings a computation runs under, put back after it).

Read these first: ``attention`` (masked_softmax, the scoring modules, multi-head attention and
its cache), then ``gpt`` (a whole model built from it), then the module of the chapter at hand.
Every module follows one rule, and a new one follows it too:

- the idea comes first in the file, and the checks of its arguments last, under "The checks";
- each public function checks its arguments once, at its door (a line or two that call
  ``validation`` or a guard at the bottom of the file), and what it calls inside trusts them;
- a module's ``forward`` is its computation alone;
- the settings a helper computes under (one torch thread, evaluation mode, the caller's random
  numbers left alone, float32 with gradients for training) come from ``contexts``;
- a module that trains a shipped model runs as ``python -m helpers.<module>`` (see the Makefile).

Shapes are written in one notation everywhere: B batch, q queries, k keys, n positions, S and T
source and target lengths, d or d_model a vector's size, heads and d_head for multi-head
attention, vocab a vocabulary's size. A boolean mask is True where a query may attend.
"""
