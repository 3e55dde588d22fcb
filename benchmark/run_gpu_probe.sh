#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job probe` (--dry-run prints the command).
# One short GPU call: the launch-wait probe (benchmark/launch_probe.py) next to the plan's stressor and
# every co-runner setting phase 4 measured whole models under, with the metrics of each setting.
# Usage on the GPU machine: source .device/activate.sh && bash benchmark/run_gpu_probe.sh OUTDIR
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
python3 benchmark/calibrate_loads.py --device cuda --set settle_s=2 --set calibration.sample_s=2 \
  --set calibration.probe_ms=1000 --set calibration.stressor_modes=[matmul] \
  --set calibration.stressor_levels=[0,0.3,0.6,0.9] \
  --set 'calibration.corunners={small_infer: [1.0], tc_gemm_bursts: [0.3, 1.0], cnn_train: [0.3], memcopy_gaps: [1.0]}' \
  --set out=nvidia-h200/probe 2>&1 | grep -v "calibrate:" | tee "$OUT/log.txt"
cp $HASE_HOME/benchmark/results/nvidia-h200/probe/load_calibration.* "$OUT/"
