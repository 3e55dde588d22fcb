"""The launch-count host term with launches PREDICTED from the phase-2 record (what a prediction would have), on
the four H200 machines whose record shards are kept apart (ab, ac, ad, ae: exams v16-v19 and their anchors).

Per node, trees on the node features the GPU trees use (node_model.features) learn log1p(launches) (trace_nodes'
first session); per model, y (the clean label at the reference host speed) = c0 + b_L * launches + b_N * nodes,
relative least squares. Both are scored in 5 folds by family (a family's every seed and batch held out at once) and,
as the corpus fit's out of fold is, by architecture; the held-out models' launches are the trees' (summed per
model). Dispatch-bound rows only (GPU idle >= 60%).
  python inference/results/nvidia-h200/compare_host_launch_linear/run_predicted_launches.py   (~3 min)
Writes predicted_launches.json here.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb

from hase.graph_model.dag_critical_path import available_records
from hase.inference import node_model as nmod
from run import family, first_session_nodes, fit, labels   # this folder's run.py

OUT = Path(__file__).parent
ROOT = OUT.parents[3]
MACHINES, REF_HOST_US, IDLE_FRAC, FOLDS = ("ab", "ac", "ad", "ae"), 7.42, 0.6, 5


def arch(m: str) -> str:
    return m.split("_bs")[0]


def score(node_rows, model_rows, x, grp) -> dict:
    """Launch trees and the model-level linear host term, 5 folds grouped by grp(model)."""
    L = np.array([r[3] for r in node_rows])
    key = pd.Series([f"{r[0]}|{r[1]}" for r in node_rows])
    g = np.array([grp(r[1]) for r in node_rows])
    groups = sorted(set(g))
    fold_of = dict(zip(groups, np.random.default_rng(0).permutation(len(groups)) % FOLDS))
    nf = np.array([fold_of[v] for v in g])
    Lhat = np.zeros(len(L))
    for f in range(FOLDS):
        tr = nf != f
        b = xgb.XGBRegressor(n_estimators=300, max_depth=8, learning_rate=0.1, nthread=1, tree_method="hist")
        b.fit(x[tr], np.log1p(L[tr]))
        Lhat[~tr] = np.expm1(b.predict(x[~tr]))
    d = pd.DataFrame(model_rows)
    d["key"] = d["machine"] + "|" + d["model"]
    per = pd.DataFrame({"key": key, "L": L, "Lhat": Lhat}).groupby("key").sum()
    d = d.join(per, on="key")
    d["fold"] = d["model"].map(grp).map(fold_of)
    y = d["y_us"].to_numpy()
    out = {"rows": int(len(d)), "families": int(d["family"].nunique()),
           "launch_trees_node_mape_pct": float(np.mean(np.abs(Lhat - L)[L > 0] / L[L > 0]) * 100),
           "launch_trees_model_sum_mape_pct": float(np.mean(np.abs(d["Lhat"] / d["L"] - 1)) * 100)}
    for name, col in (("measured_launches", "L"), ("predicted_launches", "Lhat")):
        pred = np.zeros(len(d))
        for f in range(FOLDS):
            te = (d["fold"] == f).to_numpy()
            w = fit(np.c_[d.loc[~te, ["L", "nodes"]].to_numpy(float), np.ones((~te).sum())], y[~te], 0.0)
            pred[te] = np.c_[d.loc[te, [col, "nodes"]].to_numpy(float), np.ones(te.sum())] @ w
        e = (pred / y - 1) * 100
        b1 = d["model"].str.contains("_bs1_").to_numpy()
        out[name] = {"mape_pct": float(np.mean(np.abs(e))), "within_10pct": float(np.mean(np.abs(e) <= 10) * 100),
                     "median_signed_pct": float(np.median(e)), "batch1_n": int(b1.sum()),
                     "batch1_mape_pct": float(np.mean(np.abs(e[b1])))}
    w = fit(np.c_[d[["L", "nodes"]].to_numpy(float), np.ones(len(d))], y, 0.0)
    out["all_data_us"] = {"per_launch": float(w[0]), "per_node": float(w[1]), "c0": float(w[2])}
    return out


def main():
    out = {"what": __doc__.split("\n")[0], "machines": list(MACHINES)}
    node_rows, model_rows = [], []
    for mac in MACHINES:
        p = ROOT / f"benchmark/results/nvidia-h200/corpus/machine_{mac}"
        nd = first_session_nodes(p, ["node", "launches"])
        t = labels(p)
        t = t[t["idle_us"] / t["span_us"] >= IDLE_FRAC]
        recs, _ = available_records(str(ROOT / f"ort_analysis/ort_kernel_record/nvidia-h200/"
                                               f"corpus_records.machine_{mac}.json.xz"), sorted(t.index))
        lmap = nd.set_index(["model", "node"])["launches"]
        for m in t.index:
            if m not in recs:
                continue
            ks = [nmod.one_step(k) for k in nmod.with_context(recs[m]["kernels"])]
            ks = [k for k in ks if (m, k["node_name"]) in lmap.index]
            if not ks:
                continue
            node_rows += [(mac, m, k, float(lmap[(m, k["node_name"])])) for k in ks]
            model_rows.append({"machine": mac, "model": m, "family": family(m), "nodes": len(ks),
                               "y_us": float(t.loc[m, "clean_ms"]) * 1e3 / (float(t.loc[m, "host_index_us"]) / REF_HOST_US)})
    ks = [r[2] for r in node_rows]
    X, _ = nmod.features(ks, nmod.type_vocabulary([k["type"] for k in ks]))
    x = X.to_numpy(np.float32)
    for by, grp in (("family", family), ("architecture", arch)):
        out[f"folds_by_{by}"] = score(node_rows, model_rows, x, grp)
    (OUT / "predicted_launches.json").write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
