#!/usr/bin/env bash
# Poll a detached job that packs its own results into JOB/out (benchmark/run_cpu_threads.sh) for up to SECONDS,
# then copy JOB/out into OUT. Usage: bash benchmark/job_out_wait.sh JOB SECONDS OUT
JOB=${1:?job dir}; LIMIT=${2:?seconds}; OUT=${3:?out dir}
end=$(( $(date +%s) + LIMIT ))
while [ ! -e "$JOB/DONE" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 5; done
tail -n 30 "$JOB/log.txt" 2>/dev/null
[ -e "$JOB/DONE" ] && echo "JOB DONE" || echo "JOB STILL RUNNING"
mkdir -p "$OUT"; cp "$JOB"/out/* "$OUT"/ 2>/dev/null; ls -la "$OUT"
