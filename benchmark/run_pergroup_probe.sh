#!/usr/bin/env bash
# GPU job: why cuDNN runs some depthwise Conv1d one channel group at a time (docs/method.md, exam v6; the risk
# inference/node_model.py per_group_risk names). The corpus models with a depthwise Conv1d of kernel >= 28 (ARCHS),
# traced with benchmark/trace_run.py (1 session each: launches and CUPTI time per node) under VARIANTS:
#   lazy       the corpus's setting: CUDA_MODULE_LOADING as torch leaves it (LAZY), EXHAUSTIVE search
#   eager      CUDA_MODULE_LOADING=EAGER, EXHAUSTIVE: does loading modules during the timed search decide it?
#   heuristic  LAZY, cudnn_conv_algo_search=HEURISTIC: is it the search at all?
# The answer is in launches per Conv node: per group when launches >= groups (compare with the committed corpus traces).
# Declared in benchmark/gpu_jobs.yaml: `hase gpu-job pergroup_probe`. About 2-3 minutes per variant; resumable (trace_run
# skips the models it has in each variant's folder), so a cut call goes on with the same HASE_HOME.
# Writes OUT/nodes_<variant>.csv.gz (the Conv rows of trace_nodes), OUT/sessions_<variant>.csv.gz, OUT/log.txt.
set -uo pipefail
OUT=${1:?out dir}; mkdir -p "$OUT"
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
ARCHS=${ARCHS:-[ssm-s2, ssm-s4, ssm-s5, ssm-s6001, ssm-s7, conformer-s5001, conformer-s6000]}
M=$HASE_HOME/model_zoo/models
{
python3 model_zoo/build_corpus.py --set "archs=$ARCHS" --set "workers=${WORKERS:-8}" 2>&1 | grep -E "failed|done|error"
pats=$(echo "$ARCHS" | tr -d '[] ' | tr ',' '\n' | sed 's/$/_bs/')
LIST=$HASE_HOME/pergroup_models.txt
ls "$M"/*.onnx | grep -v "\.opt\." | grep -F "$pats" > "$LIST"
echo "models: $(wc -l < "$LIST")"
for v in ${VARIANTS:-lazy eager heuristic}; do
  algo=EXHAUSTIVE; unset CUDA_MODULE_LOADING
  case $v in eager) export CUDA_MODULE_LOADING=EAGER;; heuristic) algo=HEURISTIC;; lazy) ;;
    *) echo "unknown variant $v (lazy|eager|heuristic)"; continue;; esac
  echo "variant $v: CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-unset} cudnn_conv_algo_search=$algo"
  python3 benchmark/trace_run.py --device cuda --set "model_list=$LIST" --set sessions=1 --set clean_labels=false \
    --set "cudnn_conv_algo_search=$algo" --set "out=pergroup_$v" --set keep_going=true 2>&1 | grep -E "INFO hase.trace_run: \[|rror|wrote"
  R=$HASE_HOME/benchmark/results/nvidia-*/pergroup_$v
  python3 - "$R"/trace_nodes.csv "$OUT/nodes_$v.csv.gz" <<'PY'
import glob, sys
import pandas as pd
f = glob.glob(sys.argv[1])
if f:
    n = pd.read_csv(f[0])
    n[n["op"] == "Conv"].drop(columns=[c for c in n.columns if "kernel_names" in c], errors="ignore").to_csv(sys.argv[2], index=False)
PY
  gzip -c $R/trace_sessions.csv > "$OUT/sessions_$v.csv.gz" 2>/dev/null
done
} 2>&1 | tee -a "$OUT/log.txt"
