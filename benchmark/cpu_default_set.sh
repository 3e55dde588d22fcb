#!/usr/bin/env bash
# The frozen torchvision set of inference/results/cpu-intel-r-xeon-r-processor/unseen_vm/torchvision/ (12 models, 224 px,
# batch 1) on this machine's CPU EP: 2 intra-op threads, 3 fresh sessions, 3 calibrations; packs OUT (CSV/JSON only).
# Run on a GPU machine's CPU in session 44 (machine e): bash benchmark/cpu_default_set.sh $OUT
set -u
OUT=${1:?out}; export HASE_HOME=/tmp/hc PYTHONPATH=$PWD PYTHONUNBUFFERED=1; mkdir -p "$OUT"
L="[resnet18, resnet50, mobilenet_v2, mobilenet_v3_small, efficientnet_b0, squeezenet1_1, shufflenet_v2_x0_5, regnet_y_400mf, densenet121, convnext_tiny, vit_b_16, mnasnet1_0]"
lscpu > "$OUT/lscpu.txt"
python3 model_zoo/torchvision_exporter.py --device cpu --set "models=$L" --set "batch_sizes=[1]" --set "resolutions=[224]" 2>&1 | tail -2 > "$OUT/log.txt"
ls $HASE_HOME/model_zoo/models/*.onnx | grep -v '\.opt\.' > /tmp/hc_models.txt
args=(); while read -r m; do args+=(--model "$m"); done < /tmp/hc_models.txt
OMP_NUM_THREADS=2 python3 ort_analysis/fusion_detector.py --device cpu "${args[@]}" 2>&1 | tail -1 >> "$OUT/log.txt"
python3 - "$OUT/records.json.xz" <<'PY'
import json, lzma, sys
from hase.utils import paths
recs = {p.name[:-len(".cpu.json")]: json.loads(p.read_text()) for p in sorted(paths.kernel_record_dir().glob("*.cpu.json"))}
open(sys.argv[1], "wb").write(lzma.compress(json.dumps(recs).encode()))
PY
python3 benchmark/trace_run.py --device cpu --set model_list=/tmp/hc_models.txt --set threads=2 --set sessions=3 \
  --set out=t2 --set warmup=3 --set profiled_runs=5 --set budget_ms=300 --set min_loops=5 --set max_loops=200 \
  --set keep_going=true --set idle_check_s=30 --set idle_window_s=1.0 2>&1 | grep -E "sessions,|rror|idle" | tail -14 >> "$OUT/log.txt"
R=$(ls -d $HASE_HOME/benchmark/results/cpu-*/t2 | head -1)
for i in 1 2 3; do python3 benchmark/host_calibration.py --device cpu --set threads=2 --set out=$R/calibration.json --set key=fresh_process_$i > /dev/null 2>&1; done
cp $R/calibration.json "$OUT/"; cp $R/trace_config_*.json "$OUT/trace_config.json"
xz -c $R/trace_sessions.csv > "$OUT/trace_sessions.csv.xz"; xz -c $R/trace_nodes.csv > "$OUT/trace_nodes.csv.xz"
tail -16 "$OUT/log.txt"; ls -la "$OUT"
