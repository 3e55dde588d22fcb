#!/usr/bin/env bash
# CPU (no GPU): the whole-model timelines whose GPU times come from the kernel-space predictors, judged on
# architectures outside the zoo, after training/kernel_space_report.py has trained
# training/models/<gpu>-kspace-noheldout (no kernel of those architectures' records in their data):
#   H200 terms + H200 kernel-space GPU times -> inference/results/nvidia-h200/measured_kspace/   (H200 sessions)
#   H200 terms + H100 kernel-space GPU times -> inference/results/nvidia-h100/timeline_h100_kspace/
#   judged on the H100 sessions: the H200 measured timeline as is, with H200 and with H100 kernel-space GPU times
#   the interference fit (held-out neighbours) on the H200 kernel-space timeline -> inference/results/nvidia-h200/interference_kspace/
#   -> inference/results/nvidia-h100/judged_*/
#   .venv/bin/python training/kernel_space_report.py && bash inference/run_kspace_timelines.sh
set -euo pipefail
PY=${PY:-.venv/bin/python}
M=training/models
$PY inference/fit_measured_timeline.py --set gpu_source=predictor --set "predictor_dir=$M/nvidia-h200-kspace-noheldout" \
  --set out=inference/results/nvidia-h200/measured_kspace --set 'summary=""'
$PY inference/fit_measured_timeline.py --set gpu_source=predictor --set "predictor_dir=$M/nvidia-h100-kspace-noheldout" \
  --set out=inference/results/nvidia-h100/timeline_h100_kspace --set 'summary=""'
$PY inference/judge_timeline.py --set timeline_model=inference/results/nvidia-h200/measured/timeline_model.json \
  --set out=inference/results/nvidia-h100/judged_h200_measured_timeline
$PY inference/judge_timeline.py --set timeline_model=inference/results/nvidia-h200/measured_kspace/timeline_model.json \
  --set "predictor_dir=$M/nvidia-h200-kspace-noheldout" --set out=inference/results/nvidia-h100/judged_h200_kspace
$PY inference/judge_timeline.py --set timeline_model=inference/results/nvidia-h100/timeline_h100_kspace/timeline_model.json \
  --set "predictor_dir=$M/nvidia-h100-kspace-noheldout" --set out=inference/results/nvidia-h100/judged_h100_kspace
# the interference fit on top of the kernel-space timeline (a variant beside the default interference/)
$PY inference/fit_interference.py --set timeline_model=inference/results/nvidia-h200/measured_kspace/timeline_model.json \
  --set "predictor_dir=$M/nvidia-h200-kspace-noheldout" --set out=inference/results/nvidia-h200/interference_kspace \
  --set 'summary=""'
