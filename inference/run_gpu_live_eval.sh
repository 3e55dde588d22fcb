#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job live_eval` (--dry-run prints the command).
# One GPU call: live evaluation (evaluator.py measures and predicts on the spot, stressor levels 0 and
# 0.6), prediction speed, a predicted-timeline trace, and the copy bandwidth of this very machine.
# Needs the H200 predictor (training/models/nvidia-h200, carried) and the committed timeline model.
# Usage on the GPU machine: source .device/activate.sh && bash inference/run_gpu_live_eval.sh OUTDIR
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
OUT=${1:?output dir}; mkdir -p "$OUT"
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
PRED=(--set predictor_dir=training/models/nvidia-h200 --set timeline_model=inference/results/nvidia-h200/timeline_model.json)
source benchmark/gpu_lib.sh
{
python3 benchmark/bandwidth.py --device cuda --set out=nvidia-h200/live 2>&1 | grep -E "GB/s|error"
# zoo configs, held-out ones, and architectures Hase has never measured (squeezenet1_1, resnext50_32x4d, regnet_x_400mf)
for cfg in "resnet18 16 224" "resnet18 128 320" "resnet50 16 224" "mobilenet_v3_small 1 224" "resnet18 1 224" \
           "efficientnet_b0 16 224" "squeezenet1_1 32 224" "resnext50_32x4d 8 224" "regnet_x_400mf 16 224"; do
  export_model $cfg
done
echo "exports done after $(el) s"
python3 evaluator.py $HASE_HOME/model_zoo/models --device cuda --set levels=[0,0.6] "${PRED[@]}" --out $OUT/live 2>&1 | grep -vE "it/s|model/s|^analyse|^level"
echo "live evaluation done after $(el) s"
M=$HASE_HOME/model_zoo/models/resnext50_32x4d_bs8_224x224.onnx
for i in 1 2; do
  python3 inference/predict_model_latency.py --model $M --device cuda "${PRED[@]}" --json $OUT/predict_$i.json --trace $OUT/predicted_timeline.json 2>&1 | head -4
done
python3 -c "import json; [print(f'run {i}: analyse_s', round(json.load(open('$OUT/predict_'+str(i)+'.json'))['analyse_s'],3), 'predict_s', round(json.load(open('$OUT/predict_'+str(i)+'.json'))['predict_s'],4)) for i in (1,2)]"
echo "all done after $(el) s"
} 2>&1 | tee $OUT/log.txt
cp $HASE_HOME/benchmark/results/nvidia-h200/live/bandwidth_table.json $OUT/bandwidth_table_live.json 2>/dev/null
# the CUDA records of the live models, so that the cases can be re-predicted offline with a later fit
pack_records "$OUT"
# the device tool brings back at most 8 files: keep the ones the report needs
for f in cases.csv summary.json pred_vs_actual.png; do mv $OUT/live/$f $OUT/live_$f; done
rm -rf $OUT/live $OUT/predict_1.json
ls -la "$OUT"
