"""Compare only (not on the prediction path): is cuDNN's per-group choice for a grouped Conv1d (CUDA EP, EXHAUSTIVE,
default layout) the same on every machine, and can a classifier on the shape learn it when the grid's designs
(benchmark/results/nvidia-h200/conv1d_nc1d/, lazy variant) join the corpus's nodes?

  python inference/results/nvidia-h200/compare_per_group_classifier/run.py

Reads every H200 and H100 corpus machine's trace_nodes (median launches per node over sessions), the merged CUDA
records for each node's shape, and the grid; writes summary.json beside this file. "Per group" = launches >= groups.
Leave one family out: the classifier never sees the held-out family's nodes (the grid's designs always train).
"""
import glob
import json
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier

from hase.graph_model.dag_critical_path import records_in_file
from hase.inference.node_model import grouped_conv1d
from hase.kernel_model.conv1d_grid_report import grid_cases
from hase.utils import paths

HERE = Path(__file__).resolve().parent
REPO = paths.REPO
SHAPE = ["B", "C", "L", "K", "dilation", "stride", "groups", "cout", "runtime_w", "pad0", "pad1"]


def corpus_nodes() -> pd.DataFrame:
    recs = records_in_file(REPO / "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz")
    rows = []
    for f in sorted(glob.glob(str(REPO / "benchmark/results/nvidia-h*/corpus/machine_*/trace_nodes.csv.xz"))):
        t = pd.read_csv(f, usecols=["model", "node", "op", "launches"])
        t = t[t.op == "Conv"].groupby(["model", "node"]).launches.median().reset_index()
        for m, g in t.groupby("model"):
            by = {k["node_name"]: k for k in (recs.get(m) or {}).get("kernels", []) if k["op_type"] == "Conv"}
            for _, x in g.iterrows():
                k = by.get(x.node)
                if k is None:
                    continue
                c = grouped_conv1d(k)   # the node model's reading of a grouped Conv1d's shape
                if c is None:
                    continue
                a, w = k["attributes"], k["inputs"][1]
                pads = a.get("pads") or [0, 0]
                rows.append(dict(c, gpu=Path(f).parts[-4], machine=Path(f).parts[-2], model=m, node=x.node,
                                 stride=(a.get("strides") or [1])[0], cout=w["shape"][0],
                                 runtime_w=int(w.get("role") != "weight"), launches=x.launches,
                                 pad0=pads[0], pad1=pads[1]))
    d = pd.DataFrame(rows)
    d["per_group"] = (d.launches >= d.groups).astype(int)
    d["family"] = d.model.str.split("-").str[0]
    return d


def grid_nodes() -> pd.DataFrame:
    grid = grid_cases(REPO / "benchmark/results/nvidia-h200/conv1d_nc1d", "lazy")
    grid["per_group"] = grid["per_group"].astype(int)
    grid["family"] = "grid"
    grid["pad0"] = grid["pad1"] = grid.dilation * (grid.K - 1) // 2   # conv1d_grid.conv_model's 'same'-like padding
    return grid


def features(d: pd.DataFrame) -> pd.DataFrame:
    x = d[SHAPE].astype(float).copy()
    x["span"] = (x.K - 1) * x.dilation + 1
    x["cin_per_group"], x["cout_per_group"] = x.C / x.groups, x.cout / x.groups
    x["log_macs_per_group"] = np.log2(x.B * x.L * x.K * x.cin_per_group * x.cout_per_group)
    x["log_BL"] = np.log2(x.B * x.L)
    x["padded"] = ((x.pad0 + x.pad1) > 0).astype(float)
    return x


def judge(y, p) -> dict:
    return {"nodes": int(len(y)), "accuracy_pct": round(100 * float((p == y).mean()), 1), "per_group": int(y.sum()),
            "found": int(((p == 1) & (y == 1)).sum()), "false_alarms": int(((p == 1) & (y == 0)).sum()),
            "missed": int(((p == 0) & (y == 1)).sum())}


def main():
    d, grid = corpus_nodes(), grid_nodes()
    per_node = d.groupby(["model", "node"]).per_group.agg(["mean", "count"])
    out = {"what": __doc__.split("\n\n")[0],
           "repeatability": {"node_machine_rows": int(len(d)), "machines": int(d[["gpu", "machine"]].drop_duplicates().shape[0]),
                             "gpus": sorted(d.gpu.unique()), "nodes": int(len(per_node)),
                             "nodes_on_2_or_more_machines": int((per_node["count"] > 1).sum()),
                             "nodes_whose_choice_differs": int(((per_node["mean"] > 0) & (per_node["mean"] < 1)).sum())}}
    u = d.drop_duplicates(SHAPE + ["family"]).reset_index(drop=True)   # one row per shape and family
    y = u.per_group.to_numpy()
    for name, make, with_grid in (("boosted trees, corpus only", lambda: GradientBoostingClassifier(max_depth=3, n_estimators=200, random_state=0), False),
                                  ("boosted trees, corpus + grid", lambda: GradientBoostingClassifier(max_depth=3, n_estimators=200, random_state=0), True),
                                  ("forest, corpus + grid", lambda: RandomForestClassifier(300, min_samples_leaf=2, random_state=0), True)):
        p = np.zeros(len(u), int)
        for fam in sorted(u.family.unique()):
            tr = u[u.family != fam]
            tr = pd.concat([tr, grid]) if with_grid else tr
            te = (u.family == fam).to_numpy()
            p[te] = make().fit(features(tr), tr.per_group).predict(features(u[te]))
        r = judge(y, p)
        r["wrong_by_family"] = {k: int(v) for k, v in u[p != y].groupby("family").size().sort_values(ascending=False).items()}
        out[name] = r
    p = GradientBoostingClassifier(max_depth=3, n_estimators=200, random_state=0).fit(features(grid), grid.per_group).predict(features(u))
    out["boosted trees, grid only -> corpus"] = judge(y, p)
    t = u[(u.family == "tasnet") & (u.K == 3) & (u.dilation == 32) & (u.C == 256)].sort_values(["L", "B"])
    out["example: tasnet K=3 dilation=32 C=256"] = [f"B={r.B} L={r.L}: {'per group' if r.per_group else 'one kernel'}"
                                                   for r in t.itertuples()]
    (HERE / "summary.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps({k: v for k, v in out.items() if not k.startswith("example")}, indent=1))


if __name__ == "__main__":
    main()
