#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job trace` (--dry-run prints the command).
# GPU job: measured timelines and session-to-session variance (benchmark/trace_run.py) of the zoo, the
# extra models and ten architectures outside both (batch 1 and 32 at 224 px), fresh sessions each,
# then the CUDA records of the outside models (phase 2) for offline prediction.
# Runs long: start it detached, then poll (the device tool's calls last at most 10 minutes):
#   source .device/activate.sh && setsid nohup bash benchmark/run_gpu_trace.sh /tmp/job > /tmp/job.log 2>&1 &
#   bash benchmark/gpu_wait.sh /tmp/job 540 $OUT      # waits, then packs what is done into $OUT
# Env: SESSIONS (default 5) fresh sessions per model with ORT's default EXHAUSTIVE search;
#      ALT_ALGOS (e.g. "HEURISTIC DEFAULT") then ALT_SESSIONS (default 3) sessions with each of those;
#      ZOO=0: only the outside architectures (a second GPU's held-out check); OUTSIDE_ARCHS="a b ..." and
#      BATCHES="1 32": other outside architectures (torchvision names), e.g. a fresh set no fit has looked at.
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
JOB=${1:?job dir}; shift; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
source benchmark/gpu_lib.sh
M=$HASE_HOME/model_zoo/models
# OUTSIDE_ARCHS / BATCHES: another set of outside architectures (a fresh held-out check), batch sizes at 224 px
OUTSIDE=(${OUTSIDE_ARCHS:-squeezenet1_1 resnext50_32x4d regnet_x_400mf mnasnet1_0 googlenet mobilenet_v3_large
         wide_resnet50_2 efficientnet_b1 shufflenet_v2_x0_5 resnet101})
TRACE=(python3 benchmark/trace_run.py --device cuda --set warmup=10 --set profiled_runs=5 --set cupti_runs=10
       --set budget_ms=200 --set min_loops=10 "$@")
list() { local IFS=,; echo "[$*]"; }
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
{
echo "stage outside-export $(el)"
# one call per config: a model whose validation fails must not stop the others
for m in "${OUTSIDE[@]}"; do for b in ${BATCHES:-1 32}; do export_model "$m" "$b" 224; done; done
if [ "${ZOO:-1}" = 1 ]; then echo "stage zoo-export $(el)"; export_zoo; export_extra; fi
echo "stage trace $(el)"
"${TRACE[@]}" --set "sessions=${SESSIONS:-5}" 2>&1 | quiet
echo "stage records $(el)"
mapfile -t OUTF < <(for m in "${OUTSIDE[@]}"; do ls "$M/${m}"_bs*.onnx 2>/dev/null | grep -v "\.opt\."; done)
python3 ort_analysis/fusion_detector.py --device cuda --set "models=$(list "${OUTF[@]}")" 2>&1 | grep -E "error"
pack_records "$JOB"
for algo in ${ALT_ALGOS:-}; do
  echo "stage trace-$algo $(el)"
  "${TRACE[@]}" --set "sessions=${ALT_SESSIONS:-3}" --set "cudnn_conv_algo_search=$algo" --set trace_sessions=0 2>&1 | quiet
done
echo "stage done $(el)"
} 2>&1 | tee "$JOB/log.txt"
touch "$JOB/DONE"
