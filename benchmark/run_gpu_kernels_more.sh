#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job kernels_more` (--dry-run prints the command).
# One GPU call: kernels of three more architectures at idle (depthwise/SE convs, dense concat
# blocks, transformer GEMM/LayerNorm/attention kernels), for the kernel regressors, and the
# collector's throughput with its per-item cost breakdown.
# Usage on the GPU machine: source .device/activate.sh && bash benchmark/run_gpu_kernels_more.sh OUTDIR
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source benchmark/gpu_lib.sh
{
for m in efficientnet_b0 densenet121 vit_b_16; do export_model $m 16 224; done
python3 ort_analysis/fusion_detector.py --device cuda 2>&1 | grep -E "error|INFO" | tail -3
python3 kernel_model/kernel_builder.py --device cuda --set verify=false 2>&1 | tail -1
echo "phases 1-3 done after $(el) s"
python3 benchmark/collector.py --device cuda --set models_glob= --set stress_levels=[0] --set settle_s=0 \
  --set runner.budget_ms=25 --set runner.warmup=5 --set bg_sample_ms=30 --set out=nvidia-h200/kernels_more \
  --max-minutes $(python3 -c "print(max(0.5, (390 - $(el)) / 60))") 2>&1 | grep -vE "^collect|it/s|item/s" | tail -4
echo "all done after $(el) s"
} 2>&1 | tee $OUT/log.txt
cp $HASE_HOME/benchmark/results/nvidia-h200/kernels_more/kernels.csv $HASE_HOME/benchmark/results/nvidia-h200/kernels_more/resolved_config.json $OUT/
ls -la "$OUT"
