#!/usr/bin/env bash
# What travels to the GPU machine: every device call sends the whole working tree (tracked files and untracked ones
# git does not ignore), at most 64 MiB with the carried pack part. The tracked tree is ~52 MB, most of it committed
# data no GPU job reads (benchmark/gpu_jobs.yaml inputs): the merged corpus records (~14 MB), the per-session
# trace_nodes tables (~12 MB) and the kernel-space forests kept for comparison (~6 MB). Without them the tree is
# ~19 MB and the onnxruntime-gpu pack travels in 2 parts (2 chained calls per fresh machine) instead of 6.
#
#   bash benchmark/device_tree.sh size      # MiB that would travel now, and the pack parts that fit beside it
#   bash benchmark/device_tree.sh slim      # delete those files from the working tree (they stay committed)
#   bash benchmark/device_tree.sh restore   # put them back (git checkout of the deleted paths)
#   bash benchmark/device_tree.sh parts N   # regroup .device/p*/ into N calls' folders (PARTS stays the file count)
#
# Slim only between GPU calls, restore before any fit, test or commit (`git status` shows them as deleted while
# slim; `git commit -a` would delete them: commit with explicit paths). Nothing here is needed by a GPU job; the
# node models (inference/results/<gpu>/corpus/node_model/) stay, a prediction on the GPU machine reads them.
set -euo pipefail
cd "$(dirname "$0")/.."
SLIM=(ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz
      'ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.*.json.xz'
      'benchmark/results/*/corpus/*/trace_nodes.csv.xz'
      'training/predictors/*/forests.npz.xz'
      'benchmark/results/cpu-*/corpus/records*.json.xz'    # the CPU EP corpus's records: no GPU job reads them
      'inference/results/*/compare_*/node_model/*')        # candidate fits kept for an exam to score on the CPU
mib() { python3 -c "import sys; print(f'{int(sys.argv[1]) / 2**20:.1f}')" "$1"; }
travels() {  # bytes of tracked files present + untracked files git does not ignore
  { git ls-files -z; git ls-files -z --others --exclude-standard; } | python3 -c "
import os, sys
print(sum(os.path.getsize(p) for p in sys.stdin.read().split('\0') if p and os.path.isfile(p)))"
}
case "${1:-size}" in
  size)
    b=$(travels); echo "travels: $(mib "$b") MiB"
    if [ -d .device ]; then
      part=$(find .device -name 'ort-gpu.tar.xz.part*' -printf '%s\n' | sort -n | tail -1)
      n=$(find .device -name 'ort-gpu.tar.xz.part*' | wc -l)
      per=$(find .device -maxdepth 1 -type d -name 'p*' | head -1)
      [ -n "$per" ] && echo "pack: $n files of $(mib "${part:-0}") MiB in $(find .device -maxdepth 1 -type d -name 'p*' | wc -l) call folders; one folder: $(mib "$(du -sb "$per" | cut -f1)") MiB"
      python3 -c "import sys, math; t=int(sys.argv[1])
free = 64 * 2**20 - t - 64 * 1024
k = free // int(sys.argv[2]) if free > 0 else 0  # whole part files per call
print(f'fits beside the tree: {free / 2**20:.1f} MiB per call = {k} part files -> ' + (f'{math.ceil(int(sys.argv[3]) / k)} calls for the pack' if k else 'no part fits: slim first'))" \
        "$b" "${part:-0}" "$n"
    fi ;;
  slim)
    before=$(travels)
    for g in "${SLIM[@]}"; do git ls-files -z -- "$g" | xargs -0 -r rm -f; done
    echo "slim: $(mib "$before") -> $(mib "$(travels)") MiB travel ($(git ls-files -d | wc -l) tracked files absent; restore: bash $0 restore)" ;;
  restore)
    n=$(git ls-files -d -- "${SLIM[@]}" | wc -l)
    git ls-files -z -d -- "${SLIM[@]}" | xargs -0 -r git checkout --
    echo "restored $n files; absent now: $(git ls-files -d | wc -l)" ;;
  parts)  # regroup the pack's part files into N folders p1..pN (one folder per chained call)
    n=${2:?number of calls}
    files=($(find .device -name 'ort-gpu.tar.xz.part*' | sort -V))
    [ ${#files[@]} -gt 0 ] || { echo "error: .device/: no ort-gpu.tar.xz.part* (run ../shared/device/pack_ort_gpu.py --parts K)" >&2; exit 2; }
    tmp=$(mktemp -d .device/regroup.XXXX)
    for f in "${files[@]}"; do mv "$f" "$tmp/"; done
    find .device -mindepth 1 -maxdepth 1 -type d -name 'p*' -exec rm -rf {} +
    per=$(( (${#files[@]} + n - 1) / n )); i=0
    for f in $(ls "$tmp" | sort -V); do d=.device/p$(( i / per + 1 )); mkdir -p "$d"; mv "$tmp/$f" "$d/"; i=$((i + 1)); done
    rmdir "$tmp"; echo "${#files[@]}" > .device/PARTS
    for d in $(ls -d .device/p* | sort -V); do echo "$d: $(ls "$d" | tr '\n' ' ')"; done ;;
  *) echo "error: $1: unknown verb (size | slim | restore | parts N)" >&2; exit 2 ;;
esac
