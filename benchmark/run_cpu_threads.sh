#!/usr/bin/env bash
# CPU EP job (issue 23 item 5): the fresh set frozen in benchmark/results/cpu-amd-epyc/threads/fresh_set.yaml on the
# CPU this runs on, at each intra-op thread count in THREADS, with trace_run's process calibration (node-size ladder
# included): what inference/judge_cpu_transfer.py needs to judge a CPU timeline model on a CPU it never saw.
#   1. export the set (model_zoo/build_corpus.py, the frozen archs, max_configs, max_gflop), SKIP left out
#   2. phase 2 CPU records on this CPU (NCHWc blocking follows the ISA, so records are per CPU)
#   3. benchmark/trace_run.py --device cpu --set threads=T, SESSIONS fresh sessions, out=tT, for T in THREADS
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job cpu_threads` (detached, then polled by job_out_wait.sh).
# HASE_HOME defaults to /tmp/hase_cpu: its model folder must hold only this set.
# Packs into JOB/out after each stage: results.tar.xz (trace tables, calibration.json, configs), records.json.xz,
# log.txt, lscpu.txt. Env: THREADS ("2 1"), SESSIONS (3), PASSES (0: SESSIONS back to back; N: N shuffled passes of
# one session a model, in tT/p<k>/), SKIP ("cnn_plain-s9000": its optimized model is over
# protobuf's 2 GB), WORKERS (8).
set -uo pipefail
JOB=${1:?job dir}; mkdir -p "$JOB/out"
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
export HASE_HOME=${HASE_HOME:-/tmp/hase_cpu} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
SET=benchmark/results/cpu-amd-epyc/threads/fresh_set.yaml
M=$HASE_HOME/model_zoo/models
ARCHS=$(python3 - "$SET" "${SKIP:-cnn_plain-s9000}" <<'PY'
import sys, yaml
s = yaml.safe_load(open(sys.argv[1])); skip = set(sys.argv[2].split())
print("[" + ", ".join(a for a in s["archs"] if a not in skip) + "]")
print(s["max_configs"], s["max_gflop"])
PY
)
read -r LIST <<< "$(echo "$ARCHS" | sed -n 1p)"; read -r MC MG <<< "$(echo "$ARCHS" | sed -n 2p)"
pack() {
  local R; R=$(ls -d "$HASE_HOME"/benchmark/results/cpu-* 2>/dev/null | head -1)
  [ -n "$R" ] && tar cJf "$JOB/out/results.tar.xz" -C "$R" --exclude=traces . 2>/dev/null
  python3 - "$JOB/out/records.json.xz" <<'PY'
import json, lzma, sys
from hase.utils import paths
recs = {p.name[:-len(".cpu.json")]: json.loads(p.read_text()) for p in sorted(paths.kernel_record_dir().glob("*.cpu.json"))}
if recs:
    open(sys.argv[1], "wb").write(lzma.compress(json.dumps(recs).encode()))
PY
  cp "$M/corpus_manifest.json" "$JOB/out/" 2>/dev/null; cp "$JOB/log.txt" "$JOB/out/" 2>/dev/null
  lscpu > "$JOB/out/lscpu.txt"
}
{
echo "stage export $(el) archs=$LIST max_configs=$MC max_gflop=$MG"
python3 model_zoo/build_corpus.py --set "archs=$LIST" --set "max_configs=$MC" --set "max_gflop=$MG" \
  --set "workers=${WORKERS:-8}" 2>&1 | grep -E "failed|done|rror"
ls "$M"/*.onnx | grep -v "\.opt\." > "$JOB/models.txt"; echo "models: $(wc -l < "$JOB/models.txt")"
echo "stage records $(el)"
split -n "r/${WORKERS:-8}" -d "$JOB/models.txt" "$JOB/rec_"
for f in "$JOB"/rec_*; do
  args=(); while read -r m; do args+=(--model "$m"); done < "$f"
  OMP_NUM_THREADS=2 python3 ort_analysis/fusion_detector.py --device cpu "${args[@]}" > "$f.log" 2>&1 &
done
wait; grep -hiE "error" "$JOB"/rec_*.log | head
pack
trace() {   # trace MODEL_LIST T SESSIONS OUT
  python3 benchmark/trace_run.py --device cpu --set "model_list=$1" --set "threads=$2" \
    --set "sessions=$3" --set "out=$4" --set warmup=3 --set profiled_runs=5 --set budget_ms=300 \
    --set min_loops=5 --set max_loops=200 --set keep_going=true --set idle_check_s=30 --set idle_window_s=1.0 \
    2>&1 | grep -vE "Warning|warn" | awk 'NR % 10 == 0 || /rror|idle/'
}
for T in ${THREADS:-2 1}; do
  if [ "${PASSES:-0}" -gt 0 ]; then
    # PASSES shuffled passes of one session a model (order seeded by the pass): a model's sessions spread over the
    # whole run. On a 2-vCPU VM whose speed switches every 20-60 s, back-to-back sessions share one state, and one
    # run of a model is ~12% from its median over runs (benchmark/results/cpu-amd-epyc/episodes/, fresh_t2_s46/)
    for k in $(seq 0 $((PASSES - 1))); do
      echo "stage trace t$T pass $k $(el)"
      python3 -c "import random, sys; l = open(sys.argv[1]).read().split(); random.Random(int(sys.argv[2])).shuffle(l); print(chr(10).join(l))" \
        "$JOB/models.txt" "$k" > "$JOB/models_p$k.txt"
      trace "$JOB/models_p$k.txt" "$T" 1 "t$T/p$k"
      pack
    done
  else
    echo "stage trace t$T $(el)"
    trace "$JOB/models.txt" "$T" "${SESSIONS:-3}" "t$T"
    pack
  fi
done
echo "stage done $(el)"
} 2>&1 | tee -a "$JOB/log.txt"
pack; touch "$JOB/DONE"
