#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job corunners` (--dry-run prints the command).
# One 10-minute GPU call: whole models under HELD-OUT co-runners (issue: real neighbours), plus idle.
# Models: the zoo (resnet18 x 9 configs; resnet50, mobilenet_v2, vgg11, resnet34, densenet121,
# efficientnet_b0, vit_b_16 at bs16 224) and architectures/batches never seen before:
# resnet18 bs1, mobilenet_v3_small bs1, regnet_y_400mf bs32, convnext_tiny bs8, shufflenet_v2_x1_0 bs64.
# Usage on the GPU machine: source .device/activate.sh && bash benchmark/run_gpu_corunners.sh OUTDIR
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source benchmark/gpu_lib.sh
{
export_zoo
export_extra
python3 ort_analysis/fusion_detector.py --device cuda 2>&1 | grep -E "error|INFO" | tail -3
echo "phases 1-2 done after $(el) s"
python3 benchmark/collector.py --device cuda --set kernel_glob= --set settle_s=3 --set runner.budget_ms=150 \
  --set 'loads=[{kind: stressor, level: 0}, {kind: corunner, name: small_infer, knob: 1.0}, {kind: corunner, name: tc_gemm_bursts, knob: 1.0}, {kind: corunner, name: cnn_train, knob: 0.3}, {kind: corunner, name: memcopy_gaps, knob: 1.0}, {kind: corunner, name: tc_gemm_bursts, knob: 0.3}]' \
  --set out=nvidia-h200/corunners --max-minutes $(python3 -c "print(max(0.5, (555 - $(el)) / 60))") 2>&1 | grep -vE "^collect|it/s|item/s" | tail -4
echo "collection done after $(el) s"
} 2>&1 | tee $OUT/log.txt
tar czf "$OUT/corunners.tgz" --exclude='*.onnx' -C "$HASE_HOME" benchmark/results/nvidia-h200/corunners ort_analysis/ort_kernel_record model_zoo/models/manifest.json
ls -la "$OUT"
