#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job smoke_trace` (--dry-run prints the command).
# Quick check before the long job: trace_run on resnet18 bs1 (2 sessions); exit 1 unless CUPTI runs were used.
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
source benchmark/gpu_lib.sh
export_model resnet18 1 224
python3 benchmark/trace_run.py --device cuda --set sessions=2 --set out=smoke \
  --set "models=[$HASE_HOME/model_zoo/models/resnet18_bs1_224x224.onnx]" 2>&1 | grep -vE "Warning|_warn_once|plugin EP"
S=$(ls $HASE_HOME/benchmark/results/*/smoke/trace_sessions.csv)
python3 - "$S" <<'PY'
import sys, pandas as pd
d = pd.read_csv(sys.argv[1]); pd.set_option("display.width", 250)
print(d.T.to_string())
sys.exit(0 if (d["cupti_runs_used"] > 0).all() else 1)
PY
