#!/usr/bin/env bash
# GPU job: measured timelines and session-to-session variance (benchmark/trace_run.py) of the zoo, the
# extra models and ten architectures outside both (batch 1 and 32 at 224 px), 5 fresh sessions each,
# then the CUDA records of every model (phase 2) for offline prediction.
# Runs long: start it detached, then poll (the device tool's calls last at most 10 minutes):
#   source .device/activate.sh && setsid nohup bash benchmark/run_gpu_trace.sh /tmp/job > /tmp/job.log 2>&1 &
#   bash benchmark/gpu_wait.sh /tmp/job 540 $OUT      # waits, then packs what is done into $OUT
# Extra trace_run settings can be passed after the folder: --set cudnn_conv_algo_search=HEURISTIC ...
set -uo pipefail
JOB=${1:?job dir}; shift; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source benchmark/gpu_lib.sh
M=$HASE_HOME/model_zoo/models
OUTSIDE=(squeezenet1_1 resnext50_32x4d regnet_x_400mf mnasnet1_0 googlenet mobilenet_v3_large wide_resnet50_2
         efficientnet_b1 shufflenet_v2_x0_5 resnet101)
TRACE=(python3 benchmark/trace_run.py --device cuda --set warmup=10 --set profiled_runs=5 --set cupti_runs=10
       --set budget_ms=200 "$@")
list() { local IFS=,; echo "[$*]"; }
{
echo "stage outside-export $(el)"
python3 model_zoo/torchvision_exporter.py --device cuda --set "models=$(list "${OUTSIDE[@]}")" \
  --set "batch_sizes=[1,32]" --set "resolutions=[224]" 2>&1 | grep -E "error|ok on"
echo "stage outside-trace $(el)"
"${TRACE[@]}" --set "models=$(list "${OUTSIDE[@]/#/$M/}" | sed 's/,/_bs*.onnx,/g; s/]$/_bs*.onnx]/')" 2>&1 | grep -vE "Warning|_warn_once|plugin EP"
echo "stage zoo-export $(el)"
export_zoo; export_extra
echo "stage zoo-trace $(el)"
"${TRACE[@]}" 2>&1 | grep -vE "Warning|_warn_once|plugin EP"
echo "stage records $(el)"
python3 ort_analysis/fusion_detector.py --device cuda 2>&1 | grep -E "error" 
pack_records "$JOB"
echo "stage done $(el)"
} 2>&1 | tee "$JOB/log.txt"
touch "$JOB/DONE"
