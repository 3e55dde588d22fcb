#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job pinning` (--dry-run prints the command).
# GPU job: does pinning the process to one CPU core near the GPU narrow the session-to-session spread?
# Dispatch-bound models (batch 1), SESSIONS fresh sessions each, unpinned then pinned (taskset), with
# benchmark/trace_run.py; also records the CPU each session ran on. Detached + polled like run_gpu_trace.sh:
#   source .device/activate.sh && setsid nohup bash benchmark/run_gpu_pinning.sh /tmp/job > /tmp/job.log 2>&1 &
#   bash benchmark/gpu_wait.sh /tmp/job 540 $OUT
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
JOB=${1:?job dir}; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
source benchmark/gpu_lib.sh
M=$HASE_HOME/model_zoo/models
MODELS=(resnet18 mnasnet1_0 squeezenet1_1 regnet_x_400mf mobilenet_v3_large)
list() { local IFS=,; echo "[$*]"; }
{
nvidia-smi topo -m | head -4; lscpu | grep -E "^CPU\(s\)|NUMA|Model name|MHz"
for m in "${MODELS[@]}"; do export_model "$m" 1 224; done
FILES=$(list $(for m in "${MODELS[@]}"; do echo "$M/${m}_bs1_224x224.onnx"; done))
# the first CPU of the GPU's NUMA affinity (nvidia-smi topo: "CPU Affinity" column), else CPU 2
CPU=$(nvidia-smi topo -m 2>/dev/null | awk '/^GPU0/ {for (i=1;i<=NF;i++) if ($i ~ /^[0-9]+-[0-9]+/) {split($i,a,"[-,]"); print a[1]+2; exit}}')
CPU=${CPU:-2}; echo "pinned CPU $CPU"
for mode in unpinned pinned; do
  PRE=(); [ "$mode" = pinned ] && PRE=(taskset -c "$CPU")
  echo "stage $mode"
  "${PRE[@]}" python3 benchmark/trace_run.py --device cuda --set warmup=10 --set profiled_runs=5 --set cupti_runs=10 \
    --set budget_ms=200 --set min_loops=10 --set sessions="${SESSIONS:-8}" --set trace_sessions=0 --set out="pin_$mode" \
    --set "models=$FILES" 2>&1 | grep -vE "Warning|_warn_once|plugin EP"
done
echo "stage done"
} 2>&1 | tee "$JOB/log.txt"
R=$HASE_HOME/benchmark/results/nvidia-h200
cp "$R"/pin_unpinned/trace_sessions.csv "$JOB"/unpinned_sessions.csv; cp "$R"/pin_pinned/trace_sessions.csv "$JOB"/pinned_sessions.csv
touch "$JOB/DONE"
