#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job slices` (--dry-run prints the command).
# GPU job (interference issue): neighbours that differ only in kernel length (10 us .. 10 ms) at one
# busy fraction, compute- and memory-bound (benchmark/corunners.py slices_*). For each: the load's
# metrics and launch-wait probe (calibrate_loads.py), then measured timelines of a few models next to it
# (trace_run.py, out=load_<name>), and the same models at idle before and after (out=load_idle, load_idle_end).
#   source .device/activate.sh && setsid nohup bash benchmark/run_gpu_slices.sh /tmp/job > /tmp/job.log 2>&1 &
# Env: LOADS, MODELS (below), KNOB (busy fraction of the default loads, 0.5), SESSIONS (default 2),
#      CORPUS_ARCHS ("": a YAML list of generator architectures, e.g. "[vit-s20000, swin-s20000, encoder-s20000]",
#      exported by model_zoo/build_corpus.py with CORPUS_MAX_CONFIGS (2) configs each and measured beside MODELS;
#      their CUDA records are made here and packed as records.json.xz: the "held-out arch" split of
#      inference/fit_interference.py. Seeds 20000 and up are in no corpus split: an exam's models would show their
#      idle residuals before the exam is scored).
#      PAIRED (0; 1: after the idle stage, benchmark/paired_labels.py next to every load, SESSIONS fresh sessions:
#      idle runs of the same session seconds apart, the neighbour paused (SIGSTOP), into paired.csv, the label
#      fit_interference.py reads with label=paired), TRACE_LOADS (1; 0: no traced stage per load: idle, the paired
#      labels, idle_end).
#      WARM_UP (0; 1: one untimed clean pass over the models before the idle stage, $JOB/warm_up.csv, not judged).
# Resumes: trace_run skips sessions it has, calibration runs once per job folder.
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
JOB=${1:?job dir}; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
source benchmark/gpu_lib.sh
M=$HASE_HOME/model_zoo/models
# LOADS: "name:knob ..." (default: the slices neighbours at KNOB); MODELS: "arch:batch ..." at 224 px
KNOB=${KNOB:-0.5}
LOADS=(${LOADS:-slices_compute_10us:$KNOB slices_compute_100us:$KNOB slices_compute_1ms:$KNOB slices_compute_10ms:$KNOB slices_memory_100us:$KNOB slices_memory_1ms:$KNOB})
MODELS=(${MODELS:-resnet18:1 mnasnet1_0:1 squeezenet1_1:32 resnet50:16})
list() { local IFS=,; echo "[$*]"; }
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
TRACE=(python3 benchmark/trace_run.py --device cuda --set warmup=10 --set profiled_runs=3 --set cupti_runs=6
       --set budget_ms=150 --set min_loops=10 --set "sessions=${SESSIONS:-2}" --set trace_sessions=0)
# the tables of whatever stages are done (alone: run_gpu_slices.sh JOB pack, e.g. before the call limit)
pack() {
R=$HASE_HOME/benchmark/results
cp $R/slices/load_calibration.csv "$JOB"/ 2>/dev/null
G=$(ls -d "$R"/nvidia-* 2>/dev/null | head -1)  # the GPU it ran on (trace_run names the folder)
python3 - "$G" "$JOB/slices_sessions.csv" <<'PY'
import sys, glob, pandas as pd
fs = sorted(glob.glob(sys.argv[1] + "/load_*/trace_sessions.csv"))
pd.concat([pd.read_csv(f).assign(load=f.split("/")[-2][5:]) for f in fs]).to_csv(sys.argv[2], index=False)
PY
# per-node medians over the sessions (the per-session sums are in slices_sessions.csv): small enough to commit
python3 - "$G" "$JOB/slices_nodes_median.csv.xz" <<'PY'
import sys, glob, pandas as pd
fs = sorted(glob.glob(sys.argv[1] + "/load_*/trace_nodes.csv"))
n = pd.concat([pd.read_csv(f, usecols=["model", "session", "node", "op", "host_us", "gpu_us", "gpu_idle_before_us",
                                       "launches"]).assign(load=f.split("/")[-2][5:]) for f in fs])
g = n.groupby(["load", "model", "node", "op"], sort=False)
out = g[["host_us", "gpu_us", "gpu_idle_before_us", "launches"]].median()
out["sessions"] = g.size()
out.reset_index().to_csv(sys.argv[2], index=False, float_format="%.4g")
PY
}
[ "${2:-}" = pack ] && { pack; exit 0; }
[ -e "$JOB/machine.txt" ] || { date -u; nvidia-smi --query-gpu=name,uuid,serial,driver_version,clocks.max.sm \
  --format=csv; lscpu | grep -E "Model name|^CPU\(s\)"; hostname; } > "$JOB/machine.txt" 2>&1   # provenance
{
for mb in "${MODELS[@]}"; do export_model "${mb%%:*}" "${mb##*:}" 224; done
CORPUS_FILES=()
if [ -n "${CORPUS_ARCHS:-}" ]; then   # generator architectures outside every split, with their CUDA records
  echo "stage corpus_export"
  python3 model_zoo/build_corpus.py --set "archs=$CORPUS_ARCHS" --set "max_configs=${CORPUS_MAX_CONFIGS:-2}" \
    --set "workers=${WORKERS:-14}" 2>&1 | grep -E "failed|done|rror"
  PAT=$(python3 -c "import sys, yaml; print('|'.join('/' + a + '_bs' for a in yaml.safe_load(sys.argv[1])))" "$CORPUS_ARCHS")
  mapfile -t CORPUS_FILES < <(ls "$M"/*.onnx | grep -v "\.opt\." | grep -E "$PAT")
  echo "corpus models: ${#CORPUS_FILES[@]}"
  if [ ! -e "$JOB/records.json.xz" ]; then
    echo "stage corpus_records"
    args=(); for f in "${CORPUS_FILES[@]}"; do args+=(--model "$f"); done
    python3 ort_analysis/fusion_detector.py --device cuda "${args[@]}" > "$JOB/records.log" 2>&1
    grep -ciE "error" "$JOB/records.log"
    python3 - "$JOB/records.json.xz" "${CORPUS_FILES[@]}" <<'PY'
import json, lzma, sys
from pathlib import Path
from hase.utils import paths
want = {Path(f).name[:-len(".onnx")] for f in sys.argv[2:]}
recs = {p.name[:-len(".cuda.json")]: json.loads(p.read_text())
        for p in sorted(paths.kernel_record_dir().glob("*.cuda.json")) if p.name[:-len(".cuda.json")] in want}
open(sys.argv[1], "wb").write(lzma.compress(json.dumps(recs).encode(), preset=9))
print(f"records: {len(recs)} of {len(want)}")
PY
  fi
fi
FILES=$(list $(for mb in "${MODELS[@]}"; do echo "$M/${mb%%:*}_bs${mb##*:}_224x224.onnx"; done) "${CORPUS_FILES[@]}")
if [ ! -e "$JOB/calibrated" ]; then
  echo "stage calibrate"
  CR=$(python3 -c "
import sys, collections
d = collections.defaultdict(list)
for a in sys.argv[1:]:
    n, k = a.split(':'); d[n].append(float(k))
print('{' + ', '.join(f'{n}: {v}' for n, v in d.items()) + '}')" "${LOADS[@]}")
  python3 benchmark/calibrate_loads.py --device cuda --set "calibration.stressor_levels=[0]" \
    --set "calibration.stressor_modes=[matmul]" --set calibration.sample_s=2 --set calibration.probe_ms=300 \
    --set "calibration.corunners=$CR" --set out=slices 2>&1 | grep -E "INFO|error" | quiet && touch "$JOB/calibrated"
fi
if [ "${WARM_UP:-0}" = 1 ] && [ ! -e "$JOB/warm_up.csv" ]; then
  # one untimed clean pass over the models first: on 2 of 4 fresh H100 machines the first stage after the export
  # and records stages ran slow (session 26: machine r's idle label 0.66-1.20x its idle_end; o likewise)
  echo "stage warm_up"
  python3 benchmark/clean_labels.py --device cuda --set "models=$FILES" --set sessions=1 \
    --set "out=$JOB/warm_up.csv" 2>&1 | quiet
fi
echo "stage idle"
"${TRACE[@]}" --set out=load_idle --set "models=$FILES" 2>&1 | quiet
if [ "${PAIRED:-0}" = 1 ]; then   # resumes: rows already in paired.csv are skipped
  echo "stage paired"
  python3 benchmark/paired_labels.py --device cuda --set "models=$FILES" --set "loads=$(list "${LOADS[@]}")" \
    --set "sessions=${SESSIONS:-2}" --set "out=$JOB/paired.csv" 2>&1 | quiet
fi
[ "${TRACE_LOADS:-1}" = 1 ] && for nk in "${LOADS[@]}"; do
  n=${nk%%:*}; k=${nk##*:}
  echo "stage $n $k"
  python3 benchmark/corunners.py --name "$n" --knob "$k" --device cuda --duration 0 > "$JOB/$n.out" 2>&1 &
  CP=$!
  for i in $(seq 60); do grep -q READY "$JOB/$n.out" 2>/dev/null && break; sleep 1; done
  sleep 2
  # a loaded stage is not an idle reference: trace_run's idle check (idle_busy_max) is off here
  "${TRACE[@]}" --set "out=load_${n}@${k}" --set idle_busy_max=2 --set "models=$FILES" 2>&1 | quiet
  kill $CP; wait $CP 2>/dev/null
done
# idle again after the loads: separates "idle" from "measured first on a fresh machine" (host dispatch was
# slower in the first stage on 2 of 3 machines; the fit pools both into one idle label)
echo "stage idle_end"
"${TRACE[@]}" --set out=load_idle_end --set "models=$FILES" 2>&1 | quiet
echo "stage done"
} 2>&1 | tee "$JOB/log.txt"
pack
touch "$JOB/DONE"
