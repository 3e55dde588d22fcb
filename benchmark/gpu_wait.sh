#!/usr/bin/env bash
# Poll a detached GPU job (benchmark/run_gpu_trace.sh) for up to SECONDS, then copy what it has written
# so far into OUT (at most 8 files come back from the device machine: the CSVs, the log, the records,
# and the measured traces as one tar). Usage: bash benchmark/gpu_wait.sh JOB SECONDS OUT
JOB=${1:?job dir}; LIMIT=${2:?seconds}; OUT=${3:?out dir}
HASE_HOME=${HASE_HOME:-/tmp/hase}
end=$(( $(date +%s) + LIMIT ))
while [ ! -e "$JOB/DONE" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 10; done
tail -n 40 "$JOB/log.txt" 2>/dev/null
[ -e "$JOB/DONE" ] && echo "JOB DONE" || echo "JOB STILL RUNNING"
mkdir -p "$OUT"
R=$(ls -d $HASE_HOME/benchmark/results/*/timeline 2>/dev/null | head -1)
if [ -n "$R" ]; then
  cp "$R"/trace_sessions.csv "$OUT"/ 2>/dev/null
  gzip -c "$R"/trace_nodes.csv > "$OUT"/trace_nodes.csv.gz 2>/dev/null
  (cd "$R" && tar czf "$OUT"/traces.tar.gz traces trace_config_*.json 2>/dev/null)
fi
cp "$JOB"/log.txt "$JOB"/records.tar "$OUT"/ 2>/dev/null
ls -la "$OUT"
