#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job neighbour_labels` (--dry-run prints the command).
# GPU job (issues 24 and 23): are batch-1 models faster next to a light neighbour than at idle, and is it the host?
# benchmark/run_gpu_slices.sh with: idle, a host core spinning (host_spin, no GPU work), two light GPU neighbours,
# GEMM bursts, idle again; every session also timed in the never-profiling child (clean labels, with the runs' mean).
# Why: inference/results/nvidia-h100/interference/README.md ("The label under load").
set -uo pipefail
JOB=${1:?job dir}
export SESSIONS=${SESSIONS:-3}
export MODELS=${MODELS:-resnet18:1 mnasnet1_0:1 mobilenet_v3_large:1 vit_b_16:1 resnext50_32x4d:32}
export LOADS=${LOADS:-host_spin:1.0 slices_compute_10us:0.2 small_infer:0.5 tc_gemm_bursts:0.5}
bash "$(dirname "${BASH_SOURCE[0]}")/run_gpu_slices.sh" "$JOB" "${2:-}"
[ "${2:-}" = pack ] || touch "$JOB/DONE"   # (run_gpu_slices.sh touches it too; a poller waits for it)
