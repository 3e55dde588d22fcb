"""Phase 7.1: predict a model's session.run latency under the current load, without timing it.

  python inference/predict_model_latency.py --model resnet18.onnx [--device cuda]
         [--metrics-file snapshot.json] [--json out.json]

Steps: phase 2 analysis of the model for the target EP -> per-kernel predictions of the phase 5
regressors under the current background load -> DAG sum in ORT's execution order (phase 6) ->
whole-model estimate. The whole-model step is seed 000's correction: standalone kernels each pay
a session's fixed cost, so Σ over-counts; a calibration fitted on measured models
(evaluator.py --fit-calibration) maps Σ, the kernel count and the neighbour's activity to the
measured latency:  total = a·Σ + b + c·n_kernels·busy + d·MB copied, busy = bg GPU activity (0-1),
Σ = predicted GPU (device-mode) kernel times, MB = graph inputs + outputs copied by session.run.
Without a calibration file the plain Σ is reported.

Load fields (the predictor's inputs) are exactly the DCGM fields the regressors were trained on,
from --metrics-file (JSON {field: value}), Prometheus (config prometheus.url) or local sampling.
"""
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests  # noqa: E402

from utils import paths  # noqa: E402
from utils.config import base_parser, from_args  # noqa: E402
from utils.errors import HaseError, run_main  # noqa: E402
from utils.logger import get_logger  # noqa: E402
from utils.ort_session import device_slug, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "auto", "predictor_dir": "", "calibration": "", "pin_dims": {}, "seed": 0, "sample_s": 0.5,
            "prometheus": {"url": "", "selector": 'gpu="0"', "lookback_s": 30, "queries": {}}, "top_kernels": 15}
BG = "bg_"
BUSY_FIELDS = ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "CPU_UTIL_PCT")  # neighbour activity, first present wins


# ---------- load sources ----------
def load_from_file(path) -> dict:
    path = Path(path)
    data = paths.read_json(path, "metrics snapshot")
    if not isinstance(data, dict):
        raise HaseError("metrics snapshot must be a JSON object {field: value}", path)
    data = data.get("metrics", data)
    out = {}
    for k, v in data.items():
        try:
            out[k[len(BG):] if k.startswith(BG) else k] = float(v)
        except (TypeError, ValueError):
            raise HaseError(f"field '{k}' is not a number", path)
    return out


def load_from_prometheus(pcfg: dict, fields: list) -> dict:
    """Instant values: avg_over_time(query[lookback]) per field, through the HTTP API."""
    url = pcfg["url"].rstrip("/")
    out = {}
    for f in fields:
        q = pcfg["queries"].get(f)
        if q is None:
            raise HaseError(f"no Prometheus query configured for field '{f}' (inference/config.yaml "
                            f"prometheus.queries); or pass --metrics-file")
        promql = f"avg(avg_over_time(({q.format(selector=pcfg['selector'])})[{int(pcfg['lookback_s'])}s:1s]))"
        try:
            r = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
            r.raise_for_status()
            res = r.json()["data"]["result"]
        except (requests.RequestException, ValueError, KeyError) as e:
            raise HaseError(f"Prometheus at {url} unreachable or failed ({type(e).__name__}); "
                            f"pass --metrics-file snapshot.json instead")
        if not res:
            raise HaseError(f"Prometheus at {url} has no series for '{f}' ({q}); pass --metrics-file instead")
        v = float(res[0]["value"][1])
        if v != v:  # NaN
            raise HaseError(f"Prometheus at {url} returned NaN for '{f}'; pass --metrics-file instead")
        out[f] = v
    return out


def load_local(device: str, fields: list, seconds: float) -> dict:
    from benchmark.gpu_metrics import make_source, snapshot
    src = make_source({"source": "nvml" if device == "cuda" else "psutil", "fields": list(fields)}, device)
    src.start()
    try:
        return snapshot(src, seconds)
    finally:
        src.stop()


def current_load(cfg: dict, device: str, fields: list, metrics_file=None) -> tuple:
    if metrics_file:
        got, src = load_from_file(metrics_file), f"file {metrics_file}"
    elif cfg["prometheus"]["url"]:
        got, src = load_from_prometheus(cfg["prometheus"], fields), f"prometheus {cfg['prometheus']['url']}"
    else:
        got, src = load_local(device, fields, cfg["sample_s"]), "local sampling"
    missing = [f for f in fields if f not in got]
    if missing:
        where = metrics_file if metrics_file else src
        raise HaseError(f"load field '{missing[0]}' needed by the predictor is missing", where)
    return {BG + f: got[f] for f in fields}, src


# ---------- prediction ----------
def busy_of(load: dict) -> float:
    for f in BUSY_FIELDS:
        if BG + f in load:
            v = load[BG + f]
            return v / 100.0 if f == "CPU_UTIL_PCT" else v
    return 0.0


def io_megabytes(record: dict) -> float:
    """Bytes session.run copies host->device and back (graph inputs + outputs), in MB."""
    from utils.onnx_io import nbytes
    return sum(nbytes(t.get("shape") or [], t.get("dtype") or "float32")
               for t in record["graph_inputs"] + record["graph_outputs"]) / 1e6


def whole_model_ms(sum_ms: float, n_kernels: int, busy: float, calib, io_mb: float = 0.0) -> float:
    """a·Σ (GPU work, stretched by sharing) + b (fixed session cost) + c·n_kernels·busy (each
    dispatched kernel waits for a time slice while the neighbour runs) + d·MB copied."""
    if not calib:
        return sum_ms
    c = calib["coef"]
    return max(c["a"] * sum_ms + c["b"] + c["c"] * n_kernels * busy + c.get("d", 0.0) * io_mb, 0.0)


def load_calibration(cfg: dict, slug: str):
    path = Path(cfg["calibration"]) if cfg["calibration"] else paths.inference_results_dir() / slug / "calibration.json"
    if not path.exists():
        return None, path
    try:
        return json.loads(path.read_text()), path
    except json.JSONDecodeError as e:
        raise HaseError(f"calibration is not valid JSON ({e.msg})", path)


def analyse(model_path: Path, device: str, cfg: dict) -> dict:
    """Phase 2 record of the model for the target EP (cached by file name, size and mtime)."""
    from ort_analysis.fusion_detector import build_record, record_path
    rp = record_path(model_path.stem, device)
    st = model_path.stat()
    key = f"{model_path.resolve()}:{st.st_size}:{int(st.st_mtime)}"
    if rp.exists():
        rec = json.loads(rp.read_text())
        if rec.get("cache_key") == key:
            return rec
    rec = build_record(model_path, device, {"pin_dims": cfg["pin_dims"], "seed": cfg["seed"], "keep_small_values": 64})
    rec["cache_key"] = key
    paths.atomic_write_text(rp, json.dumps(rec, indent=1) + "\n")
    return rec


def predict_record(record: dict, predictor, load: dict, calib=None) -> dict:
    """Prediction for an analysed model under one load; pure given its inputs (used by schedulers)."""
    from graph_model.dag_critical_path import build_dag, calculate_latency
    kernel_ms = predictor.predict_kernels(record["kernels"], load)
    dag = build_dag(record)
    sum_ms = calculate_latency(dag, kernel_ms)
    busy = busy_of(load)
    io_mb = io_megabytes(record)
    total = whole_model_ms(sum_ms, len(record["kernels"]), busy, calib, io_mb)
    return {"model": record["model"], "device": record["device"], "total_ms": total, "kernel_sum_ms": sum_ms,
            "n_kernels": len(record["kernels"]), "busy": busy, "io_mb": io_mb, "calibrated": bool(calib),
            "kernels": [{"id": k["id"], "type": k["type"], "predicted_ms": kernel_ms[k["id"]]} for k in record["kernels"]],
            "unseen_types": sorted(predictor.fallbacks)}


def check_provenance(manifest_meta: dict, device: str, log) -> None:
    here = provenance(device)
    for key, mine in (("gpu_name", here.get("gpu_name")), ("ort_version", here.get("ort_version"))):
        theirs = manifest_meta.get(key)
        if theirs and mine and str(theirs) != str(mine):
            log.warning("predictor trained with %s=%s, this machine has %s: predictions may be off", key, theirs, mine)


def format_prediction(res: dict, top: int) -> str:
    lines = [f"{res['model']}: predicted session.run = {res['total_ms']:.3f} ms "
             f"({'calibrated' if res['calibrated'] else 'uncalibrated Σ'}; Σ kernels {res['kernel_sum_ms']:.3f} ms, "
             f"{res['n_kernels']} kernels, neighbour busy {res['busy']:.2f})"]
    ks = sorted(res["kernels"], key=lambda k: -k["predicted_ms"])[:top]
    lines += [f"  {k['id']:32s} {k['predicted_ms']:9.4f} ms" for k in ks]
    if len(res["kernels"]) > top:
        lines.append(f"  ... {len(res['kernels']) - top} more kernels")
    return "\n".join(lines)


def main() -> int:
    p = base_parser("Phase 7: predict whole-model latency under the current load", "inference")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--metrics-file", type=Path, help="JSON {DCGM field: value} of the current background load")
    p.add_argument("--json", type=Path, help="write the prediction and per-kernel breakdown here")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    device = resolve_device(cfg["device"])
    slug = device_slug(device)
    from training.train_kernel_model import load_predictor
    pdir = Path(cfg["predictor_dir"]) if cfg["predictor_dir"] else paths.train_models_dir() / slug
    predictor = load_predictor(pdir)
    check_provenance(predictor.manifest.get("metadata", {}), device, log)
    fields = [f[len(BG):] for f in predictor.load_fields]
    load, src = current_load(cfg, device, fields, args.metrics_file)
    calib, cpath = load_calibration(cfg, slug)
    t0 = time.perf_counter()
    record = analyse(args.model, device, cfg)
    t1 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = predict_record(record, predictor, load, calib)
    for w in caught:
        log.warning("%s", w.message)
    res.update({"load": load, "load_source": src, "predict_s": time.perf_counter() - t1, "analyse_s": t1 - t0,
                "predictor_dir": str(pdir), "calibration": str(cpath) if calib else None})
    print(format_prediction(res, cfg["top_kernels"]))
    if args.json:
        paths.atomic_write_text(args.json, json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_main(main)
