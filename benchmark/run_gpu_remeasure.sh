#!/usr/bin/env bash
# Declared in benchmark/gpu_jobs.yaml; run with `hase gpu-job remeasure` (--dry-run prints the command).
# GPU job: measure again chosen kernels of the committed H200 kernel space (a CSV with a Kernel_ID column),
# with the runner's per-node kernel names and GPU ops per run (gpu_main_kernel, gpu_ops_per_run): which
# algorithm cuDNN chose, in a fresh session on another machine. The sampled records of seeds 0-2 are drawn again
# with the settings of benchmark/results/nvidia-h200/kernel_space/README.md (same seed, same Kernel_IDs); the zoo
# kernels come from the committed records.json.xz.
#   source .device/activate.sh && IDS=ids.csv bash benchmark/run_gpu_remeasure.sh /tmp/job
# Env: IDS (required), MINUTES (runner budget, 7), RUNNER_SETS (extra "--set k=v" words), DEVICE (cuda; cpu only to
# try the job out: the zoo records are CUDA's, so then only sampled kernels are measured). Rerun resumes.
set -uo pipefail
export PYTHONPATH="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)${PYTHONPATH:+:$PYTHONPATH}"  # the project's packages, installed or not
JOB=${1:?job dir}; mkdir -p "$JOB"
IDS=${IDS:?IDS=<csv with a Kernel_ID column>}
export HASE_HOME=${HASE_HOME:-/tmp/hase} PYTHONUNBUFFERED=1
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
SDIR=$HASE_HOME/ort_analysis/ort_kernel_record/sampled
DEV=${DEVICE:-cuda}
S0="--set n_per_type=60 --set types.Conv.count=800 --set types.Gemm.count=150 --set types.MatMul.count=150
    --set types.Add.count=100 --set types.Mul.count=100"
S1="--set only=[Conv,MatMul,Gemm,ReduceMean,LayerNormalization,Transpose,GlobalAveragePool,MaxPool,AveragePool]
    --set n_per_type=200 --set types.Conv.count=6000 --set types.MatMul.count=1000 --set types.Gemm.count=300"
S2="--set only=[Conv] --set types.Conv.count=1500 --set types.Conv.groups=[grouped] --set conv_grouped_io=equal
    --set types.Conv.group_count=[2,3,4,6,8,10,12,16,24,32,48,64]"
quiet() { grep -vE "Warning|_warn_once|plugin EP"; }
{
for SEED in 0 1 2; do
  echo "stage sample seed $SEED $(el)"
  eval "SETS=\$S$SEED"
  python3 kernel_model/kernel_sampler.py --device "$DEV" --set "seed=$SEED" $SETS 2>&1 | quiet
done
ZOO=()
if [ "$DEV" = cuda ]; then
  ZR=$HASE_HOME/zoo_records; mkdir -p "$ZR"
  python3 -c "import json, sys; from hase.utils.paths import read_json
[open(f'{sys.argv[2]}/{m}.cuda.json', 'w').write(json.dumps(r)) for m, r in read_json(sys.argv[1], 'records').items()]" \
    ort_analysis/ort_kernel_record/nvidia-h200/records.json.xz "$ZR"
  ZOO=(--record "$ZR/*.cuda.json")
fi
echo "stage measure $(el)"
python3 benchmark/multi_kernel_runner.py --device "$DEV" --max-minutes "${MINUTES:-7}" --set out=remeasure \
  --set "only_ids=$IDS" --record "$SDIR/kspace_s0.$DEV.json" --record "$SDIR/kspace_s1.$DEV.json" \
  --record "$SDIR/kspace_s2.$DEV.json" "${ZOO[@]}" ${RUNNER_SETS:-} 2>&1 | quiet
echo "stage done $(el)"
} 2>&1 | tee "$JOB/log.txt"
R=$(ls -d "$HASE_HOME"/benchmark/results/*/ 2>/dev/null | head -1)
[ -n "$R" ] && cp "$R"remeasure/kernels.csv "$R"remeasure/throughput.json "$R"remeasure/resolved_config.json "$JOB"/ 2>/dev/null
nvidia-smi --query-gpu=name,serial,driver_version --format=csv,noheader > "$JOB/gpu.txt" 2>/dev/null
touch "$JOB/DONE"
