#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job machines_panel_v22`, `hase gpu-job machines_panel_v23` or
# `hase gpu-job machines_panel_v24` (a direct run names its panel: PANEL=model_zoo/machines_panel_v24.yaml bash
# benchmark/run_gpu_machines_panel.sh JOB).
# GPU job (issue 23): a frozen panel of exam architectures (PANEL, model_zoo/machines_panel_v<N>.yaml) and the training
# anchors, CLEAN_SESSIONS fresh label sessions each on this machine (benchmark/clean_labels.py via run_gpu_corpus.sh
# with SPLIT=none LABELS_ONLY=1), no records and no traces: what a machine adds is its own labels and its own
# session-to-session noise. Poll: benchmark/gpu_corpus_wait.sh JOB 540 $OUT. Import: benchmark/import_corpus.py;
# score per machine: inference/score_exam.py --config inference/machines_v<N>.yaml --set "timeline_dirs=[...]".
set -uo pipefail
JOB=${1:?job dir}
PANEL=${PANEL:?the panel file, e.g. model_zoo/machines_panel_v23.yaml}
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# one read of the panel: its split file, then its architectures and anchors as one YAML list
{ read -r SPLIT_FILE && read -r ARCHS; } < <(python3 -c "import sys, yaml; p = yaml.safe_load(open(sys.argv[1]))
print(p['split_file']); print('[' + ', '.join(p['archs'] + p['anchors']) + ']')" "$PANEL") && [ -n "$ARCHS" ] \
  || { echo "error: $PANEL: cannot read its split_file, archs and anchors"; exit 2; }
export SPLIT_FILE SPLIT=none LABELS_ONLY=1 RECORDS=0 TRACE_AFTER=0 ANCHORS="$ARCHS"
export CLEAN_SESSIONS=${CLEAN_SESSIONS:-3}
bash benchmark/run_gpu_corpus.sh "$JOB"
touch "$JOB/DONE"
