#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job exam_v25`, `hase gpu-job exam_v24`, `hase gpu-job exam_v23`, `hase gpu-job exam_v22`, `hase gpu-job exam_v21`, `hase gpu-job exam_v20`, `hase gpu-job exam_v19`, `hase gpu-job exam_v18`, `hase gpu-job exam_v17`, `hase gpu-job exam_v16`, `hase gpu-job exam_v15`,
# `hase gpu-job exam_v14`, `hase gpu-job exam_v13` or `hase gpu-job exam_v12` (--dry-run prints the command).
# GPU job (issue 22): a frozen exam's labels (SPLIT_FILE, e.g. model_zoo/corpus_split_v13.yaml) on one fresh machine:
# benchmark/run_gpu_corpus.sh with SPLIT=exam LABELS_ONLY=1, CLEAN_SESSIONS clean label sessions per model (in
# rounds), the CUDA records (RECORDS=1: one machine is enough; the second can set RECORDS=0 TRACE_AFTER=0), one
# CUPTI trace of every model after the labels (TRACE_AFTER=1: once scored, the exam joins training), and the training
# ANCHORS measured beside them, so the machine's offset against the training machines can be read. Poll:
# benchmark/gpu_corpus_wait.sh JOB 540 $OUT. Import: benchmark/import_corpus.py (--records-to the corpus records: the
# new ones as a shard); score once, after any refit it judges: inference/score_exam.py --config inference/exam_vN.yaml.
set -uo pipefail
JOB=${1:?job dir}
export SPLIT=exam SPLIT_FILE=${SPLIT_FILE:?which frozen exam: model_zoo/corpus_split_vN.yaml} LABELS_ONLY=1
export CLEAN_SESSIONS=${CLEAN_SESSIONS:-3}
export RECORDS=${RECORDS:-1}
export CHUNK=${CHUNK:-}   # "i/n": the i-th of n parts of the exam, on a machine of its own (run_gpu_corpus.sh)
export TRACE_AFTER=${TRACE_AFTER:-1}   # one CUPTI trace of every model after the labels (0 on the second machine)
export ANCHORS=${ANCHORS:-[resnet50, mobilenet_v2, vit_b_16, cnn_mobile-s1, vit-s2, encoder-s1, hybrid-s1, unet-s0]}
bash "$(dirname "${BASH_SOURCE[0]}")/run_gpu_corpus.sh" "$JOB"
touch "$JOB/DONE"
