#!/usr/bin/env bash
# CPU (no GPU): every whole-model timeline and its judgement, after training/kernel_space_report.py has trained
# training/models/<gpu>-kspace-noheldout (no kernel of the ten held-out architectures' records in their data):
#   H200 default: measured terms + H200 kernel-space GPU times -> inference/results/nvidia-h200/measured/
#   H200 baseline: GPU time lines through the CUPTI tables (no predictor) -> .../nvidia-h200/measured_cupti_lines/
#   interference on the default timeline, held-out neighbours -> inference/results/nvidia-h200/interference/
#   H200 terms + H100 kernel-space GPU times -> inference/results/nvidia-h100/timeline_h100_kspace/
#   judged on the H100 sessions: the CUPTI-line timeline, the default, and the H100 kernel-space one
#   -> inference/results/nvidia-h100/judged_*/
#   .venv/bin/python training/kernel_space_report.py && bash inference/run_kspace_timelines.sh
set -euo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
PY=${PY:-.venv/bin/python}
M=training/models
R=inference/results
$PY inference/fit_measured_timeline.py        # defaults: gpu_source predictor, the H200 noheldout predictor
$PY inference/fit_measured_timeline.py --set gpu_source=cupti_table --set 'predictor_dir=""' \
  --set out=$R/nvidia-h200/measured_cupti_lines --set 'summary=""'
$PY inference/fit_interference.py
$PY inference/fit_measured_timeline.py --set "predictor_dir=$M/nvidia-h100-kspace-noheldout" \
  --set out=$R/nvidia-h100/timeline_h100_kspace --set 'summary=""'
$PY inference/judge_timeline.py --set timeline_model=$R/nvidia-h200/measured_cupti_lines/timeline_model.json \
  --set out=$R/nvidia-h100/judged_h200_measured_timeline
$PY inference/judge_timeline.py --set timeline_model=$R/nvidia-h200/measured/timeline_model.json \
  --set out=$R/nvidia-h100/judged_h200_kspace
$PY inference/judge_timeline.py --set timeline_model=$R/nvidia-h100/timeline_h100_kspace/timeline_model.json \
  --set out=$R/nvidia-h100/judged_h100_kspace
