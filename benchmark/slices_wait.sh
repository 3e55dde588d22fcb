#!/usr/bin/env bash
# Poll a detached run_gpu_slices.sh job (slices, neighbour_labels) for up to SECONDS, then pack what its finished
# stages hold (run_gpu_slices.sh JOB pack) and copy the tables into OUT (6 files, 7 with the corpus models'
# records.json.xz, 8 with PAIRED=1's paired.csv: the GPU machine returns at most 8).
# Usage: bash benchmark/slices_wait.sh JOB SECONDS OUT
JOB=${1:?job dir}; LIMIT=${2:?seconds}; OUT=${3:?out dir}
end=$(( $(date +%s) + LIMIT ))
while [ ! -e "$JOB/DONE" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 10; done
grep -E "^stage|error" "$JOB/log.txt" 2>/dev/null | tail -n 20
[ -e "$JOB/DONE" ] && echo "JOB DONE" || { echo "JOB STILL RUNNING"; bash "$(dirname "$0")/run_gpu_slices.sh" "$JOB" pack; }
mkdir -p "$OUT"
cp "$JOB"/slices_sessions.csv "$JOB"/slices_nodes_median.csv.xz "$JOB"/load_calibration.csv "$JOB"/log.txt "$JOB"/records.json.xz "$JOB"/paired.csv \
   "$JOB"/machine.txt "${HASE_HOME:-/tmp/hase}"/benchmark/results/slices/load_calibration.md "$OUT"/ 2>/dev/null
ls -la "$OUT"
