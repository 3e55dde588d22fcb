"""Issue 23 item 5, a compare report: a CPU EP timeline on a model family AND a CPU it never saw.

  python inference/judge_cpu_lofo.py [--config inference/cpu_lofo.yaml] [--set pairs=[[epyc_vm, xeon_b]]]

judge_cpu_transfer.py asks whether calibration carries a timeline between CPUs on the models it was fitted on.
A user brings a model of another family too. Here, per (source CPU, target CPU) pair and per generator family
of the measured set (leave one family out): every term is fitted on the source CPU's sessions of the other
families, then the family's models are predicted on the target, scaled by the target's calibration
(machine_calibration.cpu_scales, as shipped), against the target's median over sessions. A pair with source ==
target is the same CPU, unscaled: the node model's own error on an unseen family.

Node compute, each judged:
  lines  per-class lines a_us + us_per_gflop*GFLOP + us_per_mb*MB (fit_cpu_timeline's, the shipped CPU timeline),
         scaled per class and node size (calibrated_cpu_model)
  trees  the node trees (inference/node_model.NodeModel, roofline-ratio target, on the node times less ORT's
         profiler cost per node) for the source CPU's node time, carried to the target by that node's own line:
         x (scaled line / unscaled line), so the trees say what the shape costs and the calibration how much
         faster each of its terms (host, FLOPs, bytes) runs on the target
The per-node term and c0 scale by the host index in both. Writes OUT/cases.csv, OUT/summary.json.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.inference import fit_cpu_timeline as F
from hase.inference import machine_calibration as mc
from hase.inference import timeline_model as tm
from hase.inference.fit_measured_timeline import gpu_table
from hase.inference.judge_cpu_transfer import median_profile
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy

DEFAULTS = {"cpus": {}, "pairs": [], "threads": 2, "node_sources": ["lines", "trees"], "min_nodes": 3,
            "idle_busy_max": 0.1, "leave_out": "family", "out": ""}
LEAVE_OUT = ("family", "none")   # family: every seed of the judged model's family; none: train on all the source has


def family(model: str) -> str:
    """A generator family without its seed (cnn_mobile-s9000_bs1_224x224 -> cnn_mobile); torchvision: its arch."""
    a = paths.model_arch(model)
    head, _, seed = a.rpartition("-s")
    return head if head and seed.isdigit() else a


NODE_SOURCES = ("lines", "trees")


def read_cpu(name: str, spec: dict, threads: int, busy_max: float) -> dict:
    """One CPU's measured set: node medians, labels, records, calibration reference (median over its processes)."""
    if not isinstance(spec, dict) or not spec.get("dirs") or not spec.get("records"):
        raise HaseError(f"config cpus.{name}: needs dirs (trace_run machine folders) and records")
    dirs = paths.expand_globs(spec["dirs"])
    s, n = F.read_tables(dirs, threads, busy_max)
    # sessions whose compute probe read the VM's two threads on one core (corpus README), dropped
    s, n = F.drop_slow_state(s, n, float(spec.get("probe_min_frac") or 0.0), get_logger("inference"))
    models = sorted(s["model"].unique())
    recs = F.read_records(spec["records"], models)
    lab = F.labels(s, (0.1, 0.9))
    profiles = F.calibration_profiles(dirs)
    ref = mc.cpu_reference(profiles, threads)
    if not ref:
        raise HaseError(f"config cpus.{name}: no calibration profile at {threads} threads beside the sessions")
    return {"per_node": F.node_medians(n), "lab": lab, "records": recs, "models": models, "ref": ref,
            "target": median_profile(profiles, threads)}


def fit_source(cpu: dict, train: list, threads: int, min_nodes: int, sources: list) -> dict:
    """The terms of a CPU timeline fitted on `train` (model names) of one CPU: lines, and the trees when asked."""
    per_node, lab = cpu["per_node"].copy(), cpu["lab"].copy()
    recs = {m: cpu["records"][m] for m in train}
    out = {}
    if "lines" in sources:   # as shipped: no profiler cost taken off (fit_cpu_timeline's default)
        terms = F.overhead_terms(lab.loc[train])
        out["lines"] = {"terms": terms, "table": gpu_table(per_node, recs, min_nodes, key="cpu")}
    if "trees" in sources:   # the trees need the profiler cost off (their per-node term must be >= 0)
        F.take_profiler_cost(per_node, lab, train, "auto", get_logger("inference"))
        terms = F.overhead_terms(lab.loc[train])
        from hase.inference.node_model import NodeModel
        ks, us = F.node_rows(recs, per_node, train)
        trees = NodeModel(manifest={"format": "hase.node_model/1", "metadata": {"device": "cpu"}}).fit(
            ks, us, np.full(len(us), max(terms["per_node_us"], 0.0)), target="roofline_ratio")
        out["trees"] = {"terms": terms, "table": gpu_table(per_node, recs, min_nodes, key="cpu"), "trees": trees}
    for v in out.values():
        v["model"] = {"gpu_table": v["table"], "scale_lines": v["table"], "threads": threads, "calibration_ref": None,
                      "host_table": {"default_us": v["terms"]["per_node_us"]},
                      "params": dict(tm.DEFAULT_PARAMS, c0_us=v["terms"]["c0_us"])}
    return out


def predict_us(fit: dict, source: str, record: dict, scales: dict) -> float:
    """session.run (us) of one record at the target's speed: c0 + Σ (node compute + per-node term)."""
    cal = mc.calibrated_cpu_model(fit["model"], scales)
    n = len(record["kernels"])
    if source == "lines":
        dev = tm.gpu_table_us(record, cal["gpu_table"])
    else:   # the trees' time at the source's speed x the node's own line ratio, as the Predictor scales them
        dev = fit["trees"].predict(record["kernels"])[0] * mc.cpu_node_ratios(fit["model"], scales, record)
    return float(cal["params"]["c0_us"] + np.sum(dev) + n * cal["host_table"]["default_us"])


def main() -> int:
    p = base_parser("A CPU timeline on a model family and a CPU it never saw (leave one family out)", "inference",
                    "cpu_lofo.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS, required=("out",))
    log = get_logger("inference", args.log_level)
    bad = [s for s in cfg["node_sources"] if s not in NODE_SOURCES]
    if bad:
        raise HaseError(f"config node_sources: '{bad[0]}' is not one of {', '.join(NODE_SOURCES)}")
    if cfg["leave_out"] not in LEAVE_OUT:
        raise HaseError(f"config leave_out: '{cfg['leave_out']}' is not one of {', '.join(LEAVE_OUT)}")
    threads = int(cfg["threads"])
    names = sorted({c for pair in cfg["pairs"] for c in pair})
    for pair in cfg["pairs"]:
        if len(pair) != 2 or any(c not in cfg["cpus"] for c in pair):
            raise HaseError(f"config pairs: {pair} is not [source, target] of cpus ({', '.join(cfg['cpus'])})")
    cpus = {c: read_cpu(c, cfg["cpus"][c], threads, float(cfg["idle_busy_max"])) for c in names}
    rows = []
    for src, tgt in cfg["pairs"]:
        S, T = cpus[src], cpus[tgt]
        judged = sorted(T["models"]) if cfg["leave_out"] == "family" else sorted(set(T["models"]) - set(S["models"]))
        if not judged:
            raise HaseError(f"config pairs: [{src}, {tgt}] has no model to judge (leave_out none judges the target's "
                            f"models the source did not measure)")
        groups = sorted({family(m) for m in judged}) if cfg["leave_out"] == "family" else [None]
        for fam in groups:
            train = [m for m in S["models"] if fam is None or family(m) != fam]
            fits = fit_source(S, train, threads, int(cfg["min_nodes"]), cfg["node_sources"])
            for s, fit in fits.items():
                fit["model"]["calibration_ref"] = S["ref"]
                scales, _ = mc.cpu_scales(fit["model"], T["target"])
                for m in (x for x in judged if fam is None or family(x) == fam):
                    rows.append({"source": src, "target": tgt, "node_source": s, "family": family(m), "model": m,
                                 "measured_ms": float(T["lab"].loc[m, "e2e_ms"]),
                                 "predicted_ms": predict_us(fit, s, T["records"][m], scales) / 1e3})
        log.info("%s -> %s: %d models judged (%s left out)", src, tgt, len(judged),
                 "their family" if groups[0] else "none: not in the source")
    cases = pd.DataFrame(rows)
    summary = {}
    for (src, tgt, s), d in cases.groupby(["source", "target", "node_source"]):
        a = accuracy(d["predicted_ms"].to_numpy(), d["measured_ms"].to_numpy())
        summary[f"{src}->{tgt} {s}"] = a
        log.info("%-24s %-5s MAPE %5.1f%%  within ±10%% %5.1f%%  median %+5.1f%%  (n %d)", f"{src}->{tgt}", s,
                 a["mape_pct"], a["within_10pct"], a["median_signed_pct"], a["n"])
    o = Path(cfg["out"])
    o.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(o / "cases.csv", cases.to_csv(index=False))
    paths.atomic_write_text(o / "summary.json", json.dumps(summary, indent=1))
    save_resolved(cfg, o)
    log.info("wrote %s", o)
    return 0


if __name__ == "__main__":
    run_main(main)
