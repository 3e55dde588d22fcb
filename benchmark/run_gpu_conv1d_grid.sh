#!/usr/bin/env bash
# GPU job: where ORT's CUDA EP runs a 1-D grouped convolution one channel group at a time, and what a group costs
# (inference/node_model.py per_group_risk; docs/method.md). kernel_model/conv1d_grid.py writes about 225 single-node
# Conv/ConvTranspose models (kernel length, batch, channels, length, dilation, channels per group, a kernel given at
# run time, moved one at a time around the corpus's cases, then a seeded random design), and benchmark/trace_run.py
# traces each in 1 session (launches, CUPTI GPU time and host dispatch per node) under VARIANTS (lazy: the corpus's
# setting; heuristic: cudnn_conv_algo_search=HEURISTIC; nc1d: EXHAUSTIVE with cudnn_conv1d_pad_to_nc1d=1, the 1-D
# conv laid out as [N, C, 1, D] instead of [N, C, D, 1]). Beside `pergroup_probe` (the corpus models themselves).
# Declared in benchmark/gpu_jobs.yaml: `hase gpu-job conv1d_grid`. Resumable: trace_run skips the models each variant's
# folder has, so a cut call goes on with the same HASE_HOME.
# Writes OUT/grid.csv, OUT/nodes_<variant>.csv.gz, OUT/sessions_<variant>.csv.gz, OUT/log.txt. BUDGET_S (540): the
# tracing stops there, and what it has comes back (the device call's limit is 600 s); call again on the warm machine
# to go on. Then: python kernel_model/conv1d_grid_report.py --set grid=<the folder it came back in>.
set -uo pipefail
OUT=${1:?out dir}; mkdir -p "$OUT"
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
G=$HASE_HOME/conv1d_grid
{
[ -e "$G/models.txt" ] || python3 kernel_model/conv1d_grid.py --set "out=$G" 2>&1 | grep -E "wrote|rror"
cp "$G/grid.csv" "$OUT/grid.csv"
for v in ${VARIANTS:-lazy}; do
  algo=EXHAUSTIVE; opts="{}"
  case $v in heuristic) algo=HEURISTIC;; lazy) ;; nc1d) opts="{cudnn_conv1d_pad_to_nc1d: 1}";;
    *) echo "unknown variant $v (lazy|heuristic|nc1d)"; continue;; esac
  echo "variant $v: cudnn_conv_algo_search=$algo cuda_options=$opts"
  # stop before the device call's 10-minute limit and still bring back what is traced (a warm machine's next call
  # goes on: trace_run skips the models it has)
  left=$(( ${BUDGET_S:-540} - SECONDS )); [ "$left" -gt 30 ] || { echo "no time left for variant $v"; continue; }
  timeout "$left" python3 benchmark/trace_run.py --device cuda --set "model_list=$G/models.txt" --set sessions=1 --set clean_labels=false \
    --set "cudnn_conv_algo_search=$algo" --set "cuda_options=$opts" --set "out=conv1d_$v" --set keep_going=true --set trace_sessions=0 \
    --set warmup=3 --set profiled_runs=2 --set cupti_runs=3 --set budget_ms=20 --set min_loops=3 --set modes=[e2e] \
    2>&1 | grep -E "INFO hase.trace_run: \[[0-9]*0/|rror|wrote"
  R=$(ls -d $HASE_HOME/benchmark/results/nvidia-*/conv1d_$v 2>/dev/null | head -1)
  [ -n "$R" ] || continue
  python3 - "$R"/trace_nodes.csv "$OUT/nodes_$v.csv.gz" <<'PY'
import os, sys
import pandas as pd
if os.path.exists(sys.argv[1]):
    n = pd.read_csv(sys.argv[1])
    n.drop(columns=[c for c in n.columns if "kernel_names" in c], errors="ignore").to_csv(sys.argv[2], index=False)
PY
  gzip -c "$R"/trace_sessions.csv > "$OUT/sessions_$v.csv.gz" 2>/dev/null
done
} 2>&1 | tee -a "$OUT/log.txt"
