"""Machine calibration (issue 23): the one place where the target node's host speed enters a prediction.

Host dispatch moves between machines of one kind (the GPU side does not), so the timeline's host-side terms
are scaled by the target's speed relative to the processes its terms were learned in:

  host_scale = (target host_index_us / reference host_index_us) ** elasticity

  reference  the median `calib_host_index_us` of the calibrated training sessions (benchmark/trace_run.py runs
             benchmark/host_calibration.py in its own process before every session); stored in the timeline
             model at fit time as `calibration_ref`
  target     a profile JSON (benchmark/host_calibration.py --set out=...), the node agent's gauges in Prometheus
             (hase_calib_host_index_us and its timestamp: from_prometheus), or a number

The elasticity is learned on the training sessions: the slope of each session's log(Σhost / its model's median)
on its log(calibration / reference). A model's dispatch moves less than the probe's pure launch chains (H200
training sessions: 0.61, correlation 0.57); 1 where it cannot be fitted.

Scaled: per-node host dispatch (the timeline's `kappa`) and session.run's fixed cost (`c0_us`). GPU time and
copies are not. A missing or stale calibration, or a model without a reference, gives the uncalibrated
prediction and a warning naming the field. The measured effect, per machine, is in
inference/results/nvidia-h200/machines/ (inference/score_exam.py's by-machine section).
"""
import math
import time

import numpy as np

SCALE_RANGE = (0.5, 2.0)     # hosts of one GPU kind: within 2x of each other (a wider ratio is a broken reading)
MAX_AGE_S = 7 * 24 * 3600.0  # a profile older than this is not trusted: the host's load or software changed


def reference(sessions) -> dict:
    """The training processes' host speed, from trace_run's calib_* columns; {} when none were calibrated."""
    if "calib_host_index_us" not in sessions:
        return {}
    v = sessions["calib_host_index_us"].dropna()
    v = v[v > 0]
    if v.empty:
        return {}
    ref = float(v.median())
    out = {"host_index_us": ref, "p10_us": float(v.quantile(0.1)), "p90_us": float(v.quantile(0.9)),
           "sessions": int(len(v)), "machines": int(sessions.loc[v.index, "machine"].nunique())
           if "machine" in sessions else 0, "elasticity": 1.0}
    if {"model", "host_sum_us"} <= set(sessions.columns) and len(v) >= 20:
        rh = np.log(sessions["host_sum_us"] / sessions.groupby("model")["host_sum_us"].transform("median"))
        x, y = np.log(v / ref), rh.loc[v.index]
        ok = np.isfinite(y)
        if ok.sum() >= 20 and np.var(x[ok]) > 0:
            slope = float(np.polyfit(x[ok], y[ok], 1)[0])
            out.update(elasticity=float(np.clip(slope, 0.0, 1.0)), elasticity_corr=float(np.corrcoef(x[ok], y[ok])[0, 1]))
    return out


def host_scale(model: dict, target, now: float = None, max_age_s: float = MAX_AGE_S) -> tuple:
    """(scale, warning or None). target: a Calibration (benchmark/host_calibration), a dict profile, a number of
    us per node, or None."""
    ref = (model.get("calibration_ref") or {}).get("host_index_us")
    if target is None:
        return 1.0, None
    if not ref:
        return 1.0, "timeline model has no 'calibration_ref' (fitted on uncalibrated sessions): host not scaled"
    when = None
    if isinstance(target, (int, float)):
        us = float(target)
    else:
        d = target if isinstance(target, dict) else target.to_dict()
        us, when = d.get("host_index_us"), d.get("time_unix")
    if not isinstance(us, (int, float)) or not math.isfinite(us) or us <= 0:
        return 1.0, f"calibration field 'host_index_us' is {us!r}, not a positive number: host not scaled"
    if when is not None:
        age = (now if now is not None else time.time()) - float(when)
        if age > max_age_s:
            return 1.0, (f"calibration field 'time_unix' is {age / 3600:.0f} h old (> {max_age_s / 3600:.0f} h): "
                         f"host not scaled")
    s = us / float(ref)
    if not SCALE_RANGE[0] <= s <= SCALE_RANGE[1]:
        return 1.0, (f"calibration field 'host_index_us' {us:.2f} us is {s:.2f}x the reference {ref:.2f} us, outside "
                     f"{SCALE_RANGE}: host not scaled")
    return float(s ** float(model["calibration_ref"].get("elasticity", 1.0))), None


def calibrated_params(params: dict, scale: float) -> dict:
    """The timeline parameters with the host-side terms scaled."""
    p = dict(params)
    p["kappa"] = float(p.get("kappa", 1.0)) * scale
    p["c0_us"] = float(p.get("c0_us", 0.0)) * scale
    return p


def machine_host_index_us(sessions) -> float:
    """A machine's host speed from its calibrated sessions: the median (a single reading is noisy)."""
    v = sessions.get("calib_host_index_us")
    return float(np.nanmedian(v)) if v is not None and np.isfinite(v).any() else math.nan


def from_prometheus(pcfg: dict):
    """The node agent's calibration as a profile-like dict {host_index_us, time_unix}; None when not exported."""
    from inference.load_sources import load_from_prometheus
    got = load_from_prometheus(pcfg, [], optional=("HASE_CALIB_HOST_INDEX_US", "HASE_CALIB_AGE_S"))
    if "HASE_CALIB_HOST_INDEX_US" not in got:
        return None
    age = got.get("HASE_CALIB_AGE_S")
    return {"host_index_us": got["HASE_CALIB_HOST_INDEX_US"],
            "time_unix": time.time() - age if age is not None else None}
