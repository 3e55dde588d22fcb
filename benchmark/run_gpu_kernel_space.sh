#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job kernel_space` (--dry-run prints the command).
# GPU job (issue 13, kernel space): sample kernel configurations beyond the zoo's (kernel_model/kernel_sampler.py,
# CUDA EP), then measure them AND the zoo's kernels (the committed CUDA records) packed many per session
# (benchmark/multi_kernel_runner.py: disjoint subgraphs of one model, per-kernel GPU time from CUPTI records
# attributed to ORT's nodes). Stays under ~9 minutes: the runner stops between packs after MINUTES.
#   source .device/activate.sh && bash benchmark/run_gpu_kernel_space.sh /tmp/job
# Env: SEED (sampler seed, 0), MINUTES (runner budget per measuring stage, 6), CHUNK (kernels per pack, 192),
#      RUNS (profiled runs, 10), RUNNER_SETS (extra "--set k=v" words for the runner), ZOO (1 = also the zoo's records, 0 = sampled only), SAMPLE_SETS (extra
#      "--set k=v" words for the sampler), PEAKS=1 (first benchmark/peak_bench.py: peaks.json),
#      ADAPTIVE_ERRORS=<errors csv> (second stage: neighbours of its worst sampled kernels, ADAPTIVE_SETS for
#      the sampler; measured first, into kernel_space_adaptive/), REPEAT=0 (skip the prior+zoo measurement:
#      with ADAPTIVE_ERRORS, only the adaptive kernels). A rerun with the same HASE_HOME resumes.
# Writes into the job folder: kernels.csv (one row per kernel, its own Kernel_ID), throughput.json (kernel
# measurements/s and seconds per phase), resolved_config.json, the sampled record (gzipped), log.txt; with
# ADAPTIVE_ERRORS also adaptive_kernels.csv, adaptive_throughput.json; with PEAKS peaks.json.
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
JOB=${1:?job dir}; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
SEED=${SEED:-0}
SDIR=$HASE_HOME/ort_analysis/ort_kernel_record/sampled
REC=$SDIR/kspace_s$SEED.cuda.json
AREC=$SDIR/kspace_s${SEED}_adaptive.cuda.json
RECORDS=(--record "$REC")
if [ "${ZOO:-1}" = 1 ]; then   # the committed zoo records travel as one records.json.xz: one file per record here
  ZR=$HASE_HOME/zoo_records; mkdir -p "$ZR"
  python3 -c "import json, sys; from hase.utils.paths import read_json
[open(f'{sys.argv[2]}/{m}.cuda.json', 'w').write(json.dumps(r)) for m, r in read_json(sys.argv[1], 'records').items()]" \
    ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz "$ZR"
  RECORDS+=(--record "$ZR/*.cuda.json")
fi
RUNNER=(python3 benchmark/multi_kernel_runner.py --device cuda --max-minutes "${MINUTES:-6}"
        --set "chunk=${CHUNK:-192}" --set "runs=${RUNS:-10}" ${RUNNER_SETS:-})
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
{
if [ "${PEAKS:-0}" = 1 ]; then
  echo "stage peaks $(el)"
  python3 benchmark/peak_bench.py --device cuda 2>&1 | quiet
fi
echo "stage sample $(el)"
python3 kernel_model/kernel_sampler.py --device cuda --set "seed=$SEED" ${SAMPLE_SETS:-} 2>&1 | quiet
if [ -n "${ADAPTIVE_ERRORS:-}" ]; then
  echo "stage sample-adaptive $(el)"
  python3 kernel_model/kernel_sampler.py --device cuda --set "seed=$SEED" ${SAMPLE_SETS:-} \
    --set "adaptive.errors_csv=$ADAPTIVE_ERRORS" --set "adaptive.records=[$REC]" ${ADAPTIVE_SETS:-} 2>&1 | quiet
  echo "stage measure-adaptive $(el)"
  "${RUNNER[@]}" --record "$AREC" --set out=kernel_space_adaptive 2>&1 | quiet
fi
if [ "${REPEAT:-1}" = 1 ]; then
  echo "stage measure $(el)"
  "${RUNNER[@]}" "${RECORDS[@]}" 2>&1 | quiet
fi
echo "stage done $(el)"
} 2>&1 | tee "$JOB/log.txt"
R=$(ls -d "$HASE_HOME"/benchmark/results/*/ 2>/dev/null | head -1)
if [ -n "$R" ]; then
  cp "$R"kernel_space/kernels.csv "$R"kernel_space/throughput.json "$R"kernel_space/resolved_config.json "$JOB"/ 2>/dev/null
  cp "$R"kernel_space_adaptive/kernels.csv "$JOB"/adaptive_kernels.csv 2>/dev/null
  cp "$R"kernel_space_adaptive/throughput.json "$JOB"/adaptive_throughput.json 2>/dev/null
  cp "$R"peaks.json "$JOB"/ 2>/dev/null
fi
gzip -c "$REC" > "$JOB/kspace_s$SEED.cuda.json.gz" 2>/dev/null
[ -e "$AREC" ] && gzip -c "$AREC" > "$JOB/kspace_s${SEED}_adaptive.cuda.json.gz"
touch "$JOB/DONE"
