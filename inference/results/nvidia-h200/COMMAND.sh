#!/usr/bin/env bash
# The exact command that produced this folder (offline, from the committed H200 measurements).
# Kernel predictor first:
#   .venv/bin/python training/train_kernel_model.py --device cuda --set data_csv=benchmark/results/nvidia-h200/kernels.csv.xz \
#     --set extra_csv=[benchmark/results/nvidia-h200/kernels_more/kernels.csv.xz]
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
.venv/bin/python evaluator.py --device cuda \
  --from-csv benchmark/results/nvidia-h200/models.csv.gz --from-csv benchmark/results/nvidia-h200/corunners/models.csv.gz \
  --records ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz --fit \
  --set 'train_archs=[resnet18,resnet50,mobilenet_v2,vgg11,efficientnet_b0,densenet121,vit_b_16]' \
  --set 'train_loads=[stressor-matmul,corunner-tc_gemm_bursts,corunner-small_infer]' \
  --out inference/results/nvidia-h200
