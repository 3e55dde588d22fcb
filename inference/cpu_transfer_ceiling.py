"""Issue 23 item 5: how far can per-class scaling carry CPU EP latency from one CPU to another? (a compare report)

  python inference/cpu_transfer_ceiling.py --set source=benchmark/results/cpu-amd-epyc/threads/fresh \
      --set target=benchmark/results/cpu-intel-r-xeon-r-processor/threads/fresh --set out=OUT

Both folders hold trace_run CPU sessions of the same models at the same thread counts (tT/machine_a). Each target
model's e2e is predicted from the source's own measured e2e, scaled by the ratio of (scaled) node sums:
  as is                    no scaling
  one ratio                one time-weighted target/source ratio over every node of the other models
  per op                   a ratio per op type, learned on the other models' nodes (leave one model out)
  per op x node size       a ratio per op type and source node time bin, likewise
  the model's own nodes    the model's own measured node-sum ratio: what a shape-exact calibration could reach
The first four are what a calibration by class (and size) can do at best on this CPU pair; none uses the timeline
model, so its own error is not in them. Writes OUT/summary.json.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy

DEFAULTS = {"source": "", "target": "", "threads": [1, 2], "size_bins_us": [5.0, 20.0, 100.0, 500.0], "out": ""}


def tables(folder: Path, t: int) -> tuple:
    d = folder / f"t{t}" / "machine_a"
    for f in ("trace_nodes.csv", "trace_sessions.csv"):
        if not paths.csv_or_gz(d / f).exists():
            raise HaseError(f"no {f}[.xz] of {t}-thread sessions", d)
    nodes = pd.read_csv(paths.csv_or_gz(d / "trace_nodes.csv"))
    sess = pd.read_csv(paths.csv_or_gz(d / "trace_sessions.csv"))
    return nodes.groupby(["model", "node", "op"])["host_us"].median(), sess.groupby("model")["e2e_median_ms"].median()


def scaled(j: pd.DataFrame, model: str, key) -> float:
    """Target/source node-sum ratio of `model` from ratios per `key` group learned on the other models."""
    tr, te = j[j["model"] != model], j[j["model"] == model]
    overall = tr["x"].sum() / tr["a"].sum()
    if key is None:
        return overall
    g = tr.groupby(key, observed=True)
    r = (g["x"].sum() / g["a"].sum()).to_dict()
    by_op = (tr.groupby("op")["x"].sum() / tr.groupby("op")["a"].sum()).to_dict()
    keys = te[key].itertuples(index=False, name=None) if isinstance(key, list) else te[key]
    f = [r.get(k, by_op.get(k[0] if isinstance(k, tuple) else k, overall)) for k in keys]
    return float((te["a"] * np.array(f)).sum() / te["a"].sum())


def main() -> int:
    p = base_parser("How far per-class scaling carries CPU EP latency to another CPU", "inference",
                    "cpu_transfer_ceiling.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS, required=("source", "target", "out"))
    log = get_logger("inference", args.log_level)
    bins = [-np.inf] + [float(b) for b in cfg["size_bins_us"]] + [np.inf]
    summary = {"source": cfg["source"], "target": cfg["target"], "by_threads": {}}
    for t in cfg["threads"]:
        (a, ea), (x, ex) = tables(Path(cfg["source"]), int(t)), tables(Path(cfg["target"]), int(t))
        j = pd.concat([x.rename("x"), a.rename("a")], axis=1).dropna().reset_index()
        j["size"] = pd.cut(j["a"], bins)
        models = sorted(set(ea.index) & set(ex.index) & set(j["model"]))
        if not models:
            raise HaseError(f"no model measured on both CPUs at {t} threads", "source")
        truth = ex[models]
        own = (j.groupby("model")["x"].sum() / j.groupby("model")["a"].sum())[models]
        rows = {"as is": ea[models],
                "one ratio": ea[models] * [scaled(j, m, None) for m in models],
                "per op": ea[models] * [scaled(j, m, "op") for m in models],
                "per op x node size": ea[models] * [scaled(j, m, ["op", "size"]) for m in models],
                "the model's own nodes": ea[models] * own}
        summary["by_threads"][str(t)] = {"models": len(models), "nodes_matched": int(len(j)),
                                         **{k: accuracy(v.to_numpy(), truth.to_numpy()) for k, v in rows.items()}}
        log.info("%s threads, %d models: %s", t, len(models), "; ".join(
            f"{k} {summary['by_threads'][str(t)][k]['mape_pct']:.1f}%" for k in rows))
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    save_resolved(cfg, out)
    return 0


if __name__ == "__main__":
    run_main(main)
