"""Where the background load a prediction sees comes from (a library module; the CLI is
inference/predict_model_latency.py): a metrics snapshot file, Prometheus' HTTP API, or local sampling (NVML on
CUDA, psutil on CPU), plus the node agent's launch-wait probe fields. Every value is checked against
benchmark/gpu_metrics.FIELD_SPECS (out of range or NaN: a one-line error naming the field).
"""
import math
import time
import warnings
from pathlib import Path

import numpy as np
import requests

from hase.utils import paths
from hase.utils.errors import HaseError

BG = "bg_"
WAIT, AGE, TS = "HASE_LAUNCH_WAIT_US", "HASE_LAUNCH_WAIT_AGE_S", "HASE_LAUNCH_WAIT_TIMESTAMP_S"
DCGM_ONLY = "dcgm-only (beta_us * u)"



# ---------- load sources ----------
def load_from_file(path) -> dict:
    path = Path(path)
    data = paths.read_json(path, "metrics snapshot")
    if not isinstance(data, dict):
        raise HaseError("metrics snapshot must be a JSON object {field: value}", path)
    data = data.get("metrics", data)
    if not isinstance(data, dict):
        raise HaseError("metrics snapshot's 'metrics' must be a JSON object {field: value}", path)
    out = {}
    for k, v in data.items():
        try:
            if isinstance(v, (dict, list)):
                raise TypeError
            out[k[len(BG):] if k.startswith(BG) else k] = float(v)
        except (TypeError, ValueError, OverflowError):
            raise HaseError(f"field '{k}' is not a number", path)
    return out


def promql_of(pcfg: dict, field: str, query: str) -> str:
    q = query.format(selector=pcfg["selector"])
    if field.endswith("_AGE_S"):  # an age is read now: a mean over the lookback would hide a stalled probe
        return f"max({q})"
    return f"avg(avg_over_time(({q})[{int(pcfg['lookback_s'])}s:1s]))"


def prom_value(url: str, promql: str):
    """The first value of an instant query; None when there is no series."""
    try:
        r = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        res = r.json()["data"]["result"]
    except (requests.RequestException, ValueError, KeyError) as e:
        raise HaseError(f"Prometheus at {url} unreachable or failed ({type(e).__name__}); "
                        f"pass --metrics-file snapshot.json instead")
    return float(res[0]["value"][1]) if res else None


def load_from_prometheus(pcfg: dict, fields: list, optional=()) -> dict:
    """Instant values: avg_over_time(query[lookback]) per field, through the HTTP API. An optional
    field without a configured query or a series (or NaN) is left out."""
    url = pcfg["url"].rstrip("/")
    out = {}
    for f in fields:
        q = pcfg["queries"].get(f)
        if q is None:
            raise HaseError(f"no Prometheus query configured for field '{f}' (inference/config.yaml "
                            f"prometheus.queries); or pass --metrics-file")
        v = prom_value(url, promql_of(pcfg, f, q))
        if v is None:
            raise HaseError(f"Prometheus at {url} has no series for '{f}' ({q}); pass --metrics-file instead")
        if v != v:  # NaN
            raise HaseError(f"Prometheus at {url} returned NaN (not measured) for '{f}'; pass --metrics-file instead")
        out[f] = v
    for f in optional:
        q = pcfg["queries"].get(f)
        v = prom_value(url, promql_of(pcfg, f, q)) if q is not None else None
        if v is not None and v == v:
            out[f] = v
    return out


def load_local(device: str, fields: list, cfg: dict) -> tuple:
    """(mean of each field over the sampled window, what the window was: its length, chunks, busy field and
    standard error), sampling as long as sampled_enough() asks."""
    from hase.benchmark.gpu_metrics import busy_reading, make_source
    src = make_source({"source": "nvml" if device == "cuda" else "psutil", "fields": list(fields)}, device)
    src.start()
    try:
        t0 = last = time.time()
        busy, field = [], None
        while True:
            time.sleep(SAMPLE_CHUNK_S)
            now = time.time()
            field, _, frac = busy_reading(src.window(last, now))
            busy.append(frac)
            last = now
            done, se = sampled_enough(busy, now - t0, cfg)
            if done:
                break
        got = src.window(t0, last)
    finally:
        src.stop()
    return got, {"load_window_s": last - t0, "load_windows": len(busy), "load_busy_field": field,
                 "load_busy_se": se}


def probe_local(device: str, pcfg: dict) -> dict:
    """Run the launch-wait probe here for local_ms, against the configured idle reference."""
    if float(pcfg["idle_probe_us"]) <= 0:
        return {}  # no sound idle reference without one: the caller warns that the field is absent
    from hase.benchmark.launch_probe import make_probe, probe, wait_per_launch_us
    run = make_probe(device, threads=1 if device == "cpu" else 0)
    mean_us = probe(run, float(pcfg["local_ms"]))["PROBE_RUN_US_MEAN"]
    return {WAIT: wait_per_launch_us(mean_us, float(pcfg["idle_probe_us"])), AGE: 0.0}


class LaunchWaitWarning(str):
    """The warning that the launch-wait field is absent or stale: a str (printed as any warning) that says what it
    is about, so a caller that finds the wait irrelevant (a timeline without load terms) drops it by kind."""


def launch_wait(got: dict, where: str, max_age_s: float, now: float, device: str = "cuda") -> tuple:
    """(wait per launch in us or None, JSON info, warning or None) from one load snapshot's probe
    fields; absent or older than max_age_s -> None: the DCGM-only prediction (on the CPU EP: from the CPU fields)."""
    only = "DCGM-only" if device != "cpu" else "CPU-metrics-only"   # EP-appropriate words (issue 26 item 9)
    if WAIT not in got:
        return None, {"wait_source": DCGM_ONLY}, LaunchWaitWarning(f"launch-wait field {WAIT} absent from {where}: "
                                                                   f"{only} prediction (wait = beta_us * u)")
    wait = got[WAIT]
    if not wait >= 0:
        raise HaseError(f"field '{WAIT}' must be a wait in us >= 0, got {wait:g}", where)
    age = got.get(AGE, now - got[TS] if TS in got else None)  # neither: the snapshot is taken as current
    if age is not None and age > max_age_s:
        return None, {"wait_source": DCGM_ONLY, "launch_wait_age_s": age}, LaunchWaitWarning(
            f"launch-wait field {WAIT} from {where} is {age:.0f} s old (probe.max_age_s {max_age_s:g}): "
            f"{only} prediction (wait = beta_us * u)")
    return wait, {"wait_source": f"measured ({where})", "launch_wait_measured_us": wait,
                  "launch_wait_age_s": age}, None


def current_load(cfg: dict, device: str, fields: list, metrics_file=None) -> tuple:
    """(load {bg_field: value} with bg_HASE_LAUNCH_WAIT_US when usable, source, wait info, warning or None)."""
    window = {}   # local sampling: how long it sampled (load_window_s, ...), into the prediction's JSON
    if metrics_file:
        got, src = load_from_file(metrics_file), f"file {metrics_file}"
    elif cfg["prometheus"]["url"]:
        got, src = (load_from_prometheus(cfg["prometheus"], fields, optional=(WAIT, AGE, TS)),
                    f"prometheus {cfg['prometheus']['url']}")
    else:
        got, window = load_local(device, fields, cfg)
        got.update(probe_local(device, cfg["probe"]))  # after the window, so the window does not see it
        src = describe_window(window)
    from hase.benchmark.gpu_metrics import check_value
    where = metrics_file if metrics_file else src
    check_snapshot(got, where)
    missing = [f for f in fields if f not in got]
    if missing:
        raise HaseError(f"load field '{missing[0]}' needed by the predictor is missing", where)
    wait, info, warning = launch_wait(got, where, float(cfg["probe"]["max_age_s"]), time.time(), device)
    info.update(window)
    if warning and not metrics_file and not cfg["prometheus"]["url"] and float(cfg["probe"]["idle_probe_us"]) <= 0:
        warning = LaunchWaitWarning(warning + "; set probe.idle_probe_us to run the probe here")
    # NaN or out of range (97 for a 0-1 ratio) is an error, never read as idle or clamped
    load = {BG + f: check_value(f, got[f], where) for f in fields}
    if wait is not None:
        load[BG + WAIT] = wait
    return load, src, info, warning


SAMPLE_CHUNK_S = 0.25   # local sampling reads the busy field in windows this long to judge its noise


def sampled_enough(busy: list, elapsed_s: float, cfg: dict) -> tuple:
    """(stop?, standard error of the mean busy fraction) after len(busy) chunk windows over elapsed_s: not before
    sample_s; then once the standard error is <= sample_busy_se (chunks taken as independent); at sample_max_s in
    any case. No busy field (None): stop at sample_s."""
    if elapsed_s < float(cfg["sample_s"]):
        return False, math.nan
    vals = [b for b in busy if b is not None]
    if len(vals) < 2:
        return True, math.nan
    se = float(np.std(vals, ddof=1) / math.sqrt(len(vals)))
    return se <= float(cfg["sample_busy_se"]) or elapsed_s >= float(cfg["sample_max_s"]), se


def describe_window(w: dict) -> str:
    """'local sampling over 2.25 s (9 windows of 0.25 s; CPU_UTIL_PCT standard error 1.1 % points)'."""
    from hase.benchmark.gpu_metrics import BUSY_FIELDS, FIELD_SPECS
    out = f"local sampling over {w['load_window_s']:.2f} s ({w['load_windows']} windows of {SAMPLE_CHUNK_S:g} s"
    f = w.get("load_busy_field")
    if f and w["load_busy_se"] == w["load_busy_se"]:
        se = w["load_busy_se"] / dict(BUSY_FIELDS)[f]
        out += f"; {f} standard error {se:.2g} {FIELD_SPECS[f].unit}"
    return out + ")"


def check_snapshot(got: dict, where) -> None:
    """Every known field of a load snapshot is checked against FIELD_SPECS, whether this predictor reads it or not
    (97 for a 0-1 ratio says the exporter is misconfigured: the fields it does read are suspect too); the names
    of unknown fields (a typo, another exporter's metric) come in one UnknownFieldWarning."""
    unknown = snapshot_warning(got, where)
    if unknown:
        warnings.warn(UnknownFieldWarning(unknown))


def snapshot_warning(got: dict, where) -> str:
    """check_snapshot's checks, the unknown fields' warning returned (None when every field is known): what the
    Predictor API, `hase predict` and the service give back among a prediction's warnings."""
    from hase.benchmark.gpu_metrics import FIELD_SPECS, check_value
    for f, v in got.items():
        if f in FIELD_SPECS:
            check_value(f, v, where)
    unknown = sorted(str(f) for f in got if f not in FIELD_SPECS)
    if not unknown:
        return None
    return (f"{where}: unknown load field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)} (not in "
            f"gpu_metrics.FIELD_SPECS): ignored")


class UnknownFieldWarning(UserWarning):
    """A load snapshot names a field Hase does not know."""
