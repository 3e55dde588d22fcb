"""Phase 4 tool: the device's peak FLOP/s and memory bandwidth as ORT itself reaches them (issue 13's roofline).

  python benchmark/peak_bench.py --device cuda [--set compute.n=8192]

Two small ONNX models, timed with IOBinding (inputs and outputs on the device, no copies), warm-up then
`runs` plain runs; each run is `nodes` independent nodes, so the run's time is their GPU work:
  compute    MatMul of float32 [n, n] x [n, n] (2 n^3 FLOPs per node): ORT's float32 path, with whatever
             math mode ORT's CUDA EP uses for it (TF32 tensor cores by default), is what Conv and MatMul
             kernels of an ONNX float32 model get
  bandwidth  Add of two float32 tensors of `elems` elements (3 x 4 x elems bytes moved per node)
The peak is the best of the runs (the roof a kernel can reach), with the median and p10/p90 beside it.
Writes benchmark/results/<device slug>/peaks.json (+ provenance, resolved config): what
training/kernel_space_report.py reads as the roofline's peaks, instead of the achieved 99th percentile.
"""
import json
from pathlib import Path


import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from hase.benchmark.ort_kernel_runner import make_runner, stats, time_loop  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import dummy_feed  # noqa: E402
from hase.utils.ort_session import device_slug, make_session, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "auto", "device_id": 0, "warmup": 3, "runs": 10,
            # per device: sizes that keep one run well above launch costs (GPU) and under a second (CPU)
            "compute": {"cuda": {"n": 8192, "nodes": 8}, "cpu": {"n": 1024, "nodes": 4}},
            "bandwidth": {"cuda": {"elems": 1 << 28, "nodes": 8}, "cpu": {"elems": 1 << 24, "nodes": 4}},
            "threads": 0, "out": "peaks.json"}
F32 = TensorProto.FLOAT


def matmul_model(n: int, nodes: int):
    """`nodes` independent [n,n] x [n,n] MatMuls of one input pair."""
    ins = [helper.make_tensor_value_info("a", F32, [n, n]), helper.make_tensor_value_info("b", F32, [n, n])]
    outs = [helper.make_tensor_value_info(f"y{i}", F32, [n, n]) for i in range(nodes)]
    ns = [helper.make_node("MatMul", ["a", "b"], [f"y{i}"], name=f"mm{i}") for i in range(nodes)]
    return _model(ns, ins, outs)


def add_model(elems: int, nodes: int):
    ins = [helper.make_tensor_value_info("a", F32, [elems]), helper.make_tensor_value_info("b", F32, [elems])]
    outs = [helper.make_tensor_value_info(f"y{i}", F32, [elems]) for i in range(nodes)]
    ns = [helper.make_node("Add", ["a", "b"], [f"y{i}"], name=f"add{i}") for i in range(nodes)]
    return _model(ns, ins, outs)


def _model(nodes, ins, outs):
    m = helper.make_model(helper.make_graph(nodes, "hase_peak", ins, outs),
                          opset_imports=[helper.make_opsetid("", 17)], producer_name="hase.peak_bench")
    m.ir_version = 8
    return m


def timed(model, device: str, cfg: dict) -> dict:
    sess = make_session(model.SerializeToString(), device, "disable", threads=cfg["threads"],
                        device_id=cfg["device_id"])
    fn = make_runner(sess, dummy_feed(sess), "device", cfg["device_id"])
    for _ in range(int(cfg["warmup"])):
        fn()
    return time_loop(fn, loops=int(cfg["runs"]))


def summarize(res: dict, work: float, unit: float) -> dict:
    """Rates (work per second / unit) at the best, median, p10 and p90 run time."""
    s = stats(res["samples_ms"])
    best = min(res["samples_ms"])
    return {"peak": work / (best / 1e3) / unit, "median": work / (s["median_ms"] / 1e3) / unit,
            "p10_time": work / (s["p10_ms"] / 1e3) / unit, "p90_time": work / (s["p90_ms"] / 1e3) / unit,
            "run_ms": {"best": best, "median": s["median_ms"], "p10": s["p10_ms"], "p90": s["p90_ms"]},
            "samples_ms": [round(x, 4) for x in res["samples_ms"]]}


def main() -> int:
    p = base_parser("Peak FLOP/s and bandwidth as ORT reaches them", "benchmark", "peak_bench.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    for k in ("warmup", "runs"):
        if isinstance(cfg[k], bool) or not isinstance(cfg[k], int) or cfg[k] < 1:
            raise HaseError(f"{k} must be a whole number >= 1, got {cfg[k]!r}")
    log = get_logger("peak_bench", args.log_level)
    device = resolve_device(cfg["device"], cfg["device_id"])
    c, b = cfg["compute"][device], cfg["bandwidth"][device]
    comp = summarize(timed(matmul_model(int(c["n"]), int(c["nodes"])), device, cfg),
                     2.0 * int(c["n"]) ** 3 * int(c["nodes"]), 1e12)
    bw = summarize(timed(add_model(int(b["elems"]), int(b["nodes"])), device, cfg),
                   12.0 * int(b["elems"]) * int(b["nodes"]), 1e12)
    out_dir = paths.bench_results_dir() / device_slug(device, cfg["device_id"])
    out_dir.mkdir(parents=True, exist_ok=True)
    prov = provenance(device, cfg["device_id"])
    data = {"peak_tflops": comp["peak"], "peak_tb_per_s": bw["peak"], "compute_tflops": comp,
            "bandwidth_tb_per_s": bw, "what": {"compute": f"float32 MatMul {c['n']}^3 x {c['nodes']} nodes",
                                               "bandwidth": f"float32 Add of {b['elems']} elements x {b['nodes']} nodes"},
            "provenance": prov}
    paths.atomic_write_text(out_dir / cfg["out"], json.dumps(data, indent=1) + "\n")
    save_resolved(cfg, out_dir, name="peak_bench_resolved_config.json", extra={"provenance": prov})
    log.info("%s: %.1f TFLOP/s (float32 MatMul, best run; median %.1f), %.2f TB/s (Add; median %.2f) -> %s",
             prov.get("gpu_name") or device, comp["peak"], comp["median"], bw["peak"], bw["median"], out_dir / cfg["out"])
    return 0


if __name__ == "__main__":
    run_main(main)
