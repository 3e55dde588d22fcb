"""Transfer model (seed 003): copy time against bytes, fitted as latency_ms = a*bytes + b per direction.

  python benchmark/bandwidth.py [--device cpu|cuda|auto] [--set bandwidth.sizes_kb=[4,64,1024]]

Settings: the `bandwidth:` section of benchmark/config.yaml (plus device/device_id/out there).

CUDA EP: host->device is OrtValue.ortvalue_from_numpy(array, 'cuda') and device->host is
OrtValue.numpy(), the same copies session.run makes for host inputs and outputs (pageable host
memory, through ORT's CUDA data transfer). CPU EP: there is no device; a "transfer" is a host
memcpy (np.copyto), which is what an input costs when ORT must copy it. Timing is do_bench-like:
warm up, repeat within a time budget, keep the samples, report median/p10/p90.

The fit weights each point by 1/latency (relative error), so microsecond copies set the fixed
cost b and gigabyte copies set the slope a. Output: benchmark/results/<device slug>/
bandwidth_table.json (points, fit, bandwidth GB/s, fixed cost us, provenance) + resolved config.
The whole-model predictor reads it for session.run's input and output copies.
"""
import json
import time
from pathlib import Path


import numpy as np  # noqa: E402

from hase.benchmark.ort_kernel_runner import time_loop  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import device_slug, provenance, resolve_device  # noqa: E402

TABLE = "bandwidth_table.json"
DIRECTIONS = ("h2d", "d2h")


def copy_fns(device: str, nbytes: int, device_id: int = 0) -> dict:
    """{direction: zero-arg function doing one copy of nbytes}."""
    host = np.random.default_rng(0).random(nbytes // 4, dtype=np.float32)
    if device == "cpu":
        dst = np.empty_like(host)
        return {"h2d": lambda: np.copyto(dst, host), "d2h": lambda: np.copyto(host, dst)}
    import onnxruntime as ort
    on_dev = ort.OrtValue.ortvalue_from_numpy(host, "cuda", device_id)
    # ortvalue_from_numpy returns after a synchronous cudaMemcpy from pageable memory
    return {"h2d": lambda: ort.OrtValue.ortvalue_from_numpy(host, "cuda", device_id), "d2h": on_dev.numpy}


def time_copy(fn, cfg: dict) -> dict:
    for _ in range(int(cfg["warmup"])):
        fn()
    return time_loop(fn, None, cfg["budget_ms"], cfg["min_loops"], cfg["max_loops"])


def fit_linear(bytes_, ms) -> dict:
    """latency_ms = a*bytes + b, least squares weighted by 1/latency (relative error)."""
    x, y = np.asarray(bytes_, float), np.asarray(ms, float)
    if x.size < 2 or np.ptp(x) == 0:
        raise HaseError("bandwidth fit needs at least two different sizes")
    w = 1.0 / np.maximum(y, 1e-9)
    A = np.stack([x, np.ones_like(x)], axis=1) * w[:, None]
    (a, b), *_ = np.linalg.lstsq(A, y * w, rcond=None)
    pred = a * x + b
    rel = np.abs(pred - y) / y
    return {"a_ms_per_byte": float(a), "b_ms": float(b),
            "bandwidth_GBps": float(1e-6 / a) if a > 0 else float("inf"), "fixed_us": float(b * 1e3),
            "max_rel_err": float(rel.max()), "mean_rel_err": float(rel.mean())}


def transfer_ms(table: dict, direction: str, nbytes: float) -> float:
    """Predicted copy time of nbytes in one direction from a bandwidth table (0 bytes = no copy)."""
    if nbytes <= 0:
        return 0.0
    f = table["directions"][direction]["fit"]
    return max(f["a_ms_per_byte"] * nbytes + f["b_ms"], 0.0)


def load_table(path: Path) -> dict:
    t = paths.read_json(path, "bandwidth table")
    try:
        for d in DIRECTIONS:
            t["directions"][d]["fit"]["a_ms_per_byte"]
    except (KeyError, TypeError):
        raise HaseError("not a bandwidth table (needs directions.h2d/d2h.fit)", path)
    return t


def measure_table(device: str, cfg: dict, log) -> dict:
    from hase.utils.progress import progress
    sizes = [int(kb) * 1024 for kb in cfg["sizes_kb"] if not cfg["max_bytes"] or int(kb) * 1024 <= cfg["max_bytes"]]
    if len(sizes) < 2 or any(s < 4 for s in sizes):
        raise HaseError("sizes_kb must hold at least two sizes >= 1 KB (within max_bytes)")
    points = {d: [] for d in DIRECTIONS}
    for nb in progress(sizes, desc="bandwidth", unit="size"):
        fns = copy_fns(device, nb, cfg["device_id"])
        for d, fn in fns.items():
            s = time_copy(fn, cfg)
            points[d].append({"bytes": nb, **{k: s[k] for k in ("median_ms", "p10_ms", "p90_ms", "min_ms", "n")}})
        del fns
    out = {}
    for d, pts in points.items():
        fit = fit_linear([p["bytes"] for p in pts], [p["median_ms"] for p in pts])
        log.info("%s: %.2f GB/s, fixed %.1f us (max rel err of the fit %.0f%%)", d, fit["bandwidth_GBps"],
                 fit["fixed_us"], 100 * fit["max_rel_err"])
        out[d] = {"fit": fit, "points": pts}
    return out


def main() -> int:
    p = base_parser("Transfer model: host<->device copy time against bytes (latency = a*bytes + b)", "benchmark")
    p.add_argument("--out-file", type=Path, help=f"table path (default benchmark/results/<slug>/{TABLE})")
    args = p.parse_args()
    from hase.benchmark.collector import DEFAULTS
    cfg = from_args(args, DEFAULTS)
    bcfg = {**cfg["bandwidth"], "device_id": cfg["device_id"]}
    log = get_logger("benchmark", args.log_level)
    device = resolve_device(cfg["device"], cfg["device_id"])
    out_dir = paths.bench_results_dir() / (cfg["out"] or device_slug(device, cfg["device_id"]))
    dirs = measure_table(device, bcfg, log)
    table = {"format": "hase.bandwidth/1", "device": device, "method": (
        "OrtValue.ortvalue_from_numpy / OrtValue.numpy (pageable)" if device == "cuda" else "numpy memcpy"),
        "provenance": provenance(device, cfg["device_id"]), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "directions": dirs}
    path = args.out_file or out_dir / TABLE
    paths.atomic_write_text(path, json.dumps(table, indent=1) + "\n")
    save_resolved(cfg["bandwidth"], path.parent, name="bandwidth_config.json")
    log.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    run_main(main)
