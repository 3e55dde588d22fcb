#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job collection_resume` (--dry-run prints the command).
# Second GPU call of the H200 collection: rebuild phases 1-3 (the machine starts bare), restore the
# CSVs of the first call from .carry/, then continue the kernels level by level so that every
# stress level gets the same (alphabetically first) kernels within the call's budget.
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); left() { echo $(( ${BUDGET_S:-570} - ($(date +%s) - T0) )); }
source benchmark/gpu_lib.sh
RES=$HASE_HOME/benchmark/results/nvidia-h200
{
zoo_phases_1_3
mkdir -p $RES && cp .carry/*.csv $RES/
echo "phases 1-3 done after $(( $(date +%s) - T0 )) s"
FAST="--set models_glob= --set settle_s=2 --set runner.budget_ms=25 --set runner.warmup=5 --set bg_sample_ms=40"
for i in 0 1 2 3; do
  LV=(0 0.3 0.6 0.9); n=$(( 4 - i ))
  KMIN=$(python3 -c "print(max(0.3, ($(left) - 15) / 60 / $n))")
  python3 benchmark/collector.py --device cuda $FAST --set "loads=[{kind: stressor, level: ${LV[$i]}}]" --max-minutes $KMIN 2>&1 | grep -E "INFO|error" | tail -2
done
echo "kernels done after $(( $(date +%s) - T0 )) s"
} 2>&1 | tee $OUT/log.txt
cp $RES/*.csv $RES/resolved_config.json "$OUT"/ 2>/dev/null
tar czf "$OUT/records.tgz" -C "$HASE_HOME" --exclude=optimized ort_analysis/ort_kernel_record model_zoo/models/manifest.json kernel_model/kernel_onnx/index.json
ls -la "$OUT"
