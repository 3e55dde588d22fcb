"""Phase 3 report: where cuDNN runs a 1-D grouped conv one channel group at a time, read on the conv1d_grid job's
single-node traces, and how well the two ways of telling it in advance do there: the risk rule the predictor warns by
(inference/node_model.py per_group_risk: a kernel spanning PER_GROUP_MIN_KERNEL or more, dilation included) and a
classifier learned on the corpus's grouped Conv1d nodes (shape only; the grid's shapes are not in the corpus, so the
grid is a held-out test of it).

  python kernel_model/conv1d_grid_report.py --set grid=DIR [--set variant=lazy] [--set out=DIR]

DIR: benchmark/run_gpu_conv1d_grid.sh's output (grid.csv, nodes_<variant>.csv.gz). A node ran per group when it
launched at least as many kernels as it has groups. Writes <out>/summary.json (the rule's and the classifier's
accuracy, recall and false alarms on the grid; the classifier's leave-architecture-out accuracy on the corpus; what a
per-group node costs: host dispatch per launch, GPU time per group) and <out>/cases.csv (one row per grid conv).
Why it waits for the grid: session 22's per-group term, switched by a classifier fitted on the corpus alone, made out
of fold MAPE worse (inference/results/nvidia-h200/compare_per_group_term/README.md): near the boundary cuDNN's choice
follows timing, and the corpus moves kernel length, batch, length and dilation together.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.utils import paths
from hase.utils.config import base_parser, from_args
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger

DEFAULTS = {"grid": "", "variant": "lazy", "out": "",
            "corpus_dirs": ["benchmark/results/nvidia-h200/corpus/machine_*"],
            "records": "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
            "threshold": 0.5, "folds": 5, "seed": 0}
FEATURES = ["K", "dilation", "span", "B", "C", "L", "groups", "cin_per_group", "log_macs_per_group"]


def shape_features(d: pd.DataFrame) -> pd.DataFrame:
    """The classifier's features from K, dilation, B, C, L, groups (and cout where given)."""
    from hase.inference.node_model import effective_kernel
    f = d[["K", "dilation", "B", "C", "L", "groups"]].astype(float).copy()
    f["span"] = [effective_kernel(k, di) for k, di in zip(d["K"].astype(int), d["dilation"].astype(int))]
    f["cin_per_group"] = f["C"] / f["groups"]
    f["log_macs_per_group"] = np.log(f["B"] * f["L"] * f["K"] * f["cin_per_group"])
    return f[FEATURES]


def corpus_candidates(records: dict, nodes: pd.DataFrame) -> pd.DataFrame:
    """The corpus's grouped 1-D Conv nodes on the CUDA EP with their shape and measured launches (medians over
    sessions and machines) and `per_group` (launches >= groups)."""
    from hase.inference.node_model import grouped_conv1d
    rows = [{"model": m, "node": k.get("node_name") or k.get("id"), **c}
            for m, r in records.items() for k in r["kernels"] if (c := grouped_conv1d(k))]
    c = pd.DataFrame(rows, columns=["model", "node", "K", "dilation", "span", "B", "C", "L", "groups"])
    med = nodes.groupby(["model", "node"], as_index=False)[["launches", "gpu_us", "host_us"]].median()
    c = c.merge(med, on=["model", "node"])
    c["arch"] = [paths.model_arch(m) for m in c["model"]]
    c["per_group"] = c["launches"] >= c["groups"]
    return c


def fit_classifier(c: pd.DataFrame, seed: int = 0):
    from sklearn.ensemble import GradientBoostingClassifier
    return GradientBoostingClassifier(max_depth=3, n_estimators=200, random_state=seed).fit(
        shape_features(c).to_numpy(), c["per_group"].astype(int).to_numpy())


def leave_arch_out(c: pd.DataFrame, folds: int, threshold: float, seed: int = 0) -> dict:
    """The classifier's out-of-fold accuracy on the corpus, folds by architecture."""
    from sklearn.model_selection import GroupKFold
    p = np.zeros(len(c))
    X, y = shape_features(c).to_numpy(), c["per_group"].astype(int).to_numpy()
    for tr, te in GroupKFold(int(folds)).split(X, y, c["arch"]):
        p[te] = fit_classifier(c.iloc[tr], seed).predict_proba(X[te])[:, 1]
    return dict(nodes=int(len(c)), **judge(c["per_group"].to_numpy(), p >= threshold))


def judge(truth, said) -> dict:
    truth, said = np.asarray(truth, bool), np.asarray(said, bool)
    return {"accuracy_pct": float((truth == said).mean() * 100) if len(truth) else float("nan"),
            "per_group": int(truth.sum()), "found": int((truth & said).sum()), "missed": int((truth & ~said).sum()),
            "false_alarms": int((~truth & said).sum())}


def grid_cases(grid_dir: Path, variant: str) -> pd.DataFrame:
    """One row per grid Conv with groups > 1: its configuration, launches, GPU and host time, per_group."""
    g = paths.csv_or_gz(grid_dir / "grid.csv")
    n = paths.csv_or_gz(grid_dir / f"nodes_{variant}.csv")
    for f in (g, n):
        if not f.exists():
            raise HaseError(f"{f.name} missing (not a run_gpu_conv1d_grid.sh output folder)", grid_dir)
    grid = pd.read_csv(g)
    nodes = pd.read_csv(n)
    need = {"model", "launches", "gpu_us", "host_us"} - set(nodes.columns)
    if need:
        raise HaseError(f"columns {sorted(need)} missing", n)
    per = nodes.groupby("model", as_index=False)[["launches", "gpu_us", "host_us"]].median()
    d = grid.merge(per, left_on="name", right_on="model")
    d = d[(d["op"] == "Conv") & (d["groups"] > 1)].copy()
    d["per_group"] = d["launches"] >= d["groups"]
    return d


def costs(d: pd.DataFrame) -> dict:
    """What a per-group node costs: host dispatch per launch (as traced: CUPTI's own ~5 us a launch is in it), GPU
    time per group (medians), and the single-kernel nodes' GPU time per MAC for comparison."""
    pg, one = d[d["per_group"]], d[~d["per_group"]]
    macs = d["B"] * d["C"] / d["groups"] * d["L"] * d["K"] * d["groups"]
    return {"per_group_nodes": int(len(pg)),
            "host_us_per_launch": float((pg["host_us"] / pg["launches"]).median()) if len(pg) else None,
            "launches_per_group": float((pg["launches"] / pg["groups"]).median()) if len(pg) else None,
            "gpu_us_per_group": float((pg["gpu_us"] / pg["groups"]).median()) if len(pg) else None,
            "single_kernel_gpu_ns_per_mac": float((one["gpu_us"] * 1e3 / macs[one.index]).median()) if len(one) else None}


def main() -> int:
    p = base_parser("Phase 3 report: the per-group boundary of 1-D grouped convs on the conv1d_grid traces",
                    "kernel_model", "conv1d_grid_report.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("conv1d_grid_report", args.log_level)
    if not cfg["grid"]:
        raise HaseError("config grid: the conv1d_grid job's output folder is required")
    grid_dir = Path(cfg["grid"])
    out = Path(cfg["out"] or grid_dir / "report")
    d = grid_cases(grid_dir, cfg["variant"])
    if d.empty:
        raise HaseError("no grouped Conv in the grid's traces", grid_dir)
    from hase.graph_model.dag_critical_path import records_in_file
    from hase.inference.fit_measured_timeline import read_machines
    dirs = [x for x in paths.expand_globs(cfg["corpus_dirs"]) if Path(x).is_dir()
            and paths.csv_or_gz(Path(x) / "trace_nodes.csv").exists()]
    _, nodes = read_machines(dirs)
    c = corpus_candidates(records_in_file(cfg["records"]), nodes)
    if c["per_group"].nunique() < 2:
        raise HaseError("the corpus has no grouped Conv1d node of one of the two kinds: nothing to learn", "corpus_dirs")
    from hase.inference.node_model import PER_GROUP_MIN_KERNEL
    f = shape_features(d)
    d["rule"] = f["span"] >= PER_GROUP_MIN_KERNEL
    d["p_per_group"] = fit_classifier(c, int(cfg["seed"])).predict_proba(f.to_numpy())[:, 1]
    d["classifier"] = d["p_per_group"] >= float(cfg["threshold"])
    summary = {"what": "grouped 1-D convs of the conv1d_grid job: did they run one group at a time (launches >= "
                       "groups), and did the risk rule or the corpus classifier say so in advance",
               "grid": str(grid_dir), "variant": cfg["variant"], "grid_convs": int(len(d)),
               "rule": dict(judge(d["per_group"], d["rule"]), span_min=PER_GROUP_MIN_KERNEL),
               "classifier": dict(judge(d["per_group"], d["classifier"]), threshold=float(cfg["threshold"]),
                                  corpus=leave_arch_out(c, int(cfg["folds"]), float(cfg["threshold"]),
                                                        int(cfg["seed"]))),
               "costs": costs(d)}
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    paths.atomic_write_text(out / "cases.csv", d.to_csv(index=False))
    log.info("%d grid convs, %d per group; rule (span >= %d): %.0f%% right, %d missed, %d false alarms; corpus "
             "classifier: %.0f%% right, %d missed, %d false alarms (on the corpus, by architecture: %.0f%%)",
             len(d), summary["rule"]["per_group"], PER_GROUP_MIN_KERNEL, summary["rule"]["accuracy_pct"],
             summary["rule"]["missed"], summary["rule"]["false_alarms"], summary["classifier"]["accuracy_pct"],
             summary["classifier"]["missed"], summary["classifier"]["false_alarms"],
             summary["classifier"]["corpus"]["accuracy_pct"])
    return 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
