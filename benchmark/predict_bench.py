"""How long `hase predict` takes from the ONNX file alone (issue 25's target: first call <= 2 min, later calls <= 1 s),
as a new user runs it: each call a fresh process, HASE_HOME empty before the first call of the first model.

  python -m hase.benchmark.predict_bench --model a.onnx [--model b.onnx ...] [--gpu nvidia-h200] [--calls 3]
        [--out benchmark/results/predict_cli]

For each model: one first call (the analysis: ORT's CUDA-EP graph, offline where no CUDA EP runs; the first model's
first call also builds the caches of the GPU records' facts and of the node model's arrays), then --calls later
calls (everything cached). Writes <out>/predict_bench.json and <out>/report.md with the machine it ran on.
"""
import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from hase.utils import paths
from hase.utils.errors import HaseError, run_main


def one_call(model: Path, gpu: str, env: dict) -> tuple:
    """(wall seconds, predicted ms) of one `hase predict` process."""
    t0 = time.perf_counter()
    out = Path(env["HASE_HOME"]) / "pred.json"
    p = subprocess.run([sys.executable, "-m", "hase.cli", "predict", str(model), "--gpu", gpu, "--json", str(out)],
                       env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise HaseError(f"hase predict failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}", model)
    return wall, float(json.loads(out.read_text())["total_ms"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", type=Path, required=True)
    ap.add_argument("--gpu", default="nvidia-h200")
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("benchmark/results/predict_cli"))
    a = ap.parse_args()
    for m in a.model:
        if not m.is_file():
            raise HaseError("not a file", m)
    home = Path(tempfile.mkdtemp(prefix="hase_predict_bench_"))
    env = paths.child_env(dict(os.environ, HASE_HOME=str(home)))
    rows = []
    try:
        for i, m in enumerate(a.model):
            first, ms = one_call(m, a.gpu, env)
            later = [one_call(m, a.gpu, env) for _ in range(a.calls)]
            if any(abs(x[1] - ms) > 1e-9 for x in later):
                raise HaseError("a later call predicted another value than the first", m)
            rows.append({"model": m.name, "first_s": round(first, 2), "later_s": [round(x[0], 2) for x in later],
                         "later_median_s": round(float(np.median([x[0] for x in later])), 2),
                         "predicted_ms": ms, "first_of_all": i == 0})
            print(f"{m.name}: first {first:.2f} s, later {rows[-1]['later_median_s']:.2f} s (median of "
                  f"{a.calls}), predicted {ms:.3f} ms", flush=True)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    import onnxruntime as ort
    from hase.utils.ort_session import cuda_probe
    machine = {"cpu_cores_logical": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
               "load_avg_1m_at_end": round(os.getloadavg()[0], 2), "python": platform.python_version(),
               "onnxruntime": ort.__version__, "cuda_ep_here": bool(cuda_probe()[0]),   # a session that really runs
               "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    res = {"what": "hase predict MODEL --gpu GPU, each call a fresh process, HASE_HOME empty at the start",
           "gpu": a.gpu, "machine": machine, "models": rows,
           "first_s_max": max(r["first_s"] for r in rows), "later_s_max": max(max(r["later_s"]) for r in rows)}
    a.out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(a.out / "predict_bench.json", json.dumps(res, indent=1) + "\n")
    lines = ["# `hase predict` from the ONNX file alone (issue 25: first call <= 2 min, later calls <= 1 s)", "",
             f"`python -m hase.benchmark.predict_bench --gpu {a.gpu} --model ...`; each call a fresh process, "
             f"HASE_HOME empty at the start. Machine: {machine['cpu_cores_logical']} logical CPUs "
             f"({machine['cpu']}), load average {machine['load_avg_1m_at_end']} at the end, onnxruntime "
             f"{machine['onnxruntime']}, CUDA EP here: {machine['cuda_ep_here']}; {machine['date_utc']}.", "",
             "| model | first call (s) | later calls (s) | predicted (ms) |", "|---|---|---|---|"]
    lines += [f"| {r['model']}{' (first of all: builds the caches)' if r['first_of_all'] else ''} | {r['first_s']} | "
              f"{', '.join(str(x) for x in r['later_s'])} | {r['predicted_ms']:.3f} |" for r in rows]
    lines += ["", f"Slowest first call {res['first_s_max']} s, slowest later call {res['later_s_max']} s."]
    paths.atomic_write_text(a.out / "report.md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    run_main(main)
