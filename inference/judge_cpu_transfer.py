"""Issue 23 item 5, judged: a CPU timeline model used where it was not measured, with and without calibration.

  python inference/judge_cpu_transfer.py --set model=A/timeline_model.json --set target_dirs=[B/machine_*] \
      --set records=R --set out=OUT

The model was fitted on sessions of one CPU setting (machine, intra-op thread count); the target folders hold
trace_run sessions of another (benchmark/trace_run.py --device cpu, with calibration.json: the processes' CPU
calibration, benchmark/host_calibration.py). For every target model (the held-out architectures by default) the
Predictor API predicts session.run twice: as the model stands, and scaled by the target's calibration
(inference/machine_calibration.cpu_scales: host term by host_index_us, each node class's compute by its measured
throughput; the median profile over the target's processes). The label is the target's own median over sessions.
A compare report, not the main path: it says whether the scaling carries a CPU model to another CPU.
Writes OUT/cases.csv and OUT/summary.json.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.inference.fit_cpu_timeline import calibration_profiles, labels, read_records, read_tables
from hase.inference.fit_measured_timeline import ZOO
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy

DEFAULTS = {"model": "", "target_dirs": [], "target_threads": 0, "records": "", "train_archs": ZOO,
            "only_held_out": True, "idle_busy_max": 0.1, "out": ""}


def median_profile(profiles: list, threads: int) -> dict:
    """The target's calibration: the profile whose host index is the median over its processes at `threads`."""
    ok = sorted((p for p in profiles if p.get("device") == "cpu" and int(p.get("threads") or 0) == threads),
                key=lambda p: p["host_index_us"])
    if not ok:
        raise HaseError(f"no CPU calibration profile at {threads} threads beside the target sessions "
                        "(calibration.json)", "target_dirs")
    med = dict(ok[len(ok) // 2])
    comp = {k: float(np.median([p["compute"][k] for p in ok])) for k in ok[0].get("compute", {})}
    return dict(med, compute=comp, time_unix=None)   # a judgement of old sessions: their age is not the question


def main() -> int:
    p = base_parser("A CPU timeline model judged on another CPU setting, with and without calibration", "inference",
                    "cpu_transfer.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS, required=("model", "records", "out"))
    log = get_logger("inference", args.log_level)
    mpath = Path(cfg["model"])
    if not mpath.exists():
        raise HaseError("timeline model not found", mpath)
    model = paths.read_json(mpath, "timeline model")
    dirs = paths.expand_globs(cfg["target_dirs"])
    threads = int(cfg["target_threads"])
    sessions, _ = read_tables(dirs, threads, float(cfg["idle_busy_max"]))
    lab = labels(sessions, (0.1, 0.9))
    target_cal = median_profile(calibration_profiles(dirs), threads)
    models = [m for m in lab.index if not cfg["only_held_out"] or paths.model_arch(m) not in set(cfg["train_archs"])]
    records, skipped = {}, []
    for m in models:   # a model phase 2 could not analyse (ORT's 2 GB protobuf limit) is named and left out
        try:
            records.update(read_records(cfg["records"], [m]))
        except HaseError as e:
            skipped.append(m)
            log.warning("%s: left out (%s)", m, e)
    models = [m for m in models if m in records]
    from hase.api import load_predictor
    pred = load_predictor("cpu", timeline_model=mpath)
    rows = []
    for m in models:
        plain = pred.predict(records[m])
        cal = pred.predict(records[m], calibration=target_cal)
        rows.append({"model": m, "arch": paths.model_arch(m), "measured_ms": lab.loc[m, "e2e_ms"],
                     "measured_p10_ms": lab.loc[m, "e2e_p10_ms"], "measured_p90_ms": lab.loc[m, "e2e_p90_ms"],
                     "uncalibrated_ms": plain.total_ms, "calibrated_ms": cal.total_ms,
                     "calibrated_p10_ms": cal.p10_ms, "calibrated_p90_ms": cal.p90_ms,
                     "warnings": " | ".join(cal.warnings)})
    cases = pd.DataFrame(rows)
    if cases.empty:
        raise HaseError("no target model to judge", "target_dirs")
    scales = pred.predict(records[models[0]], calibration=target_cal).details.get("cpu_scales")

    def judged(col):
        d = cases[cases["model"].str.contains("_bs1_")]
        return {**accuracy(cases[col], cases["measured_ms"]),
                "batch1": accuracy(d[col], d["measured_ms"]) if len(d) else None}
    summary = {"model": str(mpath), "model_threads": model.get("threads"), "model_calibration_ref":
               model.get("calibration_ref"), "target_dirs": [str(d) for d in dirs], "target_threads": threads,
               "target_calibration": {"host_index_us": target_cal["host_index_us"], **target_cal["compute"]},
               "cpu_scales": scales, "models": int(len(cases)), "architectures": int(cases["arch"].nunique()),
               "left_out_without_record": skipped,
               "uncalibrated": judged("uncalibrated_ms"), "calibrated": judged("calibrated_ms"),
               "label_in_calibrated_p10_p90_pct": float(((cases["measured_ms"] >= cases["calibrated_p10_ms"]) &
                                                         (cases["measured_ms"] <= cases["calibrated_p90_ms"])).mean() * 100)}
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "cases.csv", cases.to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    save_resolved(cfg, out)
    log.info("%d models: uncalibrated MAPE %.1f%% (signed %+.1f%%), calibrated %.1f%% (signed %+.1f%%); scales %s",
             len(cases), summary["uncalibrated"]["mape_pct"], summary["uncalibrated"]["median_signed_pct"],
             summary["calibrated"]["mape_pct"], summary["calibrated"]["median_signed_pct"], scales)
    return 0


if __name__ == "__main__":
    run_main(main)
