#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job zoo` (--dry-run prints the command).
# One GPU call: phases 1-3 on CUDA EP for the zoo (resnet18 at the plan's 9 configs, the plan's seven
# other architectures at bs16 224, and the five extra models phase 4 measures), then the CUDA-EP
# kernel-type summary and every record, packed for ort_analysis/ort_kernel_record/<gpu>/.
# Usage on the GPU machine: source .device/activate.sh && bash ort_analysis/run_gpu_zoo.sh OUTDIR
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source benchmark/gpu_lib.sh
R=$HASE_HOME/ort_analysis/ort_kernel_record
{
export_zoo
export_extra
echo "exports done after $(el) s"
python3 ort_analysis/fusion_detector.py --device cuda 2>&1 | grep -E "error|INFO"
echo "records done after $(el) s"
python3 kernel_model/kernel_builder.py --device cuda 2>&1 | grep -E "error|INFO"
echo "kernel models done after $(el) s"
} 2>&1 | tee "$OUT/log.txt"
python3 - "$R/summary_cuda.json" "$HASE_HOME/kernel_model/kernel_onnx/index.json" "$OUT/zoo_kernel_summary.json" <<'PY'
import json, sys
summary, index, out = sys.argv[1:]
s = json.load(open(summary))
kernels = json.load(open(index))["kernels"].values()
s["command"] = "bash ort_analysis/run_gpu_zoo.sh (phases 1-3 with --device cuda)"
s["kernel_models_built"] = len(kernels)
s["kernel_models_verified_on_cuda"] = sum(1 for k in kernels if k.get("verified"))
json.dump(s, open(out, "w"), indent=1)
PY
pack_records "$OUT"
ls -la "$OUT"
