"""Phase 7.1: predict a model's session.run latency under the current load, without timing it.

  python inference/predict_model_latency.py --model resnet18.onnx [--device cuda]
         [--metrics-file snapshot.json] [--json out.json] [--trace timeline.json]

Steps: phase 2 analysis of the model for the target EP -> phase 5 regressors' time of every kernel
at idle -> the timeline model of ORT's run (inference/timeline_model.py: host dispatch per node,
GPU stream in order, input/output copies, fixed cost) -> the neighbour's time-slice interference
from the background load -> total ms, with the per-kernel breakdown (host us, GPU us, which side
bounds it) and, with --trace, the predicted timeline as a Chrome trace (ui.perfetto.dev).
The timeline model's constants come from evaluator.py --fit (inference/results/<slug>/
timeline_model.json); without that file the plain Σ of the kernels in ORT's order is reported.

Load fields (the predictor's inputs) are exactly the DCGM fields the regressors were trained on,
from --metrics-file (JSON {field: value}), Prometheus (config prometheus.url) or local sampling.
The launch-wait probe (inference/node_agent.py) comes from the same source when it is there:
HASE_LAUNCH_WAIT_US (us per launch onto an idle stream) with HASE_LAUNCH_WAIT_AGE_S or
HASE_LAUNCH_WAIT_TIMESTAMP_S (unix s); locally the probe runs briefly when probe.idle_probe_us is
set. It replaces the fitted beta_us * u; absent or older than probe.max_age_s, the prediction is
DCGM-only, with a warning naming the field. The JSON's wait_source says which one was used.
"""
import json
import math
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import requests  # noqa: E402

from utils import paths  # noqa: E402
from utils.config import base_parser, from_args  # noqa: E402
from utils.errors import HaseError, run_main  # noqa: E402
from utils.logger import get_logger  # noqa: E402
from utils.ort_session import device_slug, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "auto", "predictor_dir": "", "timeline_model": "", "pin_dims": {}, "seed": 0,
            # local sampling: at least sample_s, then until the busy field's standard error over SAMPLE_CHUNK_S
            # windows is <= sample_busy_se (a fraction), at most sample_max_s (one 0.5 s CPU sample swung a
            # prediction 0.96 -> 3.25 ms)
            "sample_s": 1.0, "sample_max_s": 5.0, "sample_busy_se": 0.02,
            "prometheus": {"url": "", "selector": 'gpu="0"', "lookback_s": 30, "queries": {}}, "top_kernels": 15,
            "probe": {"max_age_s": 60.0, "idle_probe_us": 0.0, "local_ms": 200.0},
            # the session the user will run: ORT's defaults unless told otherwise
            "cudnn_conv_algo_search": "EXHAUSTIVE", "io_binding": False}
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


def load_local(device: str, fields: list, cfg: dict) -> tuple:
    """(mean of each field over the sampled window, what the window was: its length, chunks, busy field and
    standard error), sampling as long as sampled_enough() asks."""
    from benchmark.gpu_metrics import busy_reading, make_source
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


def describe_window(w: dict) -> str:
    """'local sampling over 2.25 s (9 windows of 0.25 s; CPU_UTIL_PCT standard error 1.1 % points)'."""
    from benchmark.gpu_metrics import BUSY_FIELDS, FIELD_SPECS
    out = f"local sampling over {w['load_window_s']:.2f} s ({w['load_windows']} windows of {SAMPLE_CHUNK_S:g} s"
    f = w.get("load_busy_field")
    if f and w["load_busy_se"] == w["load_busy_se"]:
        se = w["load_busy_se"] / dict(BUSY_FIELDS)[f]
        out += f"; {f} standard error {se:.2g} {FIELD_SPECS[f].unit}"
    return out + ")"


def probe_local(device: str, pcfg: dict) -> dict:
    """Run the launch-wait probe here for local_ms, against the configured idle reference."""
    if float(pcfg["idle_probe_us"]) <= 0:
        return {}  # no sound idle reference without one: the caller warns that the field is absent
    from benchmark.launch_probe import make_probe, probe, wait_per_launch_us
    run = make_probe(device, threads=1 if device == "cpu" else 0)
    mean_us = probe(run, float(pcfg["local_ms"]))["PROBE_RUN_US_MEAN"]
    return {WAIT: wait_per_launch_us(mean_us, float(pcfg["idle_probe_us"])), AGE: 0.0}


def launch_wait(got: dict, where: str, max_age_s: float, now: float) -> tuple:
    """(wait per launch in us or None, JSON info, warning or None) from one load snapshot's probe
    fields; absent or older than max_age_s -> None: the DCGM-only prediction."""
    if WAIT not in got:
        return None, {"wait_source": DCGM_ONLY}, (f"launch-wait field {WAIT} absent from {where}: "
                                                  f"DCGM-only prediction (wait = beta_us * u)")
    wait = got[WAIT]
    if not wait >= 0:
        raise HaseError(f"field '{WAIT}' must be a wait in us >= 0, got {wait:g}", where)
    age = got.get(AGE, now - got[TS] if TS in got else None)  # neither: the snapshot is taken as current
    if age is not None and age > max_age_s:
        return None, {"wait_source": DCGM_ONLY, "launch_wait_age_s": age}, (
            f"launch-wait field {WAIT} from {where} is {age:.0f} s old (probe.max_age_s {max_age_s:g}): "
            f"DCGM-only prediction (wait = beta_us * u)")
    return wait, {"wait_source": f"measured ({where})", "launch_wait_measured_us": wait,
                  "launch_wait_age_s": age}, None


def check_snapshot(got: dict, where) -> None:
    """Every known field of a load snapshot is checked against FIELD_SPECS, whether this predictor reads it or not
    (97 for a 0-1 ratio says the exporter is misconfigured: the fields it does read are suspect too); the names
    of unknown fields (a typo, another exporter's metric) come in one UnknownFieldWarning."""
    from benchmark.gpu_metrics import FIELD_SPECS, check_value
    for f, v in got.items():
        if f in FIELD_SPECS:
            check_value(f, v, where)
    unknown = sorted(f for f in got if f not in FIELD_SPECS)
    if unknown:
        warnings.warn(UnknownFieldWarning(f"{where}: unknown load field{'s' if len(unknown) > 1 else ''} "
                                          f"{', '.join(unknown)} (not in gpu_metrics.FIELD_SPECS): ignored"))


class UnknownFieldWarning(UserWarning):
    """A load snapshot names a field Hase does not know."""


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
    from benchmark.gpu_metrics import check_value
    where = metrics_file if metrics_file else src
    check_snapshot(got, where)
    missing = [f for f in fields if f not in got]
    if missing:
        raise HaseError(f"load field '{missing[0]}' needed by the predictor is missing", where)
    wait, info, warning = launch_wait(got, where, float(cfg["probe"]["max_age_s"]), time.time())
    info.update(window)
    if warning and not metrics_file and not cfg["prometheus"]["url"] and float(cfg["probe"]["idle_probe_us"]) <= 0:
        warning += "; set probe.idle_probe_us to run the probe here"
    # NaN or out of range (97 for a 0-1 ratio) is an error, never read as idle or clamped
    load = {BG + f: check_value(f, got[f], where) for f in fields}
    if wait is not None:
        load[BG + WAIT] = wait
    return load, src, info, warning


# ---------- prediction ----------
def load_timeline_model(cfg: dict, slug: str):
    """(model, path) of the fitted timeline model; (None, path) when there is none."""
    from inference.timeline_model import load
    if cfg["timeline_model"]:
        path = Path(cfg["timeline_model"])
    else:  # measured terms + measured interference (fit_interference.py), measured terms, evaluator.py --fit's
        cands = [paths.inference_results_dir() / slug / sub / "timeline_model.json"
                 for sub in ("interference", "measured", ".")]
        path = next((c for c in cands if c.exists()), cands[-1])
    if not path.exists():
        if cfg["timeline_model"]:
            raise HaseError("file not found", path)
        return None, path
    return load(path), path


def prepare_record(record: dict, predictor, model: dict) -> dict:
    """Load-independent part of a prediction (kernel times at idle); cache it per model."""
    from inference.timeline_model import prepared
    kernel_ms = predictor.predict_kernels(record["kernels"], model["idle_load"])
    # a node model (inference/node_model.py) predicts the host dispatch per node too
    host = predictor.predict_host_us(record["kernels"]) if hasattr(predictor, "predict_host_us") else None
    prep = prepared(record, kernel_ms, model, node_host_us=host)
    prep["kernel_ms"] = kernel_ms
    prep["standalone_sum_ms"] = float(sum(kernel_ms.values()))
    prep["unseen_types"] = predictor.unseen_types(record["kernels"])
    return prep


def analyse(model_path: Path, device: str, cfg: dict, offline: bool = False) -> dict:
    """Phase 2 record of the model for the target EP (cached by file name, size and mtime). offline: the CUDA EP's
    graph reproduced with the CPU build (ort_analysis/offline_cuda.py), for a machine without a CUDA EP."""
    from ort_analysis import offline_cuda
    from ort_analysis.fusion_detector import build_record, record_path
    rp = offline_cuda.record_path(model_path.stem) if offline else record_path(model_path.stem, device)
    st = model_path.stat()
    key = f"{model_path.resolve()}:{st.st_size}:{int(st.st_mtime)}"
    if offline:
        key += f":{offline_cuda.METHOD}:{offline_cuda.VERSION}"
    if rp.exists():
        rec = json.loads(rp.read_text())
        if rec.get("cache_key") == key:
            return rec
    if offline:
        rec = offline_cuda.analyse(model_path, cfg["pin_dims"], cfg["seed"])
    else:
        rec = build_record(model_path, device, {"pin_dims": cfg["pin_dims"], "seed": cfg["seed"],
                                                "keep_small_values": 64})
    rec["cache_key"] = key
    paths.atomic_write_text(rp, json.dumps(rec, indent=1) + "\n")
    return rec


def session_options(cfg: dict) -> dict:
    """The session options that change latency, validated: {'cudnn_conv_algo_search', 'io_binding'}."""
    from utils.ort_session import check_cudnn_algo
    algo = check_cudnn_algo(cfg.get("cudnn_conv_algo_search", "EXHAUSTIVE"))
    if not isinstance(cfg.get("io_binding", False), bool):
        raise HaseError(f"io_binding must be true or false, not '{cfg['io_binding']}'")
    return {"cudnn_conv_algo_search": algo, "io_binding": bool(cfg.get("io_binding", False))}


def predict_record(record: dict, predictor, load: dict, model=None, options=None) -> dict:
    """Prediction for an analysed model under one load (schedulers: cache prepare_record instead).
    options: session_options(); io_binding = inputs and outputs already on the GPU (no copies)."""
    options = options or {"cudnn_conv_algo_search": "EXHAUSTIVE", "io_binding": False}
    from graph_model.dag_critical_path import build_dag, calculate_latency
    from inference import timeline_model as tm
    if model is None:  # no fitted timeline: the plan's first version, Σ in ORT's order
        kernel_ms = predictor.predict_kernels(record["kernels"], load)
        total = calculate_latency(build_dag(record), kernel_ms)
        return {"model": record["model"], "device": record["device"], "total_ms": total, "method": "sum",
                "p10_ms": total, "p90_ms": total, "spread_source": "none (no timeline model)",
                "kernel_sum_ms": total, "n_kernels": len(record["kernels"]),
                "kernels": [{"id": k["id"], "type": k["type"], "predicted_ms": kernel_ms[k["id"]]}
                            for k in record["kernels"]], "unseen_types": predictor.unseen_types(record["kernels"])}
    prep = prepare_record(record, predictor, model)
    if record["device"] == "cuda":
        prep = tm.with_options(prep, model, options["cudnn_conv_algo_search"])
    copies = not options["io_binding"]
    p = model["params"]
    terms = tm.load_terms(load, model["idle_clock_mhz"])
    res = tm.predict_us(prep, p, terms, copies)
    idle = tm.predict_us(prep, p, tm.load_terms(model["idle_load"], model["idle_clock_mhz"]), copies)
    spread = tm.with_spread(prep, p, terms, model.get("spread"), copies, central=res)
    host = prep["h"] * p["kappa"]
    run_share = prep.get("interference") == tm.RUN_SHARE
    # run-level slicing: the neighbour's cost is one run-level term, the kernels keep their idle GPU time
    gpu = tm.gpu_idle_us(prep, p) if run_share else tm.gpu_stretched(tm.gpu_idle_us(prep, p), p, terms)
    return {"model": record["model"], "device": record["device"], "total_ms": res["total_us"] / 1e3,
            "p10_ms": spread["p10"] / 1e3, "p90_ms": spread["p90"] / 1e3,
            "spread_source": ("measured across fresh sessions (host dispatch and copy terms)" if model.get("spread")
                              else "none (timeline model without a measured spread)"),
            "session_options": options,
            "idle_ms": idle["total_us"] / 1e3, "method": "timeline",
            "statistic": model.get("statistic", "median"), "neighbour_busy": terms["u"],
            "launch_wait_used_us": res["wait_per_launch_us"], "interference_model": prep.get("interference"),
            "interference_ms": res.get("interference_us", 0.0) / 1e3,
            "clock_ratio": terms["clock_ratio"], "kernel_sum_ms": prep["standalone_sum_ms"],
            "host_sum_ms": float(host.sum()) / 1e3, "gpu_sum_ms": float(gpu.sum()) / 1e3,
            "copy_ms": (res["h2d_us"] + res["d2h_us"]) / 1e3 if copies else 0.0,
            "launches_on_idle_stream": res["host_first"], "n_kernels": prep["n"],
            "kernels": [{"id": k["id"], "type": k["type"], "predicted_ms": prep["kernel_ms"][k["id"]],
                         "host_us": float(h), "gpu_us": float(g)}
                        for k, h, g in zip(record["kernels"], host, gpu)],
            "unseen_types": prep["unseen_types"], "_prep": prep, "_host": host, "_gpu": gpu,
            "_copies_us": (res["h2d_us"], res["d2h_us"])}


def write_trace(record: dict, res: dict, model: dict, path: Path) -> None:
    """The predicted timeline as a Chrome trace, drawn by the phase 6.2 simulator."""
    from graph_model.overlap_simulator import simulate, write_chrome_trace
    ids = [k["id"] for k in record["kernels"]]
    prep, p = res["_prep"], model["params"]
    run_share = res.get("interference_model") == "run_share"
    # run-level slicing: the neighbour's share is drawn as one wait before the run, not per launch
    h2d, d2h = res["_copies_us"]
    params = {"session_overhead_us": max(p["c0_us"], 0.0) + prep.get("fixed_us", 0.0)
              + (res["interference_ms"] * 1e3 if run_share else 0.0),
              "h2d_us_per_byte": 0.0, "d2h_us_per_byte": 0.0, "h2d_fixed_us": h2d, "d2h_fixed_us": d2h,
              "launch_wait_us": 0.0 if run_share else res.get("launch_wait_used_us", 0.0)}
    sim = simulate(record, dict(zip(ids, res["_host"])), dict(zip(ids, res["_gpu"])), params)
    write_chrome_trace(sim, path)


def check_ep(predictor, device: str, pdir) -> None:
    """A predictor trained for one EP says nothing about another's kernels (CPU EP fuses Conv_Relu,
    inserts ReorderOutput...): refuse instead of predicting them all with the generic model."""
    if predictor.device and predictor.device != device:
        raise HaseError(f"predictor was trained for the {predictor.device} EP, the model is analysed for the "
                        f"{device} EP: use --device {predictor.device} or a {device} predictor "
                        f"(--set predictor_dir=...)", pdir)


def check_provenance(manifest_meta: dict, device: str, log) -> None:
    here = provenance(device)
    for key, mine in (("gpu_name", here.get("gpu_name")), ("ort_version", here.get("ort_version"))):
        theirs = manifest_meta.get(key)
        if theirs and mine and str(theirs) != str(mine):
            log.warning("predictor trained with %s=%s, this machine has %s: predictions may be off", key, theirs, mine)


def spread_words(res: dict) -> str:
    """The p10-p90 part of the headline: measured across fresh sessions, the time-slicing mixture of runs, or
    'no spread measured for this machine' (a timeline model fitted without repeated sessions)."""
    measured = not str(res.get("spread_source", "none")).startswith("none")
    mixture = res.get("interference_model") == "run_share" and res["neighbour_busy"] > 0
    rng = f"{res['p10_ms']:.3f}-{res['p90_ms']:.3f} ms"
    if measured:
        return f"p10-p90 across {'runs and fresh sessions' if mixture else 'fresh sessions'} {rng}"
    if res["p90_ms"] > res["p10_ms"]:
        return f"p10-p90 across runs (time slicing) {rng}; no session-to-session spread measured for this machine"
    return "no spread measured for this machine"


def format_prediction(res: dict, top: int) -> str:
    if res["method"] == "sum":
        lines = [f"{res['model']}: predicted session.run = {res['total_ms']:.3f} ms (Σ of {res['n_kernels']} "
                 f"kernels; no fitted timeline model: run evaluator.py --fit)"]
        ks = sorted(res["kernels"], key=lambda k: -k["predicted_ms"])[:top]
        lines += [f"  {k['id']:32s} {k['predicted_ms']:9.4f} ms" for k in ks]
    elif res["device"] == "cpu":   # CPU EP: one thread runs the nodes in order; no GPU, stream, copies or launches
        wait = res.get("wait_source", DCGM_ONLY)
        lines = [f"{res['model']}: predicted session.run = {res['total_ms']:.3f} ms ({res['statistic']}; "
                 f"{spread_words(res)}) under the current load ({res['idle_ms']:.3f} ms at idle; "
                 f"CPU neighbours busy {res['neighbour_busy']:.2f})",
                 f"  {res['n_kernels']} nodes on the CPU EP: compute Σ {res['gpu_sum_ms']:.3f} ms, per-node "
                 f"overhead Σ {res['host_sum_ms']:.3f} ms (at idle)",
                 f"  scheduling wait per node behind CPU neighbours {res['launch_wait_used_us']:.1f} us ("
                 + ("none measured: no launch-wait probe value" if wait == DCGM_ONLY else wait) + ")",
                 f"  {'node':32s} {'overhead_us':>11s} {'compute_us':>10s}"]
        ks = sorted(res["kernels"], key=lambda k: -(k["gpu_us"] + k["host_us"]))[:top]
        lines += [f"  {k['id']:32s} {k['host_us']:11.1f} {k['gpu_us']:10.1f}" for k in ks]
    else:
        lines = [f"{res['model']}: predicted session.run = {res['total_ms']:.3f} ms ({res['statistic']}; "
                 f"{spread_words(res)}) under the current load "
                 f"({res['idle_ms']:.3f} ms at idle; neighbour busy {res['neighbour_busy']:.2f}, "
                 f"clock ratio {res['clock_ratio']:.2f})",
                 f"  {res['n_kernels']} kernels: host dispatch Σ {res['host_sum_ms']:.3f} ms, GPU Σ "
                 f"{res['gpu_sum_ms']:.3f} ms, copies {res['copy_ms']:.3f} ms, "
                 f"{res['launches_on_idle_stream']} launches onto an idle stream",
                 (f"  neighbour's share of this run (time slicing) {res['interference_ms']:.3f} ms; probe wait per "
                  f"launch {res['launch_wait_used_us']:.1f} us ({res.get('wait_source', DCGM_ONLY)})"
                  if res.get("interference_model") == "run_share" else
                  f"  wait per launch onto an idle stream {res['launch_wait_used_us']:.1f} us "
                  f"({res.get('wait_source', DCGM_ONLY)})"),
                 f"  {'kernel':32s} {'host_us':>9s} {'gpu_us':>9s}"]
        ks = sorted(res["kernels"], key=lambda k: -max(k["gpu_us"], k["host_us"]))[:top]
        lines += [f"  {k['id']:32s} {k['host_us']:9.1f} {k['gpu_us']:9.1f}" for k in ks]
    if len(res["kernels"]) > top:
        lines.append(f"  ... {len(res['kernels']) - top} more {'nodes' if res['device'] == 'cpu' else 'kernels'}")
    if res.get("load_source"):
        lines.append(f"  load from {res['load_source']}")
    return "\n".join(lines)


def idle_above_loaded(res: dict, model) -> str:
    """A warning when the prediction at idle exceeds the one under the current load by more than the spread (p90 -
    p10; 2% of the idle figure where none was measured): the timeline model's idle reference was itself taken
    under load. None otherwise."""
    if res["method"] != "timeline":
        return None
    tol = max(res["p90_ms"] - res["p10_ms"], 0.02 * res["idle_ms"])
    if res["idle_ms"] - res["total_ms"] <= tol:
        return None
    from benchmark.gpu_metrics import busy_reading
    field, value, _ = busy_reading((model or {}).get("idle_load", {}), BG)
    ref = f" (its idle_load has {BG}{field} = {value:.3g})" if field else ""
    return (f"the idle prediction {res['idle_ms']:.3f} ms exceeds the one under the current load {res['total_ms']:.3f} "
            f"ms by more than the spread ({tol:.3f} ms): the timeline model's idle reference was measured under "
            f"load{ref}; fit it again on an idle machine")


def main() -> int:
    p = base_parser("Phase 7: predict whole-model latency under the current load", "inference")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--metrics-file", type=Path, help="JSON {DCGM field: value} of the current background load")
    p.add_argument("--json", type=Path, help="write the prediction and per-kernel breakdown here")
    p.add_argument("--trace", type=Path, help="write the predicted timeline as a Chrome trace here")
    p.add_argument("--gpu", help="predict for this GPU (its folder name, e.g. nvidia-h200: inference/results/<gpu>/, "
                                 "training/models/<gpu>) on the CUDA EP; on a machine without a CUDA EP the CUDA "
                                 "EP's graph is reproduced offline (ort_analysis/offline_cuda.py), and it says so")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    if not args.model.is_file():  # before any load is sampled: that can take seconds or need a server
        raise HaseError("file not found" if not args.model.exists() else "not a file", args.model)
    offline, offline_why = False, None
    if args.gpu:
        from utils.ort_session import cuda_probe
        if args.device == "cpu":
            raise HaseError("--gpu predicts for the CUDA EP; it cannot go with --device cpu")
        device, slug = "cuda", args.gpu
        ok, offline_why = cuda_probe()
        offline = not ok
    else:
        device = resolve_device(cfg["device"])
        slug = device_slug(device)
    from inference import timeline_model as tm
    from training.train_kernel_model import load_predictor
    model, mpath = load_timeline_model(cfg, slug)
    pdir = tm.predictor_of(model, cfg["predictor_dir"]) or paths.train_models_dir() / slug
    predictor = load_predictor(pdir)
    check_ep(predictor, device, pdir)
    check_provenance(predictor.manifest.get("metadata", {}), device, log)
    options = session_options(cfg)
    # the predictor's load features and what the timeline itself reads (a kernel-space predictor has none)
    fields = list(dict.fromkeys([f[len(BG):] for f in predictor.load_fields] + tm.load_fields_of(model, device)))
    if offline:
        log.warning("no CUDA EP on this machine (%s): the CUDA EP's graph for %s is reproduced offline with the "
                    "CPU build of onnxruntime (ort_analysis/offline_cuda.py)", offline_why, slug)
    if offline and not args.metrics_file and not cfg["prometheus"]["url"]:
        # the target GPU is not here: nothing to sample; its timeline model's idle load stands for it
        if model is None:
            raise HaseError(f"no load source for {slug} (--metrics-file or prometheus.url) and no timeline model "
                            f"with an idle load", mpath)
        load, src = dict(model["idle_load"]), f"idle (no {slug} here to sample: the timeline model's idle load)"
        wait_info, wait_warning = {"wait_source": DCGM_ONLY}, None
        log.warning("no load source for %s (--metrics-file or prometheus.url): predicting at idle", slug)
    else:
        with warnings.catch_warnings(record=True) as caught:   # unknown fields of the snapshot: one warning
            warnings.simplefilter("always")
            load, src, wait_info, wait_warning = current_load(cfg, device, fields, args.metrics_file)
        for w in caught:
            log.warning("%s", w.message)
    if wait_warning:
        log.warning("%s", wait_warning)
    if model and model.get("threads"):
        log.info("the timeline model is for sessions with %s intra-op threads (ORT's intra_op_num_threads)",
                 model["threads"])
    t0 = time.perf_counter()
    record = analyse(args.model, device, cfg, offline=offline)
    t1 = time.perf_counter()
    if offline:
        o = record["offline"]
        log.warning("offline analysis: %s", "claimed (its ops seen on the CUDA EP in GPU records, float32, no "
                    "CUDA-only rewrite)" if o["claimed"] else
                    "NOT claimed, the CUDA EP may run another graph: " + "; ".join(o["unclaimed_because"]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = predict_record(record, predictor, load, model, options)
    t2 = time.perf_counter()
    for w in caught:
        log.warning("%s", w.message)
    # the first call also loads the tree models into ORT; a scheduler keeps them loaded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict_record(record, predictor, load, model, options)
    if model is None:  # the plain sum has no launches to wait at
        wait_info = {**wait_info, "wait_source": "unused (no timeline model)"}
    res.update({"load": load, "load_source": src, **wait_info, "predict_s": t2 - t1,
                "predict_warm_s": time.perf_counter() - t2,
                "analyse_s": t1 - t0,
                "predictor_dir": str(pdir), "timeline_model": str(mpath) if model else None,
                "intra_op_threads": (model or {}).get("threads"), "gpu": slug,
                "analysis": ({"offline": True, "why": offline_why, **{k: record["offline"][k] for k in
                              ("method", "claimed", "unclaimed_because")}} if offline else {"offline": False})})
    if offline:
        print(f"# {slug}, CUDA EP: graph analysed offline (no CUDA EP here; ort_analysis/offline_cuda.py, "
              f"{'claimed' if record['offline']['claimed'] else 'NOT claimed'})")
    print(format_prediction(res, cfg["top_kernels"]))
    odd = idle_above_loaded(res, model)
    if odd:
        log.warning("%s", odd)
    if args.trace:
        if model is None:
            raise HaseError("a trace needs the fitted timeline model (evaluator.py --fit)", mpath)
        write_trace(record, res, model, args.trace)
        log.info("predicted timeline written to %s (open in ui.perfetto.dev)", args.trace)
    if args.json:
        out = {k: v for k, v in res.items() if not k.startswith("_")}
        paths.atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_main(main)
