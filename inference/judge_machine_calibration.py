"""Issue 23, judged on machines no fit has seen: does a machine's calibration predict its host speed?

  python inference/judge_machine_calibration.py --set "machine_dirs=[benchmark/results/nvidia-h200/corpus/machine_n]"

For each target machine (clean_sessions.csv from benchmark/clean_labels.py: its own host calibration beside every
session; or the idle stages of a neighbour folder, benchmark/run_gpu_slices.sh, whose clean columns are the same),
the training anchors it ran are predicted by the timeline model three ways: uncalibrated, and scaled by the
machine's median calibration with each elasticity in `elasticities` (the model's machine-level one, the
session-level one kept beside it, or numbers). Each machine's truth is the median of its own sessions. The models are
training models on purpose: the machine is what is unseen, so the error that moves is the machine's.
A compare report, not the main path. Writes OUT/summary.json and OUT/cases.csv.
"""
import json
from pathlib import Path

import numpy as np
import pandas as pd

from hase.graph_model.dag_critical_path import load_records
from hase.inference import machine_calibration as mc
from hase.inference import timeline_model as tm
from hase.inference.fit_measured_timeline import read_clean
from hase.inference.score_exam import rescaled
from hase.utils import paths
from hase.utils.config import base_parser, from_args, save_resolved
from hase.utils.errors import HaseError, run_main
from hase.utils.logger import get_logger
from hase.utils.metrics import accuracy

DEFAULTS = {"timeline_model": "inference/results/nvidia-h200/corpus/timeline_model.json",
            "machine_dirs": [], "records": "ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz",
            "elasticities": ["elasticity", "elasticity_sessions"], "out": ""}


def idle_of_neighbour_runs(dirs: list) -> pd.DataFrame:
    """The idle stages (idle, idle_end) of benchmark/run_gpu_slices.sh's folders without clean_sessions.csv, as clean
    sessions: their clean-process columns are clean_labels.py's, taken in the same child process."""
    from hase.inference.fit_measured_timeline import CLEAN_NEED
    from hase.utils.tables import read_machine_csv
    frames = []
    for d in dirs:
        if paths.csv_or_gz(Path(d) / "clean_sessions.csv").exists() or \
                not paths.csv_or_gz(Path(d) / "slices_sessions.csv").exists():
            continue
        s = read_machine_csv(d, "slices_sessions.csv", CLEAN_NEED + ["load"], "neighbour session")
        s = s[s["load"].isin(["idle", "idle_end"])].copy()
        s["session"] = s["session"].astype(str) + "-" + s["load"]   # idle_end's sessions are other processes
        frames.append(s[pd.to_numeric(s["e2e_clean_median_ms"], errors="coerce") > 0])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["machine", "model"])


def _elasticity(ref: dict, e) -> float:
    """A name in the model's calibration_ref ("elasticity", "elasticity_sessions") or a number written as a string."""
    try:
        return float(e)
    except ValueError:
        return float(ref.get(e, np.nan))


def main() -> int:
    p = base_parser("Issue 23: a machine's calibration against its host speed, on machines no fit has seen",
                    "inference", "judge_machine_calibration.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    if not cfg["machine_dirs"] or not cfg["out"]:
        raise HaseError("config machine_dirs and out are required")
    model = tm.load(Path(cfg["timeline_model"]))
    ref = model.get("calibration_ref") or {}
    if not ref.get("host_index_us"):
        raise HaseError("timeline model has no calibration_ref", cfg["timeline_model"])
    dirs = paths.expand_globs(cfg["machine_dirs"])
    clean = pd.concat([read_clean(dirs), idle_of_neighbour_runs(dirs)], ignore_index=True)
    if clean.empty:
        raise HaseError("no clean_sessions.csv (nor slices_sessions.csv with idle stages) in machine_dirs",
                        "machine_dirs")
    from hase.inference.predict_model_latency import prepare_record
    from hase.training.train_kernel_model import load_predictor
    pred = load_predictor(tm.predictor_of(model, ""))
    models = sorted(clean["model"].unique())
    records = load_records(cfg["records"], models)
    prep = {m: prepare_record(records[m], pred, model) for m in models}
    els = {str(e): _elasticity(ref, e) for e in cfg["elasticities"]}
    # the timeline model with each elasticity in its reference: scaled by the product's own host_scale
    with_el = {n: dict(model, calibration_ref=dict(ref, elasticity=e)) for n, e in els.items()}
    rows, summary = [], {"timeline_model": cfg["timeline_model"], "reference_us": ref["host_index_us"],
                         "elasticities": els, "by_machine": {}}
    for mach, s in clean.groupby("machine"):
        cal = float(np.nanmedian(s["clean_calib_host_index_us"]))
        truth = s.groupby("model")["e2e_clean_median_ms"].median()
        noise = accuracy(s["e2e_clean_median_ms"], truth.loc[s["model"]].to_numpy())["mape_pct"]
        t = pd.DataFrame({"machine": mach, "model": truth.index, "e2e_ms": truth.to_numpy()})
        t["uncalibrated_ms"] = [rescaled(prep[m], model, ref["host_index_us"]) for m in t["model"]]   # scale 1
        row = {"sessions": int(len(s)), "models": int(len(t)), "calibration_us": cal, "session_noise_pct": noise,
               "uncalibrated": accuracy(t["uncalibrated_ms"], t["e2e_ms"])}
        for name, e in els.items():
            scale = mc.host_scale(with_el[name], cal)[0]
            t[f"cal_{name}_ms"] = [rescaled(prep[m], with_el[name], cal) for m in t["model"]]
            row[name] = dict(accuracy(t[f"cal_{name}_ms"], t["e2e_ms"]), elasticity=e, host_scale=scale)
        summary["by_machine"][str(mach)] = row
        rows.append(t)
        log.info("%s: calibration %.2f us (ref %.2f), noise %.1f%%; MAPE uncalibrated %.1f%% (%+.1f%%), %s", mach, cal,
                 ref["host_index_us"], noise, row["uncalibrated"]["mape_pct"], row["uncalibrated"]["median_signed_pct"],
                 ", ".join(f"{n} {e:.2f}: {row[n]['mape_pct']:.1f}% ({row[n]['median_signed_pct']:+.1f}%)"
                           for n, e in els.items()))
    out = Path(cfg["out"])
    out.mkdir(parents=True, exist_ok=True)
    paths.atomic_write_text(out / "cases.csv", pd.concat(rows).to_csv(index=False, float_format="%.5g"))
    paths.atomic_write_text(out / "summary.json", json.dumps(summary, indent=1, default=float) + "\n")
    save_resolved(cfg, out)
    return 0


if __name__ == "__main__":
    run_main(main)
