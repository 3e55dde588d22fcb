#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job neighbour_pairs` (--dry-run prints the command).
# GPU job (issue 24): the held-out arch split of `neighbour_archs` with paired labels. benchmark/run_gpu_slices.sh
# with PAIRED=1 TRACE_LOADS=0: the idle stage traced (spans, per-node GPU time), then benchmark/paired_labels.py
# next to every load (each session's idle runs taken seconds apart, the neighbour paused), idle_end. A slowdown read
# across stages carried the host's drift between them (H100 machine r, session 26: idle_end/idle 0.66-1.20 for
# the same models); the paired ones do not. Generator architectures of seed 20001 (in no corpus split; seed 20000's
# idle and loaded residuals were read in session 26), 2 configs each, their CUDA records made here.
# WARM_UP=1: one untimed clean pass over the models before the idle stage (the first stage on a fresh machine ran
# slow on 2 of 4 H100 machines). Poll: benchmark/slices_wait.sh JOB 540 $OUT (paired.csv comes back beside the tables).
# The held-out neighbour kinds come first, then the training ones: a job cut short by the device budget still has the
# cases that judge (session 26's machine s stopped in its last stage).
set -uo pipefail
JOB=${1:?job dir}
export SESSIONS=${SESSIONS:-2}
export PAIRED=1 TRACE_LOADS=0
export WARM_UP=${WARM_UP:-1}
export MODELS=${MODELS:-resnet18:1 mnasnet1_0:1 mobilenet_v3_large:1 vit_b_16:1 resnext50_32x4d:32}
export CORPUS_ARCHS=${CORPUS_ARCHS:-[vit-s20001, swin-s20001, encoder-s20001, hybrid-s20001, pvt-s20001, mixer-s20001, cnn_mobile-s20001, convnext-s20001, decoder-s20001, ssm-s20001]}
export CORPUS_MAX_CONFIGS=${CORPUS_MAX_CONFIGS:-2}
export LOADS=${LOADS:-cnn_train:0.3 small_infer:0.5 tc_gemm_bursts:0.5 slices_compute_1ms:0.5 slices_compute_10ms:0.9}
bash "$(dirname "${BASH_SOURCE[0]}")/run_gpu_slices.sh" "$JOB" "${2:-}"
[ "${2:-}" = pack ] || touch "$JOB/DONE"   # (run_gpu_slices.sh touches it too; a poller waits for it)
