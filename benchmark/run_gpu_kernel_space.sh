#!/usr/bin/env bash
# GPU job (issue 13, kernel space): sample kernel configurations beyond the zoo's (kernel_model/kernel_sampler.py,
# CUDA EP), then measure them AND the zoo's kernels (the committed CUDA records) packed many per session
# (benchmark/multi_kernel_runner.py: disjoint subgraphs of one model, per-kernel GPU time from CUPTI records
# attributed to ORT's nodes). Stays under ~9 minutes: the runner stops between packs after MINUTES.
#   source .device/activate.sh && bash benchmark/run_gpu_kernel_space.sh /tmp/job
# Env: SEED (sampler seed, 0), MINUTES (runner budget, 6), CHUNK (kernels per pack, 48), RUNS (profiled runs, 20),
#      ZOO (1 = also the zoo's records, 0 = sampled only), SAMPLE_SETS (extra "--set k=v" words for the sampler). A rerun with the same HASE_HOME resumes.
# Writes into the job folder: kernels.csv (one row per kernel, its own Kernel_ID), throughput.json (kernel
# measurements/s and seconds per phase), resolved_config.json, the sampled record (gzipped), log.txt.
set -uo pipefail
JOB=${1:?job dir}; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
SEED=${SEED:-0}
REC=$HASE_HOME/ort_analysis/ort_kernel_record/sampled/kspace_s$SEED.cuda.json
RECORDS=(--record "$REC")
[ "${ZOO:-1}" = 1 ] && RECORDS+=(--record "ort_analysis/ort_kernel_record/nvidia-h200/*.cuda.json.gz")
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
{
echo "stage sample $(el)"
python3 kernel_model/kernel_sampler.py --device cuda --set "seed=$SEED" ${SAMPLE_SETS:-} 2>&1 | quiet
echo "stage measure $(el)"
python3 benchmark/multi_kernel_runner.py --device cuda "${RECORDS[@]}" --max-minutes "${MINUTES:-6}" \
  --set "chunk=${CHUNK:-48}" --set "runs=${RUNS:-20}" 2>&1 | quiet
echo "stage done $(el)"
} 2>&1 | tee "$JOB/log.txt"
OUTD=$(ls -d "$HASE_HOME"/benchmark/results/*/kernel_space 2>/dev/null | head -1)
if [ -n "$OUTD" ]; then
  cp "$OUTD/kernels.csv" "$OUTD/throughput.json" "$OUTD/resolved_config.json" "$JOB"/ 2>/dev/null
fi
gzip -c "$REC" > "$JOB/kspace_s$SEED.cuda.json.gz" 2>/dev/null
touch "$JOB/DONE"
