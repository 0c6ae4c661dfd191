# The only entry point. `make lab` and `make test` set everything up on first use.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NOTEBOOKS := $(sort $(wildcard notebooks/*.ipynb))
ALLOW_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
PORT   ?= 8888

.PHONY: help setup lab lab-zh zh zh-update test test-threads test-browser lint execute bench bench-under-load date-model translation-models translation-bleu long-context-models low-rank-models induction-models vision-models encoder-only-models todays-models readme-figure clean

help:
	@echo "make lab      set up (first time only) and open JupyterLab on chapter 01"
	@echo "              (on another port: make lab PORT=8890)"
	@echo "make lab-zh   the same in Chinese: the Chinese chapter 01 (notebooks/zh/), JupyterLab's"
	@echo "              menus in Chinese (this project's environment only)"
	@echo "make test     set up (first time only), run the tests and every notebook (strict nbval),"
	@echo "              and every notebook's widgets in JupyterLab in headless Chromium, Chrome or"
	@echo "              Edge (without one, it says so and how to get one, and passes; CI=true fails)"
	@echo "make test-threads  every notebook again under strict nbval with 1 and 3 torch threads,"
	@echo "              less the count make test ran them with (1 on 2 cores; others:"
	@echo "              make test-threads THREADS=\"1 2 3 4\")"
	@echo "make test-browser  only the browser test"
	@echo "make zh       rebuild the Chinese notebooks (notebooks/zh/) from the English ones and the"
	@echo "              translations in translations/zh/"
	@echo "make zh-update  add the English that changed or is new to translations/zh/ (marked fuzzy)"
	@echo "make lint     ruff's rules and ruff's format over helpers/, tests/, benchmarks/, tools/"
	@echo "              and the English notebooks"
	@echo "make execute  re-run every notebook in place and store its outputs"
	@echo "make bench    time every explorer's redraw (median budget: 100 ms; text fields 150 ms),"
	@echo "              the round trip of every widget you drag or draw on, in JupyterLab in"
	@echo "              headless Chromium, from a pointer move to the redrawn view (median: 100 ms)"
	@echo "              and every notebook's run (budget: 30 s; chapters 07 to 09: 60 s; 12 and 14: 45 s)"
	@echo "              and a training step of chapter 12's GPT against torch's own layers"
	@echo "              (goal: at most 1.2x; alone, with --steps and --threads: see its --help)"
	@echo "make bench-under-load  the explorers and the round trips again, beside a busy"
	@echo "              two-thread torch process"
	@echo "make date-model  retrain chapter 07's model and store it in data/ (about a minute)"
	@echo "make translation-models  retrain the shared tokenizer, chapter 08's two RNN translators,"
	@echo "              chapter 09's two Transformers and chapter 12's two decoder-only models,"
	@echo "              and store them in data/"
	@echo "              (on a GPU if there is one; hours on a 2-core CPU; see data/README.md)"
	@echo "make translation-bleu  BLEU of every stored translation model on the held-out test set"
	@echo "make long-context-models  retrain chapter 11's three small models (about 15 s)"
	@echo "make low-rank-models  retrain chapter 11's exact-attention and Linformer models (about 1 minute)"
	@echo "make induction-models  retrain chapter 13's attention-only models (about 25 minutes)"
	@echo "make vision-models  retrain chapter 14's ViT, digit finder and canvas reader (about 2 minutes)"
	@echo "make encoder-only-models  retrain chapter 15's encoder, its causal twin and fine-tuned models"
	@echo "make todays-models        retrain chapter 16's five decoders and its QK-norm pair"
	@echo "make readme-figure  redraw the figure shown in README.md"
	@echo "make clean    remove the environment and caches"

# This project's JupyterLab settings, copied into the environment's own Jupyter configuration
# (never the user's home), laid out as under $(VENV): open on chapter 01
# (etc/jupyter/jupyter_lab_config.json), and no "get notified about official Jupyter news?"
# prompt on a fresh start (share/jupyter/lab/settings/overrides.d/).
JUPYTER_ENV := $(shell find jupyter-env -type f)

# The stamp makes the second run start at once; editing the requirements or the JupyterLab
# settings re-installs. pip byte-compiles what it installs (about 50 s of a 90 s set-up): where
# PYTHONDONTWRITEBYTECODE is set, as here, Python would otherwise compile every module again in
# every process that imports it.
$(STAMP): requirements.txt pyproject.toml $(JUPYTER_ENV)
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	cp -R jupyter-env/. $(VENV)/
	@touch $(STAMP)

setup: $(STAMP)

# A fresh random token each time (never empty), passed in the environment rather than on the
# command line where other users could read it; Jupyter masks a given token, so we print the URL.
# make lab-zh: JupyterLab's own settings read from this environment (JUPYTERLAB_SETTINGS_DIR),
# where jupyter-env's user-settings-zh-CN sets the language pack's locale; make lab keeps the
# locale the overrides set, English, whatever the machine's LANG says.
LAB = JUPYTER_TOKEN=$$token $(VENV)/bin/jupyter lab --ServerApp.ip=127.0.0.1 \
	--ServerApp.port=$(PORT) --ServerApp.port_retries=0 --ServerApp.root_dir=notebooks \
	$(ALLOW_ROOT)
TOKEN = token=$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(24))')
lab: setup
	@$(TOKEN); \
	echo "Open JupyterLab at: http://127.0.0.1:$(PORT)/?token=$$token (it opens on chapter 01)"; \
	$(LAB)

lab-zh: setup
	@$(TOKEN); \
	echo "打开 JupyterLab：http://127.0.0.1:$(PORT)/?token=$$token（中文版第 01 章）"; \
	JUPYTERLAB_SETTINGS_DIR=$(CURDIR)/$(VENV)/share/jupyter/lab/user-settings-zh-CN \
		$(LAB) --LabApp.default_url=/lab/tree/zh/01_attention_pooling.ipynb

# The Chinese edition (tools/zh_edition.py): only its prose is written by hand, in the gettext
# catalogues translations/zh/*.po; make zh writes notebooks/zh/ from them and the English
# notebooks, and tests/test_zh_edition.py fails when the two are out of step.
zh: setup
	$(PY) tools/zh_edition.py build

zh-update: setup
	$(PY) tools/zh_edition.py update

# Three pytest runs, each with its own closing line, each two at a time (pytest-xdist): the unit
# tests (one worker per core), every notebook under strict nbval (two kernels side by side, each
# notebook's cells together in one kernel, in order), and the browser tests (two JupyterLabs and
# two Chromiums; each module starts its own JupyterLab: one runs every notebook in it with the
# worked solutions in its your-turn cells, the others drag and draw on the widgets made for it).
# Two kernels side by side wait for their threads asleep (OMP_WAIT_POLICY=PASSIVE): spinning, as
# OpenMP waits by default, they took the cores from each other (four notebooks on 2 cores: 134 s
# side by side, 77 s one after the other, 54 s side by side asleep); how a thread waits changes
# no number. Each of the two kernels of the notebook pass gets half the cores' threads
# (KERNEL_THREADS: 1 on a 2-core machine), as each unit-test worker does (tests/conftest.py).
# All three always run; any failure fails make test.
# tests/find_browser.py finds Chromium, Chrome or Edge and runs the browser tests with it; with
# none it says so in one line and how to get one, and passes, except under CI=true.
# UNIT_TESTS and NOTEBOOKS may be narrowed on the command line (tests/test_readme_commands.py).
BROWSER_TESTS := $(sort $(wildcard tests/test_*_in_browser.py))
UNIT_TESTS := tests
PYTEST := $(PY) -m pytest -p no:cacheprovider
SIDE_BY_SIDE := -n 2 --dist loadfile
ASLEEP := OMP_WAIT_POLICY=PASSIVE
KERNEL_THREADS := $(shell cores=$$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2); \
	echo $$(( cores > 3 ? cores / 2 : 1 )))
test: setup
	@status=0; \
	$(PYTEST) $(UNIT_TESTS) $(addprefix --ignore=,$(BROWSER_TESTS)) -n auto --durations=20 \
		--durations-min=0.5 || status=1; \
	OMP_NUM_THREADS=$(KERNEL_THREADS) $(ASLEEP) $(PYTEST) $(NOTEBOOKS) --nbval --nbval-current-env $(SIDE_BY_SIDE) --durations=0 \
		--durations-min=0.5 || status=1; \
	$(ASLEEP) $(PY) tests/find_browser.py -p no:cacheprovider $(BROWSER_TESTS) -n 2 \
		--durations=0 || status=1; \
	exit $$status

# A stored output must not depend on how many threads torch uses (they change the order of
# floating-point sums). OMP_NUM_THREADS sets torch's intra-op thread count at start-up.
# Every machine checks 1 and 3 threads: make test's own run has KERNEL_THREADS (1 on a 2-core
# machine), and make test-threads runs whichever of 1 and 3 that was not; ask for more with
# make test-threads THREADS="1 2 3 4". Two kernels run side by side, as in make test: what a
# thread count changes is how torch splits a sum, not how many cores it finds free.
THREADS ?= $(filter-out $(KERNEL_THREADS),1 3)
test-threads: setup
	@for n in $(THREADS); do \
		echo "== strict nbval with OMP_NUM_THREADS=$$n"; \
		OMP_NUM_THREADS=$$n $(ASLEEP) $(PYTEST) $(NOTEBOOKS) --nbval --nbval-current-env -q \
			$(SIDE_BY_SIDE) || exit 1; \
	done

test-browser: setup
	$(PY) tests/find_browser.py -p no:cacheprovider $(BROWSER_TESTS) -s --durations=0

lint: setup
	$(VENV)/bin/ruff check helpers solutions tests benchmarks tools notebooks
	$(VENV)/bin/ruff format --check helpers solutions tests benchmarks tools notebooks

execute: setup
	$(VENV)/bin/jupyter nbconvert --to notebook --execute --inplace \
		--ExecutePreprocessor.record_timing=False --ExecutePreprocessor.store_widget_state=False \
		--ExecutePreprocessor.timeout=600 $(NOTEBOOKS)

bench: setup
	$(PY) benchmarks/explorers.py
	$(PY) benchmarks/drag_round_trip.py
	$(PY) benchmarks/notebooks.py
	$(PY) benchmarks/gpt_training_step.py

bench-under-load: setup
	$(PY) benchmarks/explorers.py --under-load
	$(PY) benchmarks/drag_round_trip.py --under-load

# Retrain chapter 07's model with helpers.dates.RECIPE and store it in data/ (about a minute).
date-model: setup
	$(PY) -m helpers.dates

# The shared tokenizer, chapter 08's RNNs (helpers.bahdanau's recipe) and chapter 09's
# Transformers (helpers.transformer_translation.RECIPE), then chapter 12's two decoder-only
# models (helpers.decoder_only.RECIPE; the tokenizer plus <sep>). Retraining the tokenizer changes
# the token ids, so every model is retrained after it.
# Each trains on a GPU when torch sees one.
translation-models: setup
	$(PY) -m helpers.translation
	$(PY) -m helpers.bahdanau rnn-bottleneck
	$(PY) -m helpers.bahdanau rnn-bahdanau
	$(PY) -m helpers.transformer_translation transformer
	$(PY) -m helpers.transformer_translation transformer-no-smoothing
	$(PY) -m helpers.decoder_only decoder-only
	$(PY) -m helpers.decoder_only decoder-only-lm

# Chapter 11's length-extrapolation models (sinusoidal, RoPE, ALiBi), with
# helpers.long_context.Recipe (about 15 s on one core).
long-context-models: setup
	$(PY) -m helpers.long_context

# Chapter 11's bidirectional recall models, exact attention and Linformer with k = 32, 16, 8
# and 4 projected positions, with helpers.long_context.LOW_RANK_RECIPE (one thread).
low-rank-models: setup
	$(PY) -m helpers.long_context --low-rank

# Chapter 13's one-layer and two-layer attention-only models, their logs and snapshots, and the
# two-layer model with each other way of giving positions, with helpers.induction.Recipe.
# train_model runs on one thread, so a rerun on the same machine gives the same files.
induction-models: setup
	$(PY) -m helpers.induction

# Chapter 14's small Vision Transformer, find-the-digit and read-the-canvas models, with
# helpers.vision_models' recipes. Each trains on one thread, so a rerun on the same machine gives
# the same file.
vision-models: setup
	$(PY) -m helpers.vision_models

# Chapter 15's encoder and its left-to-right twin, pre-trained on chapter 08's training
# sentences with helpers.encoder_only.PRETRAIN, each on one thread (a rerun on the same machine
# gives the same file); the encoder pre-trained further on sentence pairs (PAIR_PRETRAIN); then
# the fine-tuning runs of both tasks at every label budget (FINETUNE).
encoder-only-models: setup
	$(PY) -m helpers.encoder_only pretrain
	$(PY) -m helpers.encoder_only pairs
	$(PY) -m helpers.encoder_only finetune

# Chapter 16's models, each on one thread (a rerun on the same machine gives the same files):
# multi-head, grouped-query and latent decoders of one size on windows of 128 pieces
# (helpers.todays_models.VARIANTS, RECIPE); a softmax and a sink-logit decoder on windows that
# begin with <bos> (SINK_VARIANTS); then two small models at a learning rate of 0.03, with and
# without QK-norm (QK_NORM_VARIANTS, QK_NORM_RECIPE).
todays-models: setup
	$(PY) -m helpers.todays_models variants
	$(PY) -m helpers.todays_models sinks
	$(PY) -m helpers.todays_models qk-norm

translation-bleu: setup
	$(PY) -m helpers.translation_models

readme-figure: setup
	$(PY) -c "from pathlib import Path; from helpers.widgets import KernelRegressionExplorer; \
		Path('docs/kernel_regression.png').write_bytes(KernelRegressionExplorer().render_png())"

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis .ruff_cache *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
