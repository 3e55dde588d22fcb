"""Validate inference/fit_measured_timeline.overlap_corrected (the estimate of a node's GPU time where its kernels
overlapped, for traces that summed them) against a re-trace that measured the union of every node's kernel
intervals (benchmark/trace_run.node_gpu since session 17).

For every (model, node) traced both ways: the old trace's summed time, the estimate from it, and the re-trace's
measured union (and its own kernel sum, which checks the re-trace saw the same kernels). Writes a CSV of the nodes
the estimate changed or the union differs from the sum, and a JSON summary (GPU time is stable across sessions and
machines of one GPU kind: CV 0.11%, so old and new traces are comparable node by node).

  python debug/overlap_validation.py [--set old='[benchmark/results/nvidia-h200/corpus/machine_[a-s]]'] \
      [--set new=benchmark/results/nvidia-h200/corpus/machine_t_retrace] [--set out=benchmark/results/nvidia-h200/corpus]
"""
import glob
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

import argparse

from hase.inference.fit_measured_timeline import read_tables, overlap_corrected, NEED_S, NEED_N
from hase.utils.config import resolve
from hase.utils.errors import run_main
from hase.utils.paths import atomic_write_text

DEFAULTS = {"old": ["benchmark/results/nvidia-h200/corpus/machine_[a-s]"],
            "new": "benchmark/results/nvidia-h200/corpus/machine_t_retrace",
            "out": "benchmark/results/nvidia-h200/corpus"}


def per_node(sessions: pd.DataFrame, nodes: pd.DataFrame) -> pd.DataFrame:
    """Median over sessions and machines of each (model, node)'s GPU times."""
    cols = [c for c in ("gpu_us", "gpu_raw_us", "gpu_kernel_sum_us", "launches") if c in nodes]
    n = nodes.copy()
    for c in cols:
        n[c] = pd.to_numeric(n[c], errors="coerce")
    return n.groupby(["model", "node", "op"])[cols].median()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    cfg = resolve(DEFAULTS, None, p.parse_args().overrides)
    # label-only machines (benchmark/clean_labels.py) have no trace tables
    old_dirs = sorted(d for pat in cfg["old"] for d in glob.glob(pat) if glob.glob(f"{d}/trace_nodes.csv.*"))
    new_dirs = [cfg["new"]]
    so, no = read_tables(old_dirs, "trace_sessions.csv.gz", NEED_S, "old trace"), \
        read_tables(old_dirs, "trace_nodes.csv.gz", NEED_N, "old trace")
    sn, nn = read_tables(new_dirs, "trace_sessions.csv.gz", NEED_S, "re-trace"), \
        read_tables(new_dirs, "trace_nodes.csv.gz", NEED_N, "re-trace")
    models = sorted(set(nn["model"]) & set(no["model"]))
    no, so = no[no["model"].isin(models)], so[so["model"].isin(models)]
    no = no.assign(gpu_raw_us=pd.to_numeric(no["gpu_us"], errors="coerce"))
    est = overlap_corrected(so, no)
    old = per_node(so, est).rename(columns={"gpu_us": "estimate_us", "gpu_raw_us": "old_sum_us",
                                              "launches": "old_launches"})
    new = per_node(sn, nn[nn["model"].isin(models)]).rename(
        columns={"gpu_us": "union_us", "gpu_kernel_sum_us": "new_sum_us", "launches": "new_launches"})
    j = old[["old_sum_us", "estimate_us", "old_launches"]].join(new, how="inner").reset_index()
    j = j[j["old_launches"] == j["new_launches"]]   # the same kernels (same algorithm choice) both times
    changed = j[(j["old_sum_us"] > 1.02 * j["union_us"]) | (j["estimate_us"] < 0.98 * j["old_sum_us"])].copy()
    changed["estimate_over_union"] = changed["estimate_us"] / changed["union_us"]
    changed["sum_over_union"] = changed["old_sum_us"] / changed["union_us"]

    def mape(a, b):
        return float(np.mean(np.abs(a / b - 1.0)) * 100) if len(a) else float("nan")
    per_model = j.groupby("model")[["old_sum_us", "estimate_us", "union_us"]].sum()
    summary = {
        "what": "overlap_corrected's estimate of node GPU time (old traces that summed overlapping kernels) against "
                "the measured union of the node's kernel intervals (a re-trace), medians over sessions and machines",
        "old_machines": [Path(d).name for d in old_dirs if Path(d).name in set(no["machine"])],
        "new": Path(cfg["new"]).name, "models": len(models), "nodes_compared": int(len(j)),
        "nodes_with_overlap": int(len(changed)),
        "node_mape_pct": {"old_sum_vs_union": mape(changed["old_sum_us"], changed["union_us"]),
                          "estimate_vs_union": mape(changed["estimate_us"], changed["union_us"])},
        "node_estimate_over_union": {q: float(changed["estimate_over_union"].quantile(p))
                                     for q, p in (("p10", .1), ("median", .5), ("p90", .9))} if len(changed) else {},
        "model_gpu_mape_pct": {"old_sum_vs_union": mape(per_model["old_sum_us"], per_model["union_us"]),
                               "estimate_vs_union": mape(per_model["estimate_us"], per_model["union_us"])},
        "model_gpu_worst": {"old_sum_over_union": float((per_model["old_sum_us"] / per_model["union_us"]).max()),
                            "estimate_over_union": float((per_model["estimate_us"] / per_model["union_us"]).max()),
                            "estimate_under_union": float((per_model["estimate_us"] / per_model["union_us"]).min())},
    }
    out = Path(cfg["out"])
    atomic_write_text(out / "overlap_validation.csv", changed.sort_values("sum_over_union", ascending=False)
                      .to_csv(index=False, float_format="%.4g"))
    atomic_write_text(out / "overlap_validation.json", json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
