"""The host setting a user runs ORT under, as a session option (issue 23 item 4): `cpu_pinned`, the process bound to
one CPU (`taskset -c N`, or os.sched_setaffinity(0, {N}) before the session is made).

What it changes was measured by benchmark/host_speed_study.py (GPU job `host_speed`): fresh processes, round-robin
over settings, batch-1 models whose latency is host dispatch. Per GPU, benchmark/results/<gpu>/host_speed/
summary.json `by_setting`:
  default   no binding
  one_cpu   bound to one CPU (any of 5 CPUs; ORT's intra-op pool at 1 thread changed nothing beyond it)
Two numbers of each carry over to a prediction:
  latency_vs_fastest   the median process's latency over the fastest process's: one_cpu / default scales the host
                       terms (dispatch, the time before the first kernel), as those are what a batch-1 run is
  latency_spread_pct   the median pairwise spread between processes: one_cpu / default scales the measured
                       per-session quantiles of the host terms toward 1 (the model's own error band stays)
H200 (5 machines, 90 processes, session 40): host x0.969, spread x0.55 (19.9% -> 10.9%; 3 machines, 66
processes, read x0.37 before aj and ak joined). H100 (1 machine, 20 processes): x1.069,
x0.93: binding did not help there, and a prediction says so.
"""
import json
import math
from pathlib import Path

from hase.utils import paths
from hase.utils.errors import HaseError


def study_path(gpu_slug: str) -> Path:
    return paths.REPO / "benchmark" / "results" / gpu_slug / "host_speed" / "summary.json"


def pinned_factors(gpu_slug: str):
    """{host_scale, spread_scale, processes, source} for a process bound to one CPU on this GPU's machines; None
    when no host-speed study was measured for it. A study that is there but unreadable (not JSON, a setting not an
    object, a number missing, not finite or not positive) is one line naming the field."""
    path = study_path(gpu_slug) if gpu_slug else None
    if path is None or not path.exists():
        return None
    try:
        study = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise HaseError(f"not a host-speed study (JSON): {e}", path)
    s = (study.get("by_setting") if isinstance(study, dict) else None) or {}
    d, o = (s.get("default"), s.get("one_cpu")) if isinstance(s, dict) else (None, None)
    if not isinstance(d, dict) or not isinstance(o, dict) or not d or not o:
        raise HaseError("by_setting.default and by_setting.one_cpu are required", path)
    for name, x in (("default", d), ("one_cpu", o)):
        for k in ("latency_vs_fastest", "latency_spread_pct"):
            v = x.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise HaseError(f"by_setting.{name}.{k} must be a positive number, not {json.dumps(v)}", path)
        n = x.get("processes")
        if n is not None and (isinstance(n, bool) or not isinstance(n, (int, float)) or not math.isfinite(n) or n < 0):
            raise HaseError(f"by_setting.{name}.processes must be a count, not {json.dumps(n)}", path)
    source = paths.in_repo(path)   # in the note: the committed file as the repository names it
    return {"host_scale": float(o["latency_vs_fastest"]) / float(d["latency_vs_fastest"]),
            "spread_scale": float(o["latency_spread_pct"]) / float(d["latency_spread_pct"]),
            "processes": {"default": int(d.get("processes") or 0), "one_cpu": int(o.get("processes") or 0)},
            "source": source}


def pinned(prep: dict, spread, f: dict):
    """(prep, spread) for a process bound to one CPU: host terms scaled, host quantiles pulled toward 1 (or pushed
    away from it where binding widened the spread: the low quantile then stops at 0, never a negative host time)."""
    prep = dict(prep, h=prep["h"] * f["host_scale"])   # the copies were not part of the study: left as they are
    if spread:
        k = f["spread_scale"]
        spread = dict(spread, **{key: [max(1.0 - (1.0 - spread[key][0]) * k, 0.0), 1.0 + (spread[key][1] - 1.0) * k]
                                 for key in ("host_sum_us", "before_us") if key in spread})
    return prep, spread


def note(f: dict) -> str:
    """What the setting does to this prediction, in one line."""
    return (f"cpu_pinned: host terms x{f['host_scale']:.3f} and their session spread x{f['spread_scale']:.2f}, "
            f"from {f['processes']['one_cpu']} pinned and {f['processes']['default']} unbound fresh processes "
            f"({f['source']})" + (" - binding did not narrow the spread on this GPU's machines"
                                  if f["spread_scale"] > 0.8 else ""))
