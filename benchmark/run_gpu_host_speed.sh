#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job host_speed`.
# GPU job (issue 23 item 4): what moves host speed between processes on this machine. Exports a few batch-1
# models and one GPU-bound control, then benchmark/host_speed_study.py starts REPS fresh worker processes per
# condition (binding, SMT sibling load, host load), round-robin. One call (about 5 minutes at REPS=4).
# Env: REPS (4), CONDITIONS (the config's list). Writes to $1: rows.csv, machine.json, summary.json, host.txt, log.txt
set -uo pipefail
OUTD=${1:?out dir}; mkdir -p "$OUTD"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"
M=$HASE_HOME/model_zoo/models
{
# what the kernel and the container say about the host: NUMA, SMT, cpufreq, cgroup quota and throttling
{ date -u; hostname; nvidia-smi --query-gpu=name,uuid,driver_version,pci.bus_id --format=csv; nvidia-smi topo -m;
  lscpu; echo "virt: $(systemd-detect-virt 2>/dev/null || echo unknown)"; numactl --hardware 2>&1 | head -20
  echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null)"; echo "cpu.stat:"; cat /sys/fs/cgroup/cpu.stat 2>/dev/null
  echo "pressure:"; cat /proc/pressure/cpu 2>/dev/null; uptime; } > "$OUTD/host.txt" 2>&1
grep -E "Model name|^CPU\(s\)|NUMA|Thread|virt|cpu.max|Hypervisor" "$OUTD/host.txt"
python3 model_zoo/build_corpus.py --set 'archs=[cnn_mobile-s1, vit-s2, encoder-s1, hybrid-s1, mixer-s1]' \
  --set max_configs=1 --set workers=5 2>&1 | grep -E "failed|done|error"
python3 model_zoo/build_corpus.py --set 'archs=[cnn_plain-s2]' --set workers=3 2>&1 | grep -E "failed|done|error"
big=$(ls "$M"/cnn_plain-s2_bs*.onnx | grep -v "\.opt\." | sort -t s -k3 -n | tail -1)
python3 benchmark/host_speed_study.py --device cuda --set "models=[$M/cnn_mobile-s1_bs1_*.onnx, $M/vit-s2_bs1_*.onnx, $M/encoder-s1_bs1_*.onnx, $M/hybrid-s1_bs1_*.onnx, $M/mixer-s1_bs1_*.onnx, $M/cnn_plain-s2_bs1_*.onnx, $big]" \
  --set "reps=${REPS:-4}" --set "out=$OUTD" ${CONDITIONS:+--set "conditions=$CONDITIONS"} 2>&1 | grep -vE "Warning|warn"
python3 - "$OUTD" <<'PY'
import sys, json
from pathlib import Path
from hase.benchmark.host_speed_study import layout
print("cgroup after:", Path("/sys/fs/cgroup/cpu.stat").read_text() if Path("/sys/fs/cgroup/cpu.stat").exists() else "-")
PY
} 2>&1 | tee "$OUTD/log.txt"
