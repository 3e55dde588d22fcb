#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job corpus` (--dry-run prints the command).
# GPU job (issue 22): export the corpus (model_zoo/corpus_split.yaml: training and exam architectures), make
# the CUDA records (phase 2, RECORDS=1: one machine is enough, the graph does not depend on the machine) and
# measure every model with benchmark/trace_run.py (CUPTI per node) in SESSIONS fresh sessions on this machine.
# Runs long: start it detached, then poll; each poll packs what is done into $OUT (at most 8 files):
#   source .device/activate.sh && setsid nohup bash benchmark/run_gpu_corpus.sh /tmp/job > /tmp/job.out 2>&1 &
#   bash benchmark/gpu_corpus_wait.sh /tmp/job 540 $OUT
# Env: FP16_TWINS ("": a YAML list of architectures also exported as float16 twins, <arch>-fp16_bs..., measured like
#      the rest and recorded on the CUDA EP even with RECORDS=0; e.g. the ANCHORS; node_model.precision_risk; with
#      LABELS_ONLY=1 the twins and their float32 models are also traced once, for inference/fit_precision_term.py),
#      SPLIT_FILE (model_zoo/corpus_split.yaml; model_zoo/corpus_split_v12.yaml: exam v12's models with SPLIT=exam),
#      LABELS_ONLY (0; 1: no trace, CLEAN_SESSIONS label sessions per model from benchmark/clean_labels.py), SESSIONS (2), CLEAN_SESSIONS (0 = SESSIONS; more: extra label-only sessions in a process that never profiles), RECORDS (0|1), SPLIT (all|train|exam|none: ANCHORS alone), WORKERS (14 export processes), RECORD_PROCS (6),
#      CHUNK ("": the whole split; "i/n": the i-th of n parts of SPLIT's architectures, every n-th of them sorted, so an
#      exam can be spread over n fresh machines when a session's device time does not hold it; the ANCHORS run on each),
#      EXAM_SESSIONS (0; > 0: the exam models first, in that many sessions, then everything in SESSIONS),
#      ANCHORS ("": a YAML list of training architectures exported and traced beside SPLIT's models, e.g.
#      "[resnet50, mobilenet_v2, vit_b_16, cnn_mobile-s1, vit-s2, encoder-s1, hybrid-s1, unet-s0]": a machine that
#      runs only exam models then still shares models with the training machines, so its offset can be measured).
#      TRACE_AFTER (0; 1 with LABELS_ONLY: after the labels, every model traced once with CUPTI per node: a scored
#      exam's traces can then join training, and its misses be read node by node; the labels are done before),
#      COPY_AB (0; 1 with LABELS_ONLY: 2 label sessions with the in-process copy probe off and 2 with it on, alternating
#      processes, into clean_sessions.csv and clean_copy_on.csv: did the probe slow the exam v11 labels? docs/method.md)
#      CUDA_OPTIONS ("": extra CUDA EP options for the labels and the traces, as a YAML map, e.g.
#      "{cudnn_conv1d_pad_to_nc1d: 1}"), OUT_NAME (corpus: the results folder, benchmark/results/<gpu>/OUT_NAME; a
#      folder of its own for any CUDA_OPTIONS, so the default layout's measurements never mix with another's).
# The copy rates session.run reaches are read at the start and end of the measuring stage in a process of their own
# (host_calibration.py run_copy_budget_ms), into calibration.json's standalone-start / standalone-end entries.
set -uo pipefail
JOB=${1:?job dir}; mkdir -p "$JOB"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
M=$HASE_HOME/model_zoo/models
CS=${CLEAN_SESSIONS:-0}
quiet() { grep -vE "Warning|_warn_once|plugin EP|warnings.warn|^\s*$"; }
{
echo "stage machine $(el)"
{ date -u; nvidia-smi --query-gpu=name,uuid,serial,driver_version,clocks.max.sm,pci.bus_id --format=csv;
  lscpu | grep -E "Model name|^CPU\(s\)|NUMA node|MHz"; hostname; python3 -c "import onnxruntime as o, torch;
import importlib; t=importlib.util.find_spec('timm'); print('ort', o.__version__, o.get_available_providers(), 'torch', torch.__version__, 'timm', __import__('timm').__version__ if t else None)"; } > "$JOB/machine.txt" 2>&1
cat "$JOB/machine.txt"
# fail in a second, not after the export: a machine given only part of the onnxruntime-gpu pack (a first call that
# did not source .device/activate.sh) has the CPU build, and the job ran its 2.5-minute export before failing (session 28)
if ! python3 -c $'from hase.utils.ort_session import resolve_device\ntry:\n resolve_device("cuda", 0)\nexcept Exception as e:\n raise SystemExit(str(e))'; then
  echo "error: the CUDA EP does not run here (onnxruntime-gpu: source .device/activate.sh in every call that carries a pack part); nothing exported or measured"
  exit 3
fi
echo "stage export $(el)"
if [ "${SPLIT:-all}" != none ]; then  # none: only ANCHORS (e.g. re-tracing a list of training architectures)
  python3 model_zoo/build_corpus.py --set "split=${SPLIT:-all}" --set "split_file=${SPLIT_FILE:-model_zoo/corpus_split.yaml}" \
    --set "chunk=${CHUNK:-}" --set "workers=${WORKERS:-14}" 2>&1 | grep -E "failed|done|error"
fi
if [ -n "${ANCHORS:-}" ]; then
  python3 model_zoo/build_corpus.py --set "archs=$ANCHORS" --set "split_file=${SPLIT_FILE:-model_zoo/corpus_split.yaml}" \
    --set "workers=${WORKERS:-14}" 2>&1 | grep -E "failed|done|error"
fi
if [ -n "${FP16_TWINS:-}" ]; then  # float16 twins (<arch>-fp16_...): measured beside their float32 models, in no split
  python3 model_zoo/build_corpus.py --set "archs=$FP16_TWINS" --set dtype=float16 --set "workers=${WORKERS:-14}" 2>&1 \
    | grep -E "failed|done|error"
fi
ls "$M"/*.onnx | grep -v "\.opt\." > "$JOB/all_models.txt"
echo "models: $(wc -l < "$JOB/all_models.txt")"
if [ "${RECORDS:-0}" = 1 ] || [ -n "${FP16_TWINS:-}" ]; then
  echo "stage records $(el)"
  # RECORDS=0 with twins: records of the twins and of their float32 models only (what the CUDA EP makes of float16,
  # against ort_analysis/offline_cuda.py's guess)
  [ "${RECORDS:-0}" = 1 ] || grep -E "$(python3 -c "import sys, yaml; print('|'.join('/' + a + '(-fp16)?_bs'
    for a in yaml.safe_load(sys.argv[1])))" "$FP16_TWINS")" "$JOB/all_models.txt" > "$JOB/rec_models.txt"
  split -n "r/${RECORD_PROCS:-6}" -d "$JOB/$([ "${RECORDS:-0}" = 1 ] && echo all_models.txt || echo rec_models.txt)" \
    "$JOB/rec_part_"
  for f in "$JOB"/rec_part_*; do
    args=(); while read -r m; do args+=(--model "$m"); done < "$f"
    python3 ort_analysis/fusion_detector.py --device cuda "${args[@]}" > "$f.log" 2>&1 &
  done
  wait
  grep -hE "error|Error" "$JOB"/rec_part_*.log | head -20
  python3 - "$JOB" <<'PY'
import json, lzma, sys
from pathlib import Path
from hase.utils import paths
recs = {p.name[:-len(".cuda.json")]: json.loads(p.read_text()) for p in sorted(paths.kernel_record_dir().glob("*.cuda.json"))}
Path(sys.argv[1], "records.json.xz").write_bytes(lzma.compress(json.dumps(recs).encode()))
print("records:", len(recs))
PY
fi
echo "stage trace $(el)"
OUT_NAME=${OUT_NAME:-corpus}
echo "$OUT_NAME" > "$JOB/out_name"   # gpu_corpus_wait.sh packs this folder
CUDA_OPTS=(); [ -n "${CUDA_OPTIONS:-}" ] && CUDA_OPTS=(--set "cuda_options=$CUDA_OPTIONS")
R=$HASE_HOME/benchmark/results/$(python3 -c "from hase.utils.ort_session import device_slug; print(device_slug('cuda', 0))")/$OUT_NAME
mkdir -p "$R"
probe() { python3 benchmark/host_calibration.py --device cuda --set run_copy_budget_ms=20 --set "out=$R/calibration.json" \
  --set "key=standalone-$1" 2>&1 | grep -E "cuda:|rror"; }
probe start
# a seeded shuffle: if the job is cut short, every family and split is measured about equally far
python3 -c "import random,sys; l=open(sys.argv[1]).read().split(); random.Random(0).shuffle(l); print('\n'.join(l))" \
  "$JOB/all_models.txt" > "$JOB/trace_order.txt"
python3 - "$JOB" "$M/corpus_manifest.json" <<'PY'
import json, sys
from pathlib import Path
man = json.loads(Path(sys.argv[2]).read_text())["files"]
order = Path(sys.argv[1], "trace_order.txt").read_text().split()
exam = [m for m in order if man.get(Path(m).stem, {}).get("split") == "exam"]
Path(sys.argv[1], "exam_order.txt").write_text("\n".join(exam) + "\n")
PY
trace() { python3 benchmark/trace_run.py --device cuda --set "model_list=$1" --set "sessions=$2" \
  --set "out=$OUT_NAME" "${CUDA_OPTS[@]}" --set keep_going=true --set trace_sessions=0 --set warmup=5 --set profiled_runs=3 \
  --set cupti_runs=6 --set budget_ms=60 --set min_loops=5 --set "clean_sessions=$CS" 2>&1 | quiet; }
clean() {  # $1 sessions, $2 out CSV, $3 copy_budget_ms
  python3 benchmark/clean_labels.py --device cuda --set "model_list=$JOB/trace_order.txt" --set "sessions=$1" \
    --set warmup=5 --set budget_ms=60 --set min_loops=5 --set profiled_runs=3 --set "out=$2" --set "copy_budget_ms=$3" \
    "${CUDA_OPTS[@]}" \
    2>&1 | quiet | awk 'NR % 50 == 0'; }
if [ "${LABELS_ONLY:-0}" = 1 ] && [ "${COPY_AB:-0}" = 1 ]; then
  for n in 1 2; do clean $n "$R/clean_sessions.csv" 0; clean $n "$R/clean_copy_on.csv" 5; done
elif [ "${LABELS_ONLY:-0}" = 1 ]; then  # labels only: CLEAN_SESSIONS clean sessions of every model, no trace
  clean "$(( CS > 0 ? CS : 1 ))" "$R/clean_sessions.csv" 0
elif [ "${EXAM_SESSIONS:-0}" -gt 0 ]; then
  echo "exam models: $(wc -l < "$JOB/exam_order.txt"), $EXAM_SESSIONS sessions"
  trace "$JOB/exam_order.txt" "$EXAM_SESSIONS"
fi
[ "${LABELS_ONLY:-0}" = 1 ] || trace "$JOB/trace_order.txt" "${SESSIONS:-2}"
if [ "${LABELS_ONLY:-0}" = 1 ] && [ "${TRACE_AFTER:-0}" = 1 ]; then
  echo "stage trace after the labels $(el)"
  trace "$JOB/trace_order.txt" 1   # trace_run's clean child finds every label it would take already there
fi
if [ "${LABELS_ONLY:-0}" = 1 ] && [ -s "$JOB/rec_models.txt" ]; then
  # the float16 twins and their float32 models, traced once with CUPTI per node after the labels (the float16 term,
  # inference/fit_precision_term.py, reads node pairs; session 23 needed a second job for them)
  echo "stage twin traces $(el): $(wc -l < "$JOB/rec_models.txt") models"
  trace "$JOB/rec_models.txt" 1
fi
probe end
echo "stage done $(el)"
} 2>&1 | tee "$JOB/log.txt"
touch "$JOB/DONE"
