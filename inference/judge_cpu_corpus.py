"""Phase 7, CPU EP: a frozen CPU exam (benchmark/results/cpu-amd-epyc/corpus/split*.yaml) judged once, with the
node compute from per-class lines (inference/fit_cpu_timeline.py's model) and from node-model trees trained on the
same node times (inference/node_model.NodeModel, the GPU's per-node model, here on ORT's CPU node times), beside
the sum of the measured nodes (what a perfect node model would give with the same overhead terms).

  python inference/judge_cpu_corpus.py --set split=benchmark/results/cpu-amd-epyc/corpus/split_v2.yaml \
      [--set out=OUT]   # inference/cpu_corpus.yaml: the sessions, records and training architectures

latency = c0_us + Σ over nodes (node compute + per_node_us), c0 and per_node_us by fit_cpu_timeline's
overhead_terms on the training models. Sessions in the slow state of the VM's threads (probe_min_frac:
fit_cpu_timeline.drop_slow_state) are dropped before the labels. Writes <out>/cases.csv and <out>/summary.json.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from hase.inference import fit_cpu_timeline as F
from hase.inference import timeline_model as tm
from hase.inference.fit_measured_timeline import gpu_table
from hase.inference.node_model import NodeModel
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy

DEFAULTS = {"split": "benchmark/results/cpu-amd-epyc/corpus/split_v2.yaml", "timeline_dirs": [], "records": "",
            "train_archs": [], "threads": 2, "idle_busy_max": 0.1, "probe_min_frac": 0.0, "min_nodes": 3,
            "gpu_target": "roofline_ratio", "max_unmatched_share": 0.1, "out": "/tmp/hase_cpu_judge",
            # ORT's profiler adds a fixed cost to every node's time (a node that does nothing reads 3-4 us; the
            # profiled nodes of a model under 0.2 ms sum to 2.6x its wall): taken off every node time before the
            # node model learns it (floor 0.1 us), so the per-node term is the dispatch alone. 'auto': the 5%
            # quantile of the training models' node times; a number: that; None or 0: off (exams v1, v2)
            "profiler_node_us": None, "line_loss": "relative"}


def main() -> int:
    p = base_parser("Phase 7, CPU EP: a frozen CPU exam judged once (lines and node trees)", "inference",
                    "cpu_corpus.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    split = yaml.safe_load(Path(cfg["split"]).read_text())
    exam, held = set(split.get("exam") or []), set(split.get("exam_held_out") or [])
    train_archs = set(cfg["train_archs"])
    if train_archs & (exam | held):
        raise HaseError(f"train_archs holds exam architectures: {sorted(train_archs & (exam | held))[:3]}", "train_archs")
    sessions, nodes = F.read_tables(paths.expand_globs(cfg["timeline_dirs"]), int(cfg["threads"]),
                                    float(cfg["idle_busy_max"]))
    sessions, nodes = F.drop_slow_state(sessions, nodes, float(cfg["probe_min_frac"]), log)
    models = sorted(sessions["model"].unique())
    records = F.read_records(cfg["records"], models)
    per_node = F.node_medians(nodes)
    F.unmatched_share(records, per_node, Path(cfg["records"]), log, float(cfg["max_unmatched_share"]))
    lab = F.labels(sessions, (0.1, 0.9))
    lab["kernels"] = [len(records[m]["kernels"]) for m in lab.index]
    train = [m for m in models if paths.model_arch(m) in train_archs]
    delta = F.take_profiler_cost(per_node, lab, train, cfg["profiler_node_us"], log)
    judged = [m for m in models if paths.model_arch(m) in exam | held]
    if not train or not judged:
        raise HaseError(f"{len(train)} training and {len(judged)} exam models measured", "timeline_dirs")
    terms = F.overhead_terms(lab.loc[train])
    table = gpu_table(per_node, {m: records[m] for m in train}, int(cfg["min_nodes"]), key="cpu",
                      loss=cfg["line_loss"])
    ks, us = F.node_rows(records, per_node, train)
    trees = NodeModel(manifest={"format": "hase.node_model/1", "metadata": {"device": "cpu"}}).fit(
        ks, us, np.ones(len(us)), target=cfg["gpu_target"])
    log.info("%d training models (%d nodes), %d exam models; c0 %.1f us, %.2f us per node", len(train), len(ks),
             len(judged), terms["c0_us"], terms["per_node_us"])
    rows = []
    for m in judged:
        r = records[m]
        n = len(r["kernels"])
        over = terms["c0_us"] + terms["per_node_us"] * n
        lines_us = float(tm.gpu_table_us(r, table).sum())
        trees_us = float(trees.predict(r["kernels"])[0].sum())
        a = paths.model_arch(m)
        rows.append({"model": m, "arch": a, "family": a.rsplit("-s", 1)[0],
                     "split": "held-out family" if a in held else "fresh seed", "sessions": int(lab.loc[m, "sessions"]),
                     "e2e_ms": lab.loc[m, "e2e_ms"], "node_sum_us": lab.loc[m, "node_sum_us"],
                     "pred_lines_ms": (over + lines_us) / 1e3, "pred_trees_ms": (over + trees_us) / 1e3,
                     "measured_nodes_plus_overhead_ms": (over + lab.loc[m, "node_sum_us"]) / 1e3,
                     "pred_lines_node_sum_us": lines_us, "pred_trees_node_sum_us": trees_us})
    cases = pd.DataFrame(rows)

    def block(d):
        return {"models": int(len(d)), "architectures": int(d["arch"].nunique()),
                **{k: accuracy(d[c], d["e2e_ms"]) for k, c in (
                    ("lines", "pred_lines_ms"), ("trees", "pred_trees_ms"),
                    ("measured_nodes_plus_overhead", "measured_nodes_plus_overhead_ms"))},
                "batch1": {k: accuracy(d.loc[d["model"].str.contains("_bs1_"), c], d.loc[d["model"].str.contains("_bs1_"), "e2e_ms"])
                           for k, c in (("lines", "pred_lines_ms"), ("trees", "pred_trees_ms"))}}
    summary = {"split": cfg["split"], "threads": cfg["threads"], "train_models": len(train), "train_nodes": len(ks),
               "overhead_terms": terms, "probe_min_frac": cfg["probe_min_frac"], "profiler_node_us": delta,
               "sessions_used": int(len(sessions)), "overall": block(cases),
               "by_split": {s: block(d) for s, d in cases.groupby("split")}}
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "cases.csv", cases.to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    save_resolved(cfg, out)
    for k in ("lines", "trees", "measured_nodes_plus_overhead"):
        a = summary["overall"][k]
        log.info("exam (%d models) %-28s MAPE %.1f%%, within ±10%% %.0f%%, median %+.1f%%", len(cases), k,
                 a["mape_pct"], a["within_10pct"], a["median_signed_pct"])
    return 0


if __name__ == "__main__":
    run_main(main)
