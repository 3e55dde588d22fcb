"""benchmark/cpu_episodes.py: real CPU EP sessions over two small models, two passes, then a resumed third; and the
summary's algebra on a synthetic table where the model's time follows one probe exactly."""
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import build_residual_model, run_script  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def test_passes_run_real_sessions_resume_and_summarize(tmp_path):
    models = tmp_path / "m"
    models.mkdir()
    build_residual_model(models / "a.onnx", "a", 8, 2, 16)
    build_residual_model(models / "b.onnx", "b", 16, 3, 24)
    out = tmp_path / "out"
    args = [REPO / "benchmark/cpu_episodes.py", "--set", f"models_dir={models}", "--set", "threads=1",
            "--set", "budget_ms=20", "--set", "probe_budget_ms=10", "--set", f"out={out}"]
    run_script(args + ["--set", "passes=2"], tmp_path)
    first = pd.read_csv(out / "episodes.csv")
    assert len(first) == 4 and set(first["model"]) == {"a", "b"} and sorted(first["pass"].unique()) == [0, 1]
    assert (first["e2e_median_ms"] > 0).all() and (first[["conv_gflops", "matmul_gflops", "add_gbps"]] > 0).all().all()
    run_script(args + ["--set", "passes=3"], tmp_path)   # resumes after the last whole pass
    both = pd.read_csv(out / "episodes.csv")
    assert len(both) == 6 and both.head(4).equals(first)
    s = json.loads((out / "summary.json").read_text())
    assert s["rows"] == 6 and s["passes"] == 3 and set(s["by_probe"]) == {"host_index_us", "conv_gflops",
                                                                          "matmul_gflops", "add_gbps"}
    bad = run_script([REPO / "benchmark/cpu_episodes.py", "--set", f"models_dir={tmp_path / 'none'}"], tmp_path,
                     check=False)
    assert bad.returncode != 0 and "no .onnx files" in bad.stderr.strip().splitlines()[-1]


def test_a_model_that_follows_the_conv_probe_is_predicted_by_it_and_not_by_the_others():
    from hase.benchmark.cpu_episodes import summarize
    rng = np.random.default_rng(0)
    rows = []
    for m in range(6):
        for p in range(9):                                          # odd: a median is one pass
            conv = 480.0 * np.exp(rng.normal(0, 0.05))          # the machine's state, seen by the conv probe
            t = (1 + m) * (480.0 / conv) ** 2                     # the model slows twice as much, in log
            rows.append({"pass": p, "model": f"m{m}", "e2e_median_ms": t, "conv_gflops": conv,
                         "matmul_gflops": 500.0 * np.exp(rng.normal(0, 0.01)), "add_gbps": 100.0,
                         "host_index_us": 0.37, "time_unix": 60.0 * p})
    s = summarize(pd.DataFrame(rows))
    assert s["pass_vs_model_median"]["mape_pct"] > 3
    assert s["by_probe"]["conv_gflops"]["scaled_mape_pct"] < 1e-6
    assert abs(s["by_probe"]["conv_gflops"]["slope_all"] - 2.0) < 1e-6
    assert s["by_probe"]["matmul_gflops"]["scaled_mape_pct"] > 0.5 * s["pass_vs_model_median"]["mape_pct"]
