"""Issue 23 item 5: the CPU EP prediction's p10-p90 band, from what carrying a CPU timeline to another machine missed.

  python inference/cpu_band.py [--config inference/cpu_band.yaml] [--set apply=true]

A CPU timeline's band was its training machine's session spread (the shipped EPYC corpus: 0.985-1.019x), measured
back to back in one machine state. Used on another machine (scaled by that machine's calibration) its error on
models it never saw is 12-15% MAPE (inference/results/cpu-amd-epyc/passes_vm/), and a single run on a 2-vCPU VM
moves ~12% between the VM's states (benchmark/results/cpu-amd-epyc/episodes/): a ±2% band covered 8-19% of them.

As fit_corpus_timeline does on the GPU (split-conformal quantiles of out-of-fold log residuals), the band holds the
model's own error: the quantiles of log(measured / calibrated prediction) over committed judge_cpu_transfer.py
judgements of this timeline on other machines (models outside its training, each machine's label the median over
its sessions). Checked before it is applied: leave one target machine out, the other machines' quantiles, coverage
on the left-out machine of its medians and of its single sessions (ideal: q_hi - q_lo of them).

Writes OUT/summary.json (pooled quantiles, per-machine leave-one-out coverage); with apply=true also the model's
spread.residual_log_q and spread.residual_source (a temp file, then renamed). timeline_model.with_spread then widens
the CPU band to it (never narrows it).
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.inference import timeline_model as tm
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.tables import read_csv_checked

DEFAULTS = {"model": "", "judgements": {}, "quantiles": [0.1, 0.9], "apply": False, "out": ""}


def residuals(folder: Path) -> pd.DataFrame:
    """One judgement's models: log(measured / calibrated prediction), and its sessions' single runs beside them."""
    c = read_csv_checked(folder / "cases.csv", ["model", "measured_ms", "calibrated_ms"], "judgement cases",
                         prefix="judgements: ")
    bad = ~(np.isfinite(c["measured_ms"]) & np.isfinite(c["calibrated_ms"]) & (c["measured_ms"] > 0)
            & (c["calibrated_ms"] > 0))
    if bad.any():
        raise HaseError(f"column measured_ms or calibrated_ms: not a positive number for model "
                        f"'{c.loc[bad, 'model'].iloc[0]}'", folder / "cases.csv")
    # the target's single sessions, where the judgement names them (resolved_config.json's target_dirs)
    rc = folder / "resolved_config.json"
    dirs = paths.expand_globs((paths.read_json(rc, "judgement config").get("config") or {}).get("target_dirs") or []) \
        if rc.exists() else []
    tables = [paths.csv_or_gz(Path(d) / "trace_sessions.csv.gz") for d in dirs]
    sessions = [read_csv_checked(t, ["model", "e2e_median_ms"], "trace_run sessions") for t in tables if t.exists()]
    single = np.array([])
    if sessions:
        s = pd.concat(sessions)[["model", "e2e_median_ms"]].merge(c[["model", "calibrated_ms"]], on="model")
        single = np.log(s["e2e_median_ms"] / s["calibrated_ms"]).to_numpy()
    return c.assign(log_r=np.log(c["measured_ms"] / c["calibrated_ms"])), single


def coverage(r: np.ndarray, q: list) -> float:
    return float(np.mean((r >= q[0]) & (r <= q[1]))) if len(r) else float("nan")


def main() -> int:
    p = base_parser("CPU EP band: quantiles of a CPU timeline's error on other machines", "inference", "cpu_band.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS, required=("model", "out"))
    log = get_logger("inference", args.log_level)
    if len(cfg["judgements"]) < 2:
        raise HaseError("at least two judgements are needed (one is left out to check the band)", "judgements")
    lo_q, hi_q = (float(x) for x in cfg["quantiles"])
    if not 0.0 < lo_q < hi_q < 1.0:
        raise HaseError(f"quantiles must be two numbers 0 < lo < hi < 1, not {cfg['quantiles']}", "quantiles")
    res = {}
    for name, folder in cfg["judgements"].items():
        f = Path(folder)
        if not (f / "cases.csv").exists():
            raise HaseError(f"judgement '{name}': no cases.csv (inference/judge_cpu_transfer.py writes it)", "judgements")
        res[name] = residuals(f)
    pooled = np.concatenate([c["log_r"].to_numpy() for c, _ in res.values()])
    band = [float(np.quantile(pooled, lo_q)), float(np.quantile(pooled, hi_q))]
    by = {}
    for name, (c, single) in res.items():   # leave this machine out: the others' quantiles, judged on it
        rest = np.concatenate([o["log_r"].to_numpy() for n, (o, _) in res.items() if n != name])
        qb = [float(np.quantile(rest, lo_q)), float(np.quantile(rest, hi_q))]
        by[name] = {"models": int(len(c)), "sessions": int(len(single)), "band_from_others": qb,
                    "median_covered": coverage(c["log_r"].to_numpy(), qb), "single_covered": coverage(single, qb),
                    "own_quantiles": [float(np.quantile(c["log_r"], lo_q)), float(np.quantile(c["log_r"], hi_q))]}
        log.info("%-14s band from the others x%.3f-x%.3f: medians covered %.0f%%, single sessions %.0f%% (%d models, "
                 "%d sessions)", name, np.exp(qb[0]), np.exp(qb[1]), 100 * by[name]["median_covered"],
                 100 * by[name]["single_covered"], len(c), len(single))
    model = paths.read_json(Path(cfg["model"]), "timeline model")
    old = (model.get("spread") or {}).get("session_us")
    summary = {"model": cfg["model"], "quantiles": [lo_q, hi_q], "residual_log_q": band,
               "band_x": [float(np.exp(band[0])), float(np.exp(band[1]))], "models": int(len(pooled)),
               "session_band_before": old, "leave_one_machine_out": by,
               "ideal_coverage": hi_q - lo_q, "applied": bool(cfg["apply"])}
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1))
    save_resolved(cfg, out)
    log.info("pooled over %d models on %d machines: x%.3f-x%.3f (the session band was %s)", len(pooled), len(res),
             *summary["band_x"], old)
    if cfg["apply"]:
        spread = dict(model.get("spread") or {}, residual_log_q=band,
                      residual_source=f"{paths.portable(out / 'summary.json')}: q{lo_q:g}/q{hi_q:g} of log(measured / "
                                      f"calibrated) over {len(pooled)} models on {len(res)} other machines")
        tm.save(dict(model, spread=spread), Path(cfg["model"]))
        log.info("wrote spread.residual_log_q into %s", cfg["model"])
    return 0


if __name__ == "__main__":
    run_main(main)
