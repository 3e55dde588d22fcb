# session 46: 5 rounds, each 2 passes at 1 intra-op thread then 2 passes at 2 (both counts see the same stretch of
# the VM); models_dir: the fresh set exported by run_cpu_threads.sh (HASE_HOME=/tmp/hase_cpu46); episodes.csv then xz
cd /work/main
for r in 1 2 3 4 5; do
  for t in 1 2; do
    echo "round $r t$t $(date +%T)"
    .venv/bin/python benchmark/cpu_episodes.py --set models_dir=/tmp/hase_cpu46/model_zoo/models --set threads=$t \
      --set passes=$((2 * r)) --set seed=$t --set out=/tmp/episodes_s46/t$t 2>&1 | grep -E "pass|rror" | tail -2
  done
done
echo done $(date +%T)
