# Sourced by the one-call GPU scripts (benchmark/run_gpu_*.sh, inference/run_gpu_live_eval.sh).
# The GPU machine starts bare at every call, so each script rebuilds the phase 1-3 artifacts it needs.

export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not

# export_model MODEL BATCH RES: phase 1 for one config on CUDA EP (validated against torch)
export_model() {
  python3 model_zoo/torchvision_exporter.py --device cuda --set "models=[$1]" --set "batch_sizes=[$2]" \
    --set "resolutions=[$3]" 2>&1 | grep -E "error|ok on"
}

# export_zoo: resnet18 at the plan's 9 configs, and seven more architectures at bs16 224
export_zoo() {
  python3 model_zoo/torchvision_exporter.py --device cuda 2>&1 | grep -E "error|done"
  for m in resnet50 mobilenet_v2 vgg11 resnet34 densenet121 efficientnet_b0 vit_b_16; do export_model "$m" 16 224; done
}

# export_extra: the five models phase 4 measures beyond the zoo (new architectures and batch 1)
export_extra() {
  export_model resnet18 1 224; export_model mobilenet_v3_small 1 224; export_model regnet_y_400mf 32 224
  export_model convnext_tiny 8 224; export_model shufflenet_v2_x1_0 64 224
}

# pack_records OUT: the CUDA records made so far, gzipped, as OUT/records.tar (one file to bring back)
pack_records() {
  (cd "$HASE_HOME/ort_analysis/ort_kernel_record" && gzip -kf *.cuda.json && tar cf "$1/records.tar" *.cuda.json.gz)
}

# zoo_phases_1_3: export_zoo, records of every model, kernels of the four training architectures
zoo_phases_1_3() {
  local R=$HASE_HOME/ort_analysis/ort_kernel_record
  export_zoo
  python3 ort_analysis/fusion_detector.py --device cuda 2>&1 | grep -E "error|INFO"
  python3 kernel_model/kernel_builder.py --device cuda --set verify=false \
    --set "records=[$R/resnet18_*.cuda.json,$R/resnet50_*.cuda.json,$R/mobilenet_v2_*.cuda.json,$R/vgg11_*.cuda.json]" 2>&1 | tail -1
}
