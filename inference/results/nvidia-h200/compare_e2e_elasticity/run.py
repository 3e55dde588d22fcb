"""Compare (issue 23, session 40), not the main path: how much a prediction moves with a machine's host calibration,
against how much the truth moves between machines.

1. The timeline's own response: d log(prediction) / d log(host scale) of each panel model (kappa and c0 scaled, as
   machine_calibration.calibrated_params does), at idle.
2. The truth's: between the training machines (every H200 corpus machine but the panel's four), the slope of each
   machine's effect on log(clean e2e) (model + machine, alternating means over the models >= 3 machines ran) on
   log(its median calibration), per batch bin.
3. The panel machines' predictions scaled by (machine calibration / reference) ^ slope of the model's batch bin,
   instead of the shipped scaling. Read after the panel's residuals: post hoc, judged by no one.

  python inference/results/nvidia-h200/compare_e2e_elasticity/run.py
"""
import glob
import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from hase.inference import machine_calibration as mc
from hase.inference import timeline_model as tm
from hase.inference.score_exam import available_records, predictions
from hase.model_zoo.corpus import load_split
from hase.utils import paths

warnings.filterwarnings("ignore", category=FutureWarning)
HERE = Path(__file__).resolve().parent
REPO = paths.REPO
PANEL = ["ah", "ai", "aj", "ak"]
BINS = {"1": (1, 1), "2-4": (2, 4), "8-16": (8, 16), "32+": (32, 10 ** 9)}
FIT_COMMIT = "49e175a"   # the fit exam v22 and its panel judged (installed until f632419 joined exam v22)
FIT_DIR = "inference/results/nvidia-h200/corpus"


def fit_of(commit: str) -> str:
    """That commit's H200 corpus fit, unpacked to a temporary folder (timeline_model.at_commit)."""
    return tm.at_commit(commit, f"{FIT_DIR}/timeline_model.json")


def binof(b: int) -> str:
    return next(k for k, (lo, hi) in BINS.items() if lo <= b <= hi)


def machine_effects(sub: pd.DataFrame, min_machines: int = 3, min_models: int = 3) -> pd.Series:
    """Each machine's effect on log(clean e2e) over the models min_machines ran (machine_calibration's fit), for the
    machines that ran min_models of them."""
    cell = np.log(sub.groupby(["model", "machine"])["e2e_clean_median_ms"].median()).unstack(1)
    cell = cell[cell.notna().sum(axis=1) >= min_machines]
    return mc.machine_effects(cell)[cell.notna().sum(axis=0) >= min_models]


def main() -> None:
    frames = []
    for d in sorted(glob.glob(str(REPO / "benchmark/results/nvidia-h200/corpus/machine_*"))):
        f = Path(d) / "clean_sessions.csv.xz"
        if f.exists():
            frames.append(pd.read_csv(f).assign(machine=Path(d).name.removeprefix("machine_")))
    s = pd.concat(frames)
    s = s[s["clean_calib_host_index_us"] > 0]
    s["batch"] = s["model"].str.extract(r"_bs(\d+)_")[0].astype(int)
    idx = np.log(s.groupby("machine")["clean_calib_host_index_us"].median())
    train = s[~s["machine"].isin(PANEL)]
    slopes = {}
    for k, (lo, hi) in BINS.items():
        e = machine_effects(train[(train["batch"] >= lo) & (train["batch"] <= hi)])
        x = idx.loc[e.index]
        slopes[k] = {"slope": float(np.polyfit(x - x.mean(), e - e.mean(), 1)[0]),
                     "corr": float(np.corrcoef(x, e)[0, 1]), "machines": int(len(e))}

    cases = pd.read_csv(HERE.parent / "machines_v22" / "cases.csv").set_index("model")
    TL = fit_of(FIT_COMMIT)
    model = tm.load(Path(TL))
    ref = model["calibration_ref"]["host_index_us"]
    split = load_split(REPO / "model_zoo/corpus_split_v22.yaml")
    records, _ = available_records("ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz", list(cases.index))
    preds = predictions(TL, "", records, list(cases.index), split)
    load = tm.load_terms(model["idle_load"], model.get("idle_clock_mhz", 0.0))

    def central(prep, scale):
        return tm.with_spread(prep, mc.calibrated_params(model["params"], scale), load, None, True)["central"]

    def response(prep):   # d log(prediction) / d log(host scale)
        return float(np.log(central(prep, 1.1) / central(prep, 1.0)) / np.log(1.1))
    cases["response"] = [response(preds[m][-1]) for m in cases.index]

    out = {"what": __doc__.splitlines()[0], "timeline_model": f"{FIT_COMMIT}:{FIT_DIR}/timeline_model.json", "between_training_machines": slopes,
           "timeline_response_median_by_batch": {k: float(cases[cases["batch"].map(binof) == k]["response"].median())
                                                 for k in BINS}, "by_machine": {}}
    rows = []
    for mach in PANEL:
        sm = s[(s["machine"] == mach) & s["model"].isin(cases.index)]
        lab = sm.groupby("model")["e2e_clean_median_ms"].median()
        c = cases.loc[lab.index]
        r = float(np.exp(idx[mach])) / ref
        shipped = [central(preds[m][-1], mc.host_scale(model, float(np.exp(idx[mach])))[0]) / 1e3 for m in c.index]
        bybatch = c["pred_ms"] * np.exp(np.array([slopes[binof(b)]["slope"] for b in c["batch"]]) * np.log(r))
        row = {}
        for name, p in (("uncalibrated", c["pred_ms"]), ("shipped", pd.Series(shipped, index=c.index)),
                        ("between_machine_slopes", bybatch)):
            e = (p / lab - 1) * 100
            row[name] = {"mape_pct": float(e.abs().mean()), "within_10pct": float((e.abs() <= 10).mean() * 100),
                         "batch1_median_signed_pct": float(e[c["batch"] == 1].median()),
                         "median_signed_pct": float(e.median())}
            rows.append(pd.DataFrame({"machine": mach, "variant": name, "model": c.index, "e2e_ms": lab.values,
                                      "pred_ms": p.values}))
        out["by_machine"][mach] = dict(row, host_index_us=float(np.exp(idx[mach])), ratio_to_ref=r)
        print(mach, {k: f"{v['mape_pct']:.1f}% (b1 {v['batch1_median_signed_pct']:+.1f}%)" for k, v in row.items()})
    print("between training machines:", {k: f"{v['slope']:.2f} (r {v['corr']:.2f}, {v['machines']})" for k, v in slopes.items()})
    print("timeline response:", {k: round(v, 2) for k, v in out["timeline_response_median_by_batch"].items()})
    # 4. the same models on both sides: the anchors every machine ran, each one's own slope between the training
    # machines against its predicted response (x the reference elasticity, as a prediction scales)
    cell = np.log(train.groupby(["model", "machine"])["e2e_clean_median_ms"].median()).unstack(1)
    cell = cell[cell.notna().sum(axis=1) >= 10]
    arecs, _ = available_records("ort_analysis/ort_kernel_record/nvidia-h200/corpus_records.json.xz", list(cell.index))
    anchors = [m for m in cell.index if m in arecs]
    apreds = predictions(TL, "", arecs, anchors, split)
    el = float(model["calibration_ref"].get("elasticity", 1.0))
    per = {}
    for m in anchors:
        v = cell.loc[m].dropna()
        x = idx.loc[v.index]
        per[m] = {"machines": int(len(v)), "truth_slope": float(np.polyfit(x - x.mean(), v - v.mean(), 1)[0]),
                  "predicted_response": response(apreds[m][-1]) * el, "e2e_ms": float(np.exp(v.median()))}
    out["anchors_same_models"] = per
    for m, r in sorted(per.items(), key=lambda kv: kv[1]["e2e_ms"]):
        print(f"{m:32s} {r['e2e_ms']:7.2f} ms  truth {r['truth_slope']:.2f}  predicted {r['predicted_response']:.2f}")
    (HERE / "summary.json").write_text(json.dumps(out, indent=1))
    pd.concat(rows).to_csv(HERE / "cases.csv", index=False, float_format="%.5g")


if __name__ == "__main__":
    main()
