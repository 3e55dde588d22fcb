#!/usr/bin/env bash
# Poll benchmark/run_gpu_corpus.sh for up to SECONDS, then pack what it has so far into OUT (<= 8 files):
# trace tables (compressed), the processes' host calibrations, records, the corpus manifest, the log, the machine's description.
# Usage: bash benchmark/gpu_corpus_wait.sh JOB SECONDS OUT
JOB=${1:?job dir}; LIMIT=${2:?seconds}; OUT=${3:?out dir}
HASE_HOME=${HASE_HOME:-/tmp/hase}
end=$(( $(date +%s) + LIMIT ))
while [ ! -e "$JOB/DONE" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
tail -n 25 "$JOB/log.txt" 2>/dev/null
[ -e "$JOB/DONE" ] && echo "JOB DONE" || echo "JOB STILL RUNNING"
mkdir -p "$OUT"
ON=${OUT_NAME:-$(cat "$JOB/out_name" 2>/dev/null || echo corpus)}   # run_gpu_corpus.sh's results folder
R=$(ls -d $HASE_HOME/benchmark/results/*/"$ON" 2>/dev/null | head -1)
if [ -n "$R" ]; then
  gzip -c "$R"/trace_sessions.csv > "$OUT"/trace_sessions.csv.gz 2>/dev/null
  gzip -c "$R"/trace_nodes.csv > "$OUT"/trace_nodes.csv.gz 2>/dev/null
  cp "$R"/trace_config_*.json "$OUT"/trace_config.json 2>/dev/null
  cp "$R"/calibration.json "$OUT"/calibration.json 2>/dev/null
  [ -e "$R"/clean_sessions.csv ] && gzip -c "$R"/clean_sessions.csv > "$OUT"/clean_sessions.csv.gz
  [ -e "$R"/clean_copy_on.csv ] && gzip -c "$R"/clean_copy_on.csv > "$OUT"/clean_copy_on.csv.gz  # COPY_AB
fi
cp "$JOB"/log.txt "$JOB"/records.json.xz "$OUT"/ 2>/dev/null
# at most 8 files: machine.txt is also the head of log.txt (import_corpus.py takes it from there)
[ "$(ls "$OUT" | wc -l)" -lt 7 ] && cp "$JOB"/machine.txt "$OUT"/ 2>/dev/null
cp "$HASE_HOME"/model_zoo/models/corpus_manifest.json "$OUT"/ 2>/dev/null
ls -la "$OUT"
