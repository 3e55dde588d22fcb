"""A small dcgm-exporter stand-in: serves DCGM-named GPU metrics from NVML/GPM (or fixed values)
in dcgm-exporter's text format, so a real Prometheus can scrape hosts without dcgm-exporter.

  python inference/dcgm_exporter.py [--port 9400] [--device-id 0] [--interval-s 1]
  python inference/dcgm_exporter.py --fixed values.json     # {field: value}; tests, demos

Series look like dcgm-exporter's: DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="...",device="nvidia0",
modelName="NVIDIA H200",Hostname="..."} 42. PROF fields are ratios 0-1, as in DCGM.
"""
import argparse
import json
import platform
import time
from pathlib import Path


from prometheus_client import CollectorRegistry, Gauge, start_http_server  # noqa: E402

from hase.utils.errors import HaseError, run_main  # noqa: E402

LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]


def make_gauges(fields, registry) -> dict:
    return {f: Gauge(f, f"{f} (DCGM field, served by hase dcgm_exporter)", LABELS, registry=registry) for f in fields}


def gpu_labels(device_id: int) -> dict:
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(device_id)
        name, uuid = pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h)
    except Exception:  # no NVML / GPU: fixed-value mode labels
        name, uuid = "none", "none"
    dec = (lambda s: s.decode() if isinstance(s, bytes) else s)
    return {"gpu": str(device_id), "UUID": dec(uuid), "device": f"nvidia{device_id}", "modelName": dec(name),
            "Hostname": platform.node()}


def read_fixed(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
        return {k: float(v) for k, v in data.items()}
    except (OSError, json.JSONDecodeError, TypeError, ValueError, AttributeError) as e:
        raise HaseError(f"not a JSON object of numbers ({type(e).__name__})", path)


def main() -> int:
    p = argparse.ArgumentParser(description="Serve DCGM-named metrics from NVML/GPM for Prometheus")
    p.add_argument("--port", type=int, default=9400)
    p.add_argument("--address", default="127.0.0.1")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--interval-s", type=float, default=1.0)
    p.add_argument("--fixed", type=Path, help="serve these fixed values instead of reading NVML")
    p.add_argument("--duration-s", type=float, default=0.0, help="stop after this long (0 = forever)")
    args = p.parse_args()
    registry = CollectorRegistry()
    labels = gpu_labels(args.device_id)
    if args.fixed:
        values = read_fixed(args.fixed)
        gauges = make_gauges(values, registry)
        for f, v in values.items():
            gauges[f].labels(**labels).set(v)
        source = None
    else:
        from hase.benchmark.gpu_metrics import DCGM_FIELDS, make_source, snapshot
        # it reads windows of interval_s for as long as it serves: keep a minute of samples, not KEEP_S's 10 minutes
        source = make_source({"source": "nvml", "fields": list(DCGM_FIELDS),
                              "keep_s": max(60.0, 4 * float(args.interval_s))}, "cuda", args.device_id)
        source.start()
        gauges = make_gauges(DCGM_FIELDS, registry)
    start_http_server(args.port, addr=args.address, registry=registry)
    print(f"serving {len(gauges)} DCGM fields on http://{args.address}:{args.port}/metrics", flush=True)
    t_end = time.time() + args.duration_s if args.duration_s > 0 else float("inf")
    try:
        while time.time() < t_end:
            if source is not None:
                for f, v in snapshot(source, args.interval_s).items():
                    if v == v:  # skip NaN (no GPM on this GPU)
                        gauges[f].labels(**labels).set(v)
            else:
                time.sleep(min(args.interval_s, max(t_end - time.time(), 0.01)))
    finally:
        if source is not None:
            source.stop()
    return 0


if __name__ == "__main__":
    run_main(main)
