"""Launch-wait probe: how long a launch onto an idle stream waits behind the neighbours right now.

Without MPS the GPU time-slices between processes. A model whose host dispatch is slower than its
kernels (small batch) launches almost every kernel onto an idle stream, and next to a busy neighbour
each such launch waits for the neighbour's work to yield. The NVML/DCGM metrics say how busy the
neighbour is, not how long its work holds the GPU. This probe measures it: one session.run of a chain
of N one-element Relu kernels (GPU-resident, IOBinding) is N launches onto an idle stream, so
(mean run time under the load - at idle) / N is the wait per such launch.
"""
import numpy as np
from onnx import TensorProto, helper

from hase.benchmark.ort_kernel_runner import make_runner, time_loop
from hase.utils.ort_session import make_session

N_LAUNCHES = 16


def probe_model(n: int = N_LAUNCHES) -> bytes:
    """ONNX bytes: x -> Relu -> Relu ... (n kernels) on a 1-element float tensor."""
    names = ["x"] + [f"t{i}" for i in range(1, n)] + ["y"]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=f"relu{i}") for i in range(n)]
    graph = helper.make_graph(nodes, "launch_probe", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="hase.launch_probe")
    model.ir_version = 8
    return model.SerializeToString()


def make_probe(device: str, device_id: int = 0, warmup: int = 50, threads: int = 0):
    """A no-argument callable: one synchronous run of the probe chain (no graph rewrites, so the n
    kernels stay n launches). threads: ORT intra-op threads (0 = ORT's default)."""
    sess = make_session(probe_model(), device, "disable", threads=threads, device_id=device_id)
    run = make_runner(sess, {"x": np.ones(1, np.float32)}, "device", device_id)
    for _ in range(warmup):
        run()
    return run


def probe(run, budget_ms: float = 300.0) -> dict:
    """Run time of the probe chain (us) over a time budget: mean, median, p90 and the sample count."""
    r = time_loop(run, None, budget_ms, 20, 100000)
    return {"PROBE_RUN_US_MEAN": r["mean_ms"] * 1e3, "PROBE_RUN_US_MEDIAN": r["median_ms"] * 1e3,
            "PROBE_RUN_US_P90": r["p90_ms"] * 1e3, "PROBE_N": r["n"]}


def wait_per_launch_us(run_us_mean: float, idle_run_us_mean: float, n: int = N_LAUNCHES) -> float:
    """Extra wait of one launch onto an idle stream under the load, from the probe's mean run times."""
    return max(run_us_mean - idle_run_us_mean, 0.0) / n

