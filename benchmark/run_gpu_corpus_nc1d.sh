#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job corpus_nc1d` (--dry-run prints the command).
# GPU job (issue 22, the per-group Conv1d): training architectures of the corpus's 1-D conv families measured with the
# CUDA EP option cudnn_conv1d_pad_to_nc1d=1 (cuDNN sees a 1-D conv as [N, C, 1, W] instead of [N, C, W, 1]; on the
# conv1d grid it ran 74 of the 102 per-group convs as one kernel: benchmark/results/nvidia-h200/conv1d_nc1d/), so the
# option can become a session option of the prediction: benchmark/run_gpu_corpus.sh with SPLIT=none (ANCHORS alone),
# LABELS_ONLY=1, CLEAN_SESSIONS clean label sessions and one CUPTI trace per model after them, into a results folder of
# its own (OUT_NAME=corpus_nc1d: the default layout's corpus is never mixed with it). The same architectures' default
# layout is in the corpus already (training split). Poll: benchmark/gpu_corpus_wait.sh JOB 540 $OUT (it reads
# JOB/out_name).
set -uo pipefail
JOB=${1:?job dir}
export SPLIT=none LABELS_ONLY=1 TRACE_AFTER=1 RECORDS=0 OUT_NAME=corpus_nc1d
export CUDA_OPTIONS="{cudnn_conv1d_pad_to_nc1d: 1}"
export CLEAN_SESSIONS=${CLEAN_SESSIONS:-2}
# seeds 0-3 of every family with 1-D convs (tcn, tasnet, ssm, conformer, wav2vec, wavenet, vocoder): 28 architectures
export ANCHORS=${ANCHORS:-[tcn-s0, tcn-s1, tcn-s2, tcn-s3, tasnet-s0, tasnet-s1, tasnet-s2, tasnet-s3, ssm-s0, ssm-s1, ssm-s2, ssm-s3, conformer-s0, conformer-s1, conformer-s2, conformer-s3, wav2vec-s0, wav2vec-s1, wav2vec-s2, wav2vec-s3, wavenet-s0, wavenet-s1, wavenet-s2, wavenet-s3, vocoder-s0, vocoder-s1, vocoder-s2, vocoder-s3]}
bash "$(dirname "${BASH_SOURCE[0]}")/run_gpu_corpus.sh" "$JOB"
touch "$JOB/DONE"
