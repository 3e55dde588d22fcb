"""Accuracy of predicted latencies, one set of names for every phase (nn-Meter's report: MAPE,
RMSPE and the share within ±5/10/15%). All values in percent."""
import numpy as np

BANDS_PCT = (5, 10, 15)


def error_pct(pred, actual) -> np.ndarray:
    """Signed error of each prediction in percent of the measured value."""
    return (np.asarray(pred, float) - np.asarray(actual, float)) / np.asarray(actual, float) * 100.0


def accuracy(pred, actual) -> dict:
    """{'n', 'mape_pct', 'rmspe_pct', 'median_signed_pct', 'within_5pct', 'within_10pct', 'within_15pct'} over
    the finite errors; {'n': 0} when there are none."""
    s = np.asarray(error_pct(pred, actual), float)
    s = s[np.isfinite(s)]
    e = np.abs(s)
    if not len(e):
        return {"n": 0}
    out = {"n": int(len(e)), "mape_pct": float(np.mean(e)), "rmspe_pct": float(np.sqrt(np.mean(e ** 2))),
           "median_signed_pct": float(np.median(s))}
    for band in BANDS_PCT:
        out[f"within_{band}pct"] = float(np.mean(e <= band) * 100)
    return out


def fmt(m: dict) -> str:
    """One line: n, MAPE, RMSPE and the bands."""
    if not m.get("n"):
        return "n=0"
    bands = " ".join(f"±{b}%={m[f'within_{b}pct']:.0f}%" for b in BANDS_PCT)
    return f"n={m['n']} MAPE={m['mape_pct']:.2f}% RMSPE={m['rmspe_pct']:.2f}% {bands}"
