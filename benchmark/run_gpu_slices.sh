#!/usr/bin/env bash
# GPU job (interference issue): neighbours that differ only in kernel length (10 us .. 10 ms) at one
# busy fraction, compute- and memory-bound (benchmark/corunners.py slices_*). For each: the load's
# metrics and launch-wait probe (calibrate_loads.py), then measured timelines of a few models next to it
# (trace_run.py, out=load_<name>), and the same models at idle (out=load_idle).
#   source .device/activate.sh && setsid nohup bash benchmark/run_gpu_slices.sh /tmp/job > /tmp/job.log 2>&1 &
# Env: KNOB (busy fraction, default 0.5), NEIGHBOURS (names), SESSIONS (default 2).
set -uo pipefail
JOB=${1:?job dir}; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
source benchmark/gpu_lib.sh
M=$HASE_HOME/model_zoo/models
KNOB=${KNOB:-0.5}
NEIGHBOURS=(${NEIGHBOURS:-slices_compute_10us slices_compute_100us slices_compute_1ms slices_compute_10ms slices_memory_100us slices_memory_1ms})
list() { local IFS=,; echo "[$*]"; }
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
TRACE=(python3 benchmark/trace_run.py --device cuda --set warmup=10 --set profiled_runs=3 --set cupti_runs=6
       --set budget_ms=150 --set min_loops=10 --set "sessions=${SESSIONS:-2}" --set trace_sessions=0)
{
export_model resnet18 1 224; export_model mnasnet1_0 1 224; export_model squeezenet1_1 32 224; export_model resnet50 16 224
FILES=$(list $M/resnet18_bs1_224x224.onnx $M/mnasnet1_0_bs1_224x224.onnx $M/squeezenet1_1_bs32_224x224.onnx $M/resnet50_bs16_224x224.onnx)
echo "stage calibrate"
python3 benchmark/calibrate_loads.py --device cuda --set "calibration.stressor_levels=[0]" \
  --set "calibration.stressor_modes=[matmul]" --set calibration.sample_s=2 --set calibration.probe_ms=300 \
  --set "calibration.corunners={$(for n in "${NEIGHBOURS[@]}"; do printf '%s: [%s], ' "$n" "$KNOB"; done)}" \
  --set out=slices 2>&1 | grep -E "INFO|error" | quiet
echo "stage idle"
"${TRACE[@]}" --set out=load_idle --set "models=$FILES" 2>&1 | quiet
for n in "${NEIGHBOURS[@]}"; do
  echo "stage $n"
  python3 benchmark/corunners.py --name "$n" --knob "$KNOB" --device cuda --duration 0 > "$JOB/$n.out" 2>&1 &
  CP=$!
  for i in $(seq 60); do grep -q READY "$JOB/$n.out" 2>/dev/null && break; sleep 1; done
  sleep 2
  "${TRACE[@]}" --set "out=load_$n" --set "models=$FILES" 2>&1 | quiet
  kill $CP; wait $CP 2>/dev/null
done
echo "stage done"
} 2>&1 | tee "$JOB/log.txt"
R=$HASE_HOME/benchmark/results
cp $R/slices/load_calibration.csv "$JOB"/ 2>/dev/null
python3 - "$R/nvidia-h200" "$JOB/slices_sessions.csv" <<'PY'
import sys, glob, pandas as pd
fs = sorted(glob.glob(sys.argv[1] + "/load_*/trace_sessions.csv"))
pd.concat([pd.read_csv(f).assign(load=f.split("/")[-2][5:]) for f in fs]).to_csv(sys.argv[2], index=False)
PY
touch "$JOB/DONE"
