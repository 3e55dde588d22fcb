"""Does a CPU EP model's latency move with the machine's state minutes apart, and does a calibration taken just
before it see the move? (issue 23 item 5: CPU EP on a machine Hase never saw; a cloud VM shares its host.)

Every model of a folder of ONNX files gets one CPU EP session, kept open. Then `passes` passes, each over the models
in a new shuffled order: the process calibration (benchmark/host_calibration.py: host chains, conv / matmul / add
throughput) just before the model, then the model's median session.run over `budget_ms`. One row per (pass, model).

  python benchmark/cpu_episodes.py --set models_dir=/tmp/hase_cpu/model_zoo/models --set threads=2 \
      --set passes=12 --set out=benchmark/results/cpu-amd-epyc/episodes/run_a

Writes <out>/episodes.csv (pass, order, model, e2e_median_ms, the probe's fields, time_unix), <out>/summary.json
(how far each model moves between passes, and how much of that a probe-scaled prediction takes away, leave one model
out) and resolved_config.json. A pass is written as soon as it ends; a rerun resumes after the last whole pass.
"""
import json
import math
import random
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hase.benchmark.host_calibration import Calibrator, host_index
from hase.benchmark.ort_kernel_runner import make_runner, time_loop
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.onnx_io import dummy_feed
from hase.utils.ort_session import make_session

DEFAULTS = {"models_dir": "", "threads": 2, "passes": 12, "budget_ms": 300.0, "probe_budget_ms": 60.0,
            "max_models": 0, "seed": 0, "out": "benchmark/results/cpu-amd-epyc/episodes/run_a"}
PROBES = ("host_index_us", "conv_gflops", "matmul_gflops", "add_gbps")


def probe(cal: Calibrator, budget_ms: float) -> dict:
    """The process calibration now: host_index_us (the host chains) and the three compute rates."""
    return {"host_index_us": host_index(cal.host(budget_ms / 3)), **cal.compute(budget_ms)}


def summarize(df: pd.DataFrame) -> dict:
    """How far each model's pass moves from its median over passes (the episode), and how much a probe-scaled
    prediction removes: per probe, a model's log time ratio regressed on the probe's log time ratio (slope fitted
    on the other models: leave one model out), the scaled median against each pass."""
    d = df.copy()
    d["log_t"] = np.log(d["e2e_median_ms"] / d.groupby("model")["e2e_median_ms"].transform("median"))
    out = {"rows": int(len(d)), "models": int(d["model"].nunique()), "passes": int(d["pass"].nunique()),
           "span_minutes": float((d["time_unix"].max() - d["time_unix"].min()) / 60)}
    ape = (np.exp(d["log_t"]) - 1).abs() * 100
    out["pass_vs_model_median"] = {"mape_pct": float(ape.mean()), "within_10pct": float((ape <= 10).mean() * 100),
                                   "p90_abs_pct": float(ape.quantile(0.9))}
    per = {}
    for k in PROBES:
        ref = d.groupby("model")[k].transform("median")
        x = np.log(d[k] / ref) * (1 if k == "host_index_us" else -1)   # the probe's time ratio
        d["x_" + k] = x
        pred_err = []
        for m in d["model"].unique():
            tr, te = d["model"] != m, d["model"] == m
            xs, ys = x[tr].to_numpy(), d.loc[tr, "log_t"].to_numpy()
            slope = float(np.dot(xs, ys) / max(np.dot(xs, xs), 1e-12))
            pred_err.append(np.exp(d.loc[te, "log_t"] - slope * x[te]) - 1)
        e = pd.concat(pred_err).abs() * 100
        xs_all, ys_all = x.to_numpy(), d["log_t"].to_numpy()
        per[k] = {"corr": float(np.corrcoef(xs_all, ys_all)[0, 1]) if np.std(xs_all) > 0 else math.nan,
                  "slope_all": float(np.dot(xs_all, ys_all) / max(np.dot(xs_all, xs_all), 1e-12)),
                  "probe_spread_pct": float((np.exp(x.abs()) - 1).median() * 100),
                  "scaled_mape_pct": float(e.mean()), "scaled_within_10pct": float((e <= 10).mean() * 100)}
    out["by_probe"] = per
    return out


def main() -> int:
    p = base_parser("CPU EP latency episodes against a calibration taken just before each model", "benchmark",
                    "cpu_episodes.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("benchmark", args.log_level)
    mdir = Path(cfg["models_dir"])
    files = sorted(mdir.glob("*.onnx")) if cfg["models_dir"] else []
    if not files:
        raise HaseError("no .onnx files: set models_dir to a folder of exported models", mdir)
    if cfg["max_models"]:
        files = files[:int(cfg["max_models"])]
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    save_resolved(cfg, out)
    csv = out / "episodes.csv"
    done = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
    start = int(done["pass"].max()) + 1 if len(done) else 0
    cal = Calibrator("cpu", 0, int(cfg["threads"]))
    runs = {}
    for f in files:
        sess = make_session(str(f), "cpu", "all", threads=int(cfg["threads"]))
        pins = {i.name: [d if isinstance(d, int) else 1 for d in i.shape] for i in sess.get_inputs()}
        run = make_runner(sess, dummy_feed(sess, pins), "e2e")
        for _ in range(3):
            run()
        runs[f.stem] = (sess, run)
    log.info("%d models, %d threads; passes %d..%d", len(runs), cfg["threads"], start, cfg["passes"] - 1)
    rows = done.to_dict("records")
    for ps in range(start, int(cfg["passes"])):
        order = list(runs)
        random.Random(int(cfg["seed"]) * 1000 + ps).shuffle(order)
        t0 = time.time()
        for j, m in enumerate(order):
            pr = probe(cal, float(cfg["probe_budget_ms"]))
            r = time_loop(runs[m][1], None, float(cfg["budget_ms"]), 5, 10000)
            rows.append({"pass": ps, "order": j, "model": m, "e2e_median_ms": r["median_ms"], **pr,
                         "time_unix": time.time()})
        paths.atomic_write_text(csv, pd.DataFrame(rows).to_csv(index=False))
        log.info("pass %d/%d: %d models in %.0f s", ps + 1, cfg["passes"], len(order), time.time() - t0)
    s = summarize(pd.DataFrame(rows))
    paths.atomic_write_text(out / "summary.json", json.dumps(s, indent=1) + "\n")
    log.info("a pass against its model's median: %.1f%% MAPE; scaled by add_gbps %.1f%%, matmul %.1f%%, host %.1f%%",
             s["pass_vs_model_median"]["mape_pct"], s["by_probe"]["add_gbps"]["scaled_mape_pct"],
             s["by_probe"]["matmul_gflops"]["scaled_mape_pct"], s["by_probe"]["host_index_us"]["scaled_mape_pct"])
    return 0


if __name__ == "__main__":
    run_main(main)
