#!/usr/bin/env bash
# CPU EP job (issue 12, CPU side): measured timelines of the training architectures (zoo + phase 4 extras) and
# of the ten architectures outside them that run_gpu_trace.sh uses (OUTSIDE), on ORT's CPU EP only, with a
# FIXED intra-op thread count (CPU EP latency depends on it; the prediction must use the same):
#   1. export (phase 1, --device cpu) every architecture at each batch in BATCHES at RES px, JOBS at a time
#   2. phase 2 CPU records of all of them (fusion_detector --device cpu), JOBS at a time
#   3. benchmark/trace_run.py --device cpu --set threads=THREADS --set sessions=SESSIONS (fresh sessions; on CPU
#      EP ORT's profiler node time is the compute, the plain session.run loop the label)
#   4. (KERNELS=1) per-kernel CPU times, packed: a kernel_sampler CPU sample (limits.max_flops=KFLOPS) and the
#      TRAINING architectures' records only (never the outside ones), multi_kernel_runner --device cpu with the
#      same threads, time-boxed to what is left of DEADLINE_S
# Runs long: start it detached, then poll (the device tool's calls last at most 10 minutes):
#   source .device/activate.sh && (setsid nohup bash benchmark/run_cpu_timeline.sh /tmp/job > /tmp/job.log 2>&1 &)
#   while [ ! -e /tmp/job/DONE ] && [ $SECONDS -lt 540 ]; do sleep 5; done
#   [ -e /tmp/job/DONE ] || PACK_ONLY=1 bash benchmark/run_cpu_timeline.sh /tmp/job; cp /tmp/job/out/* $OUT/
# Resumable with the same HASE_HOME (exports, records, sessions and kernels already made are skipped); after
# every stage what is done is packed into JOB/out/ (<= 8 files: trace tables gzipped, records.tar, kernels.csv.gz,
# meta.tar.gz with configs/throughput/lscpu and the processes' calibration.json (issue 23), log.txt).
# Env: THREADS (8), SESSIONS (3), BATCHES ("1 8"), RES (224), JOBS (4 parallel exports/analyses), KERNELS (1),
#      KPER (sampler's n_per_type, 12), KFLOPS (sampler's limits.max_flops, 2000000000: an integer, YAML reads 2e9 as text), DEADLINE_S (480: the kernel stage gets what is left),
#      ZOO_ARCHS / OUTSIDE_ARCHS (space-separated, to run a smaller set: a local check).
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
JOB=${1:?job dir}; shift; mkdir -p "$JOB/out"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
THREADS=${THREADS:-8}; SESSIONS=${SESSIONS:-3}; BATCHES=${BATCHES:-"1 8"}; RES=${RES:-224}; JOBS=${JOBS:-4}
DEADLINE_S=${DEADLINE_S:-480}; PY=${PY:-python3}
read -r -a ZOO <<< "${ZOO_ARCHS:-resnet18 resnet34 resnet50 mobilenet_v2 vgg11 densenet121 efficientnet_b0 vit_b_16 \
mobilenet_v3_small regnet_y_400mf convnext_tiny shufflenet_v2_x1_0}"
read -r -a OUTSIDE <<< "${OUTSIDE_ARCHS:-squeezenet1_1 resnext50_32x4d regnet_x_400mf mnasnet1_0 googlenet \
mobilenet_v3_large wide_resnet50_2 efficientnet_b1 shufflenet_v2_x0_5 resnet101}"
M=$HASE_HOME/model_zoo/models R=$HASE_HOME/ort_analysis/ort_kernel_record
SAMPLE=$R/sampled/kspace_s0.cpu.json
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
list() { local IFS=,; echo "[$*]"; }
files_of() { for a in "$@"; do for b in $BATCHES; do echo "$M/${a}_bs${b}_${RES}x${RES}.onnx"; done; done; }

# one export per architecture (a model whose validation fails must not stop the others), JOBS at a time
export_arch() {
  OMP_NUM_THREADS=$(( 16 / JOBS )) $PY model_zoo/torchvision_exporter.py --device cpu --set "models=[$1]" \
    --set "batch_sizes=[${BATCHES// /,}]" --set "resolutions=[$RES]" 2>&1 | grep -E "error|ok on"
}
# records of the exported files of one architecture that have none yet
record_arch() {
  local todo=()
  for f in $(files_of "$1"); do
    [ -e "$f" ] && [ ! -e "$R/$(basename "$f" .onnx).cpu.json" ] && todo+=("$f")
  done
  [ ${#todo[@]} -eq 0 ] || OMP_NUM_THREADS=$(( 16 / JOBS )) $PY ort_analysis/fusion_detector.py --device cpu \
    --set "models=$(list "${todo[@]}")" 2>&1 | grep -E "error|kernels"
}
export -f export_arch record_arch files_of list
export M R BATCHES RES JOBS PY

pack() {
  local T; T=$(ls -d "$HASE_HOME"/benchmark/results/cpu-*/timeline 2>/dev/null | head -1)
  if [ -n "$T" ] && [ -e "$T/trace_sessions.csv" ]; then
    gzip -c "$T/trace_sessions.csv" > "$JOB/out/trace_sessions.csv.gz"
    gzip -c "$T/trace_nodes.csv" > "$JOB/out/trace_nodes.csv.gz"
  fi
  if ls "$R"/*.cpu.json >/dev/null 2>&1; then
    (cd "$R" && for f in *.cpu.json; do [ "$f.gz" -nt "$f" ] || gzip -kf "$f"; done && tar cf "$JOB/out/records.tar" *.cpu.json.gz)
  fi
  local K; K=$(ls -d "$HASE_HOME"/benchmark/results/cpu-*/kernel_space 2>/dev/null | head -1)
  [ -n "$K" ] && [ -e "$K/kernels.csv" ] && gzip -c "$K/kernels.csv" > "$JOB/out/kernels.csv.gz"
  lscpu > "$JOB/lscpu.txt" 2>/dev/null
  tar czf "$JOB/out/meta.tar.gz" -C "$HASE_HOME" --ignore-failed-read \
    $(cd "$HASE_HOME" && ls -d benchmark/results/cpu-*/timeline/trace_config_*.json benchmark/results/cpu-*/timeline/traces \
      benchmark/results/cpu-*/timeline/calibration.json \
      benchmark/results/cpu-*/kernel_space/throughput.json benchmark/results/cpu-*/kernel_space/resolved_config.json \
      ort_analysis/ort_kernel_record/sampled/kspace_s0.cpu.json 2>/dev/null) -C "$JOB" lscpu.txt 2>/dev/null
  cp "$JOB/log.txt" "$JOB/out/" 2>/dev/null
}

if [ "${PACK_ONLY:-0}" = 1 ]; then pack; exit 0; fi   # what is done so far into JOB/out (job still running)
{
echo "stage start threads=$THREADS sessions=$SESSIONS batches=[$BATCHES] res=$RES nproc=$(nproc) $(el)"
echo "stage export $(el)"
printf '%s\n' "${ZOO[@]}" "${OUTSIDE[@]}" | xargs -P "$JOBS" -I{} bash -c 'export_arch {}'
echo "stage records $(el)"
printf '%s\n' "${ZOO[@]}" "${OUTSIDE[@]}" | xargs -P "$JOBS" -I{} bash -c 'record_arch {}'
pack
echo "stage trace $(el)"
mapfile -t ALL < <(for f in $(files_of "${OUTSIDE[@]}" "${ZOO[@]}"); do [ -e "$f" ] && echo "$f"; done)
$PY benchmark/trace_run.py --device cpu --set "models=$(list "${ALL[@]}")" --set "threads=$THREADS" \
  --set "sessions=$SESSIONS" --set warmup=2 --set profiled_runs=3 --set budget_ms=100 --set min_loops=5 \
  --set "modes=[e2e]" "$@" 2>&1 | quiet
pack
left=$(( DEADLINE_S - $(el) ))
if [ "${KERNELS:-1}" = 1 ] && [ "$left" -gt 45 ]; then
  echo "stage kernels $(el) (budget ${left}s)"
  $PY kernel_model/kernel_sampler.py --device cpu --set seed=0 --set "limits.max_flops=${KFLOPS:-2000000000}" \
    --set "n_per_type=${KPER:-12}" 2>&1 | quiet | tail -2
  RECS=()   # the training records first: the runner is time-boxed, the sample is what may be cut
  for a in "${ZOO[@]}"; do RECS+=(--record "$R/${a}_bs*.cpu.json"); done
  RECS+=(--record "$SAMPLE")
  $PY benchmark/multi_kernel_runner.py --device cpu "${RECS[@]}" --max-minutes "$(awk -v l="$left" 'BEGIN{print (l - 25) / 60}')" \
    --set "threads=$THREADS" --set runs=10 --set warmup=2 --set wall_loops=0 2>&1 | quiet | tail -4
fi
echo "stage done $(el)"
} 2>&1 | tee -a "$JOB/log.txt"
pack
touch "$JOB/DONE"
