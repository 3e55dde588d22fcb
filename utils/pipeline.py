"""The main job: every phase in order, each as its own script reading the previous one's files.

  python -m hase.utils.pipeline [--device cpu|cuda|auto] [--from PHASE] [--only PHASE] [--idle-busy-max F]

The collector's stress level 0 and the evaluator's fit are the idle reference: on a machine that is not idle
(busy field above idle_busy_max, 0.1) they wait, then stop with one line naming the field and its value;
--idle-busy-max 1 measures anyway (the tests do: they must pass on a loaded machine).

On CPU EP the plan's full GPU configs (batch 16-128, 224-512 px) would take hours on a small
machine, so CPU runs use the small settings below; on CUDA the phases' own config.yaml apply.
"""
import argparse
import subprocess
import sys
import time
from pathlib import Path


from hase.utils import paths
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.ort_session import resolve_device  # noqa: E402

REPO = Path(__file__).resolve().parent.parent

# (phase name, script, --set overrides used on CPU EP)
STAGES = [
    ("export", "model_zoo/torchvision_exporter.py",
     ["batch_sizes=[1,4]", "resolutions=[64,128]", "models=[resnet18,mobilenet_v2]"]),
    ("analyse", "ort_analysis/fusion_detector.py", []),
    ("build", "kernel_model/kernel_builder.py", []),
    ("bandwidth", "benchmark/bandwidth.py", ["bandwidth.max_bytes=67108864", "bandwidth.budget_ms=50"]),
    ("collect", "benchmark/collector.py",
     ["stress_levels=[0,0.6]", "runner.budget_ms=30", "settle_s=1", "bg_sample_ms=50"]),
    ("train", "training/train_kernel_model.py", []),
    ("dag", "graph_model/dag_critical_path.py", []),
    ("evaluate", "evaluator.py", []),
]

IDLE_STAGES = ("collect", "evaluate")   # the stages that record or fit an idle reference (idle_busy_max)


def stage_args(name: str, device: str) -> list:
    """Arguments a stage needs beyond --device/--set (the evaluator reads phase 4's measurements)."""
    if name == "evaluate":
        from hase.utils import paths
        from hase.utils.ort_session import device_slug
        return ["--from-csv", str(paths.bench_results_dir() / device_slug(device) / "models.csv"),
                "--fit"]
    return []


def stage_names():
    return [s[0] for s in STAGES]


def main() -> int:
    p = argparse.ArgumentParser(description="Run the Hase pipeline end to end")
    p.add_argument("--device", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--from", dest="start", choices=stage_names(), default=stage_names()[0])
    p.add_argument("--only", choices=stage_names())
    p.add_argument("--idle-busy-max", type=float, default=None, metavar="FRACTION",
                   help="busy fraction up to which the idle reference counts as idle (collector's level 0 and the "
                        "timeline fit, idle_busy_max; default theirs, 0.1; 1 = measure on a busy machine anyway)")
    args = p.parse_args()
    if args.idle_busy_max is not None and not 0 <= args.idle_busy_max:
        raise HaseError(f"--idle-busy-max must be a fraction >= 0, got {args.idle_busy_max:g}")
    device = resolve_device(args.device)
    names = stage_names()
    todo = [s for s in STAGES if (s[0] == args.only if args.only else names.index(s[0]) >= names.index(args.start))]
    t_all = time.perf_counter()
    for i, (name, script, cpu_sets) in enumerate(todo, 1):
        cmd = [sys.executable, str(REPO / script), "--device", device] + stage_args(name, device)
        if device == "cpu":
            for s in cpu_sets:
                cmd += ["--set", s]
        if args.idle_busy_max is not None and name in IDLE_STAGES:
            cmd += ["--set", f"idle_busy_max={args.idle_busy_max:g}"]
        print(f"[{i}/{len(todo)}] {name}: {' '.join(cmd[1:])}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd, cwd=REPO, env=paths.child_env())
        if rc != 0:
            raise HaseError(f"stage '{name}' failed with exit code {rc}", script)
        print(f"[{i}/{len(todo)}] {name} done in {time.perf_counter() - t0:.0f} s", flush=True)
    print(f"pipeline done on {device} in {time.perf_counter() - t_all:.0f} s")
    return 0


if __name__ == "__main__":
    run_main(main)
