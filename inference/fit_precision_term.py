"""Phase 7: fit the float16 GPU-time term (inference/precision.py) on float16 twins and judge it leave-one-arch-out.

  python inference/fit_precision_term.py [--set trace_dirs=[...]] [--set out=inference/results/nvidia-h100/precision]

Data: corpus traces (benchmark/run_gpu_corpus.sh FP16_TWINS=...) holding both <arch>_bs... and <arch>-fp16_bs...;
CUPTI GPU time per node, median over sessions. A float16 node is paired with the float32 node of the same name in
its float32 twin (nodes only one graph has, e.g. the Casts and the unfused attention scale of vit_b_16 in float16,
are left out of the fit: the record prices them as they are).
Fit: per class, (floor_us, ratio) minimising the float32-time-weighted |log(predicted / measured)| of the twins'
nodes, within physical bounds (floor 0-20 us, ratio 0.3-1.0). Judged: leave one architecture out, each twin's
float16 GPU sum predicted from its float32 nodes' measured times, against its measured float16 sum; the baseline
beside it is "float16 costs what float32 costs". Writes float16_term.json, cases.csv, resolved_config.json.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from hase.inference.precision import node_class
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.paths import atomic_write_text

DEFAULTS = {"trace_dirs": ["benchmark/results/nvidia-h100/corpus/machine_l_twins"],
            "out": "inference/results/nvidia-h100/precision",
            "floor_bounds_us": [0.0, 20.0], "ratio_bounds": [0.3, 1.0]}


def pairs(trace_dirs: list) -> pd.DataFrame:
    """One row per (float32 model, node): gpu_us32, gpu_us16 (medians over sessions), op, arch, class."""
    frames = []
    for d in trace_dirs:
        f = Path(d) / "trace_nodes.csv.xz"
        if not f.exists():
            raise HaseError("trace_nodes.csv.xz missing", d)
        frames.append(pd.read_csv(f, usecols=["model", "session", "node", "op", "gpu_us"]))
    n = pd.concat(frames).groupby(["model", "node", "op"], as_index=False).gpu_us.median()
    tw = n.model.str.contains("-fp16_bs")
    n["base"] = n.model.str.replace("-fp16_bs", "_bs", regex=False)
    j = n[~tw].merge(n[tw], on=["base", "node"], suffixes=("32", "16"))
    if j.empty:
        raise HaseError("no float16 twin shares a node name with its float32 model", ", ".join(map(str, trace_dirs)))
    j = j[(j.gpu_us32 > 0) & (j.gpu_us16 > 0)].copy()
    j["arch"] = j.base.str.split("_bs").str[0]
    j["cls"] = j.op32.map(node_class)
    return j


def predict(t, floor_us, ratio):
    t = np.asarray(t, float)
    return np.where(t > floor_us, floor_us + (t - floor_us) * ratio, t)


def fit(j: pd.DataFrame, cfg: dict) -> dict:
    out = {}
    for c, g in j.groupby("cls"):
        t32, t16 = g.gpu_us32.to_numpy(), g.gpu_us16.to_numpy()
        res = minimize(lambda p: float(np.sum(t32 * np.abs(np.log(predict(t32, *p) / t16)))), [2.0, 0.6],
                       method="L-BFGS-B", bounds=[tuple(cfg["floor_bounds_us"]), tuple(cfg["ratio_bounds"])])
        out[c] = {"floor_us": round(float(res.x[0]), 3), "ratio": round(float(res.x[1]), 4), "nodes": int(len(g)),
                  "ops": sorted(g.op32.unique())}
    for c in ("conv", "gemm", "mem"):
        out.setdefault(c, {"floor_us": 0.0, "ratio": 1.0, "nodes": 0, "ops": []})   # unmeasured: left as priced
    return out


def main() -> int:
    cfg = from_args(base_parser(__doc__.splitlines()[0], "inference", "precision.yaml").parse_args(), DEFAULTS)
    log = get_logger("inference")
    j = pairs(cfg["trace_dirs"])
    term = fit(j, cfg)
    rows = []
    for a in sorted(j.arch.unique()):
        held = fit(j[j.arch != a], cfg)
        for m, g in j[j.arch == a].groupby("base"):
            p = sum(predict(gg.gpu_us32, held[c]["floor_us"], held[c]["ratio"]).sum() for c, gg in g.groupby("cls"))
            rows.append({"model": m, "arch": a, "nodes": len(g), "gpu32_us": g.gpu_us32.sum(),
                         "gpu16_us": g.gpu_us16.sum(), "pred16_us": p})
    cases = pd.DataFrame(rows)
    cases["err_pct"] = (cases.pred16_us / cases.gpu16_us - 1) * 100
    cases["err_as_float32_pct"] = (cases.gpu32_us / cases.gpu16_us - 1) * 100
    judged = {"what": "leave one architecture out: each twin's float16 GPU sum (its paired nodes) from its float32 "
                      "nodes' measured times and the term fitted without its architecture",
              "models": int(len(cases)), "architectures": int(cases.arch.nunique()),
              "mape_pct": float(cases.err_pct.abs().mean()), "median_signed_pct": float(cases.err_pct.median()),
              "max_abs_pct": float(cases.err_pct.abs().max()),
              "baseline_as_float32_mape_pct": float(cases.err_as_float32_pct.abs().mean())}
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    doc = {"format": "hase.precision_term/1", "dtype": "float16",
           "law": "gpu_us = floor_us + (gpu_us_float32_view - floor_us) * ratio, where gpu_us_float32_view > floor_us",
           "classes": term, "fitted_on": {"trace_dirs": [str(d) for d in cfg["trace_dirs"]],
                                          "nodes": int(len(j)), "models": int(j.base.nunique()),
                                          "architectures": sorted(j.arch.unique())},
           "leave_one_arch_out": judged}
    atomic_write_text(out / "float16_term.json", json.dumps(doc, indent=1) + "\n")
    atomic_write_text(out / "cases.csv", cases.round(3).to_csv(index=False))
    save_resolved(cfg, out)
    for c, v in term.items():
        log.info(f"{c}: floor {v['floor_us']:.2f} us, ratio {v['ratio']:.3f} ({v['nodes']} nodes)")
    log.info(f"leave one arch out: MAPE {judged['mape_pct']:.1f}% (median {judged['median_signed_pct']:+.1f}%, max "
             f"{judged['max_abs_pct']:.1f}%) on {judged['models']} twins; as float32: "
             f"{judged['baseline_as_float32_mape_pct']:.1f}%")
    return 0


if __name__ == "__main__":
    run_main(main)
