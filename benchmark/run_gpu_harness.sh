#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job harness` (--dry-run prints the command).
# GPU check of the measuring harness (issue 22): is trace_run's
# plain timing slowed by CUPTI staying attached after a profile, and does Kineto's TEARDOWN_CUPTI=1 undo it?
# The same models, one session each, in three processes one after another:
#   A  benchmark/clean_labels.py (never imports torch): plain e2e, and ORT's profiled runs without CUPTI
#   B  benchmark/trace_run.py as the corpus runs it (clean_labels off): e2e after CUPTI passes, node sums
#   C  B with TEARDOWN_CUPTI=1 (Kineto calls cuptiFinalize when each profile stops)
# then A again (A2: did the machine drift while B and C ran?). Writes OUT/{a,a2}.csv, OUT/{b,c}_sessions.csv.
# Env: ARCHS (the ANCHORS list), CONFIGS ("" = every config of each architecture).
set -uo pipefail
OUT=${1:?out dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
ARCHS=${ARCHS:-[resnet50, mobilenet_v2, vit_b_16, cnn_mobile-s1, vit-s2, encoder-s1, hybrid-s1, unet-s0]}
M=$HASE_HOME/model_zoo/models
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
quiet() { grep -vE "Warning|_warn_once|plugin EP|warnings.warn|^\s*$"; }
{ date -u; nvidia-smi --query-gpu=name,uuid,driver_version --format=csv,noheader; lscpu | grep "Model name"; hostname; } \
  > "$OUT/machine.txt"
python3 model_zoo/build_corpus.py --set "archs=$ARCHS" --set workers=14 2>&1 | grep -E "failed|done|error"
python3 - "$ARCHS" "$M" > "$OUT/models.txt" <<'PY'
import json, sys, yaml
from pathlib import Path
archs = set(yaml.safe_load(sys.argv[1]))
man = json.loads(Path(sys.argv[2], "corpus_manifest.json").read_text())["files"]
print("\n".join(str(Path(sys.argv[2], f + ".onnx")) for f, m in sorted(man.items()) if m.get("arch") in archs))
PY
echo "models: $(wc -l < "$OUT/models.txt") ($(el) s)"
LIST="[$(paste -sd, "$OUT/models.txt")]"
clean() { python3 benchmark/clean_labels.py --device cuda --log-level WARNING --set "models=$LIST" --set sessions=1 \
  --set warmup=5 --set budget_ms=60 --set min_loops=5 --set profiled_runs=3 --set "out=$1"; }
trace() { python3 benchmark/trace_run.py --device cuda --set "model_list=$OUT/models.txt" --set sessions=1 \
  --set "out=$1" --set keep_going=true --set trace_sessions=0 --set warmup=5 --set profiled_runs=3 \
  --set cupti_runs=6 --set budget_ms=60 --set min_loops=5 --set clean_labels=false 2>&1 | quiet | tail -2; }
clean "$OUT/a.csv"; echo "A done $(el) s"
trace harness_b; echo "B done $(el) s"
TEARDOWN_CUPTI=1 trace harness_c; echo "C done $(el) s"
clean "$OUT/a2.csv"; echo "A2 done $(el) s"
R=$(ls -d $HASE_HOME/benchmark/results/*/ | head -1)
cp "$R/harness_b/trace_sessions.csv" "$OUT/b_sessions.csv"; cp "$R/harness_c/trace_sessions.csv" "$OUT/c_sessions.csv"
