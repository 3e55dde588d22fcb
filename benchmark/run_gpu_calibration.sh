#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job calibration` (--dry-run prints the command).
# One 10-minute GPU call: load calibration, transfer bandwidth, run-to-run noise and collection
# throughput (issue: phase 4), and the debug breakdowns (issue: debug/).
# Usage on the GPU machine: source .device/activate.sh && bash benchmark/run_gpu_calibration.sh OUTDIR
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source benchmark/gpu_lib.sh
{
echo "== bandwidth"; python3 benchmark/bandwidth.py --device cuda 2>&1 | grep -v "bandwidth:"
echo "== load calibration ($(el) s)"
python3 benchmark/calibrate_loads.py --device cuda --set settle_s=1.5 --set calibration.sample_s=2 \
  --set calibration.stressor_modes=[matmul] \
  --set 'calibration.corunners={cnn_train: [0.3, 1.0], small_infer: [0.3, 1.0], memcopy_gaps: [0.3, 1.0], tc_gemm_bursts: [0.3, 1.0]}' 2>&1 | grep -v "calibrate:"
python3 benchmark/calibrate_loads.py --device cuda --set settle_s=1.5 --set calibration.sample_s=2 \
  --set calibration.stressor_modes=[memcpy] --set calibration.stressor_levels=[0.3,0.6,0.9] --set out=nvidia-h200/memcpy 2>&1 | grep -v "calibrate:"
echo "== phases 1-3 for resnet18 bs16 224 + resnet50 bs128 512 ($(el) s)"
export_model resnet18 16 224; export_model resnet50 128 512
python3 ort_analysis/fusion_detector.py --device cuda --model $HASE_HOME/model_zoo/models/resnet18_bs16_224x224.onnx 2>&1 | grep -E "error|INFO" | tail -2
python3 kernel_model/kernel_builder.py --device cuda --set verify=false 2>&1 | tail -1
echo "== noise + throughput: the same kernels 3 times at idle ($(el) s)"
for run in fast1 fast2; do
  s=$(date +%s.%N)
  python3 benchmark/collector.py --device cuda --set models_glob= --set stress_levels=[0] --set settle_s=0 \
    --set runner.budget_ms=25 --set runner.warmup=5 --set bg_sample_ms=30 --set out=nvidia-h200/noise_$run 2>&1 | grep -E "error|items to measure"
  echo "$run wall $(python3 -c "import time;print(round(time.time()-$s,2))") s"
done
s=$(date +%s.%N)
python3 benchmark/collector.py --device cuda --set models_glob= --set stress_levels=[0] --set settle_s=0 \
  --set out=nvidia-h200/noise_default 2>&1 | grep -E "error|items to measure"
echo "default wall $(python3 -c "import time;print(round(time.time()-$s,2))") s"
echo "== debug breakdowns ($(el) s)"
M=$HASE_HOME/model_zoo/models
python3 debug/ort_profiler_kernel_sum.py --model $M/resnet50_bs128_512x512.onnx --warmup 20 --loops 20 --device cuda \
  --device-id 0 --profile-prefix /tmp/p50 --json-out $OUT/debug_resnet50_bs128_512.json > $OUT/debug_resnet50_bs128_512.txt 2>&1
echo "resnet50 breakdown rc=$? ($(el) s)"
for sc in dataloader sync tiny_ops memory_churn; do
  timeout 90 python3 debug/profiler_demo.py --scenario $sc --pin_memory --amp --output_json $OUT/profiler_demo_$sc.json \
    --trace_dir /tmp/traces/profiler_demo_$sc > $OUT/profiler_demo_$sc.log 2>&1
  echo "profiler_demo $sc rc=$? ($(el) s)"
done
echo "all done after $(el) s"
} 2>&1 | tee $OUT/log.txt
tar czf "$OUT/results.tgz" --exclude='*.onnx' -C "$HASE_HOME" benchmark/results
ls -la "$OUT"
