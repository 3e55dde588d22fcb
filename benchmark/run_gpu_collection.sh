#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job collection` (--dry-run prints the command).
# The GPU data run that produced benchmark/results/<gpu>/ (one 10-minute device call).
# Usage on the GPU machine: source .device/activate.sh && bash benchmark/run_gpu_collection.sh OUTDIR
# Training architectures: resnet18 (9 configs), resnet50, mobilenet_v2, vgg11.
# Held out of kernel training (whole-model measurements only): resnet34, densenet121, efficientnet_b0, vit_b_16.
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); left() { echo $(( ${BUDGET_S:-560} - ($(date +%s) - T0) )); }
source benchmark/gpu_lib.sh
{
zoo_phases_1_3
echo "phases 1-3 done after $(( $(date +%s) - T0 )) s"
# whole models first (ground truth for phase 7), then kernels with the time that is left
python3 benchmark/collector.py --device cuda --set kernel_glob=NONE --set settle_s=2 --set runner.budget_ms=200 2>&1 | grep -vE "^collect|it/s|item/s" | tail -3
echo "models done after $(( $(date +%s) - T0 )) s"
M=$HASE_HOME/model_zoo/models
python3 debug/ort_profiler_kernel_sum.py --model $M/resnet18_bs16_224x224.onnx --warmup 50 --loops 50 --device cuda --device-id 0 --profile-prefix /tmp/p18 --json-out $OUT/debug_resnet18_bs16_224.json > $OUT/debug_resnet18_bs16_224.txt 2>&1
KMIN=$(python3 -c "print(max(0.5, ($(left) - 20) / 60))")
python3 benchmark/collector.py --device cuda --set models_glob= --set settle_s=2 --set runner.budget_ms=40 --set bg_sample_ms=60 --max-minutes $KMIN 2>&1 | grep -vE "^collect|it/s|item/s" | tail -3
echo "kernels done after $(( $(date +%s) - T0 )) s"
} 2>&1 | tee $OUT/log.txt
cp $HASE_HOME/benchmark/results/*/*.csv "$OUT"/ 2>/dev/null
tar czf "$OUT/meta.tgz" -C "$HASE_HOME" ort_analysis/ort_kernel_record model_zoo/models/manifest.json kernel_model/kernel_onnx/index.json benchmark/results --exclude='*.onnx' --exclude='*.csv' 2>/dev/null
ls -la "$OUT"
