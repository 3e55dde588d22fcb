#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job neighbour_archs` (--dry-run prints the command).
# GPU job (issue 24): the "held-out arch" split of inference/fit_interference.py. benchmark/run_gpu_slices.sh with
# generator architectures that are in no corpus split (seeds 20000: an exam's own models would show their idle
# residuals before that exam is scored), 2 configs each, their CUDA records made on this machine (records.json.xz:
# commit it as a shard, ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.<machine>.json.xz), beside 5
# torchvision models; idle, two training neighbours (slicing at 1 ms and 10 ms), three held-out kinds, idle again;
# clean labels with the runs' mean, 3 fresh sessions.
# The held-out neighbour kinds come first, then the training ones: a job cut short by the device budget still has the
# cases that judge (session 26's machine s stopped in its last stage).
set -uo pipefail
JOB=${1:?job dir}
export SESSIONS=${SESSIONS:-3}
export MODELS=${MODELS:-resnet18:1 mnasnet1_0:1 mobilenet_v3_large:1 vit_b_16:1 resnext50_32x4d:32}
export CORPUS_ARCHS=${CORPUS_ARCHS:-[vit-s20000, swin-s20000, encoder-s20000, hybrid-s20000, pvt-s20000, mixer-s20000, cnn_mobile-s20000, convnext-s20000, decoder-s20000, ssm-s20000]}
export CORPUS_MAX_CONFIGS=${CORPUS_MAX_CONFIGS:-2}
export LOADS=${LOADS:-cnn_train:0.3 small_infer:0.5 tc_gemm_bursts:0.5 slices_compute_1ms:0.5 slices_compute_10ms:0.9}
bash "$(dirname "${BASH_SOURCE[0]}")/run_gpu_slices.sh" "$JOB" "${2:-}"
[ "${2:-}" = pack ] || touch "$JOB/DONE"   # (run_gpu_slices.sh touches it too; a poller waits for it)
