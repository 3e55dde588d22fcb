"""Phase 4 tool: calibrate this process's host dispatch and copy speed (issue 23), in about a second.

  python benchmark/host_calibration.py [--device cuda|cpu|auto] [--set budget_ms=40] [--set out=profile.json]

Host dispatch moves between machines of one kind and between processes on one machine (the GPU side
does not: GPU-time CV 0.11% across sessions, host CV 14%). A predictor whose host terms were learned on
other machines needs this process's speed relative to theirs, so the same microbenchmark runs inside
benchmark/trace_run.py's process next to every measurement, and on the node a prediction is for.

  chains   one session.run of a chain of N nodes of one op class on a tiny tensor, inputs and outputs
           bound on the device (IOBinding), ORT's graph rewrites off so N nodes stay N kernels:
           host time per node = median run time / N.
             relu     unary elementwise: one kernel launch per node (the launch probe's chain)
             add      binary elementwise with a constant
             matmul   4x4 MatMul: cuBLAS's launch path
             conv     1x1 Conv on [1,8,4,4]: cuDNN's launch path
             reshape  Reshape: ORT aliases the buffer, no kernel: the per-node cost of ORT alone
           host_index_us: the geometric mean of the four launching chains' per-node times, the one
           number the predictor scales host dispatch by (relative to its training processes').
  copies   H2D and D2H of pageable numpy buffers through OrtValue at 64 KiB, 1 MiB, 16 MiB: GB/s (CUDA).
           It allocates a buffer per copy: across 15 machines it correlates only 0.57 with the copy rate the
           models' session.run reached, which moves 2x between machines (docs/method.md). run_copies: the copy
           session.run itself makes (a model that is one 1 or 16 MiB input, or output, and one kernel): in a
           process of its own only (run_copy_budget_ms > 0 here; the CLI): measured inside the labelling
           process before each model (machines y and j, exam v11), the labels ran 5-60% slower than on the
           machines before and slower than the same machine's CUPTI-traced process (docs/method.md).
  compute  (CPU EP) a 3x3 conv, a 512^3 MatMul and a 4M-element Add at the session's thread count:
           GFLOP/s and GB/s: the CPU EP's compute terms scale by these.
  clock    SM clock (MHz) via NVML, read after the chains (CUDA).

Library: `Calibrator(device, device_id, threads)` keeps its small sessions, so `measure()` can repeat
cheaply (trace_run calls it once per model session, about 50 ms); `calibrate()` does one full pass and
returns a `Calibration` (dataclass; `to_dict()` is the profile JSON with provenance).
"""
import dataclasses
import json
import math
import os
import time
from pathlib import Path


import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from hase.benchmark.ort_kernel_runner import make_runner, time_loop  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import make_session, provenance, resolve_device  # noqa: E402

CONFIG = Path(__file__).resolve().parent / "host_calibration.yaml"
DEFAULTS = {"device": "auto", "device_id": 0, "threads": 0, "budget_ms": 40.0, "warmup": 20, "run_copy_budget_ms": 20.0,
            "out": "", "key": ""}
CHAIN_N = 16
LAUNCHING = ("relu", "add", "matmul", "conv")
COPY_BYTES = (64 << 10, 1 << 20, 16 << 20)
RUN_COPY_BYTES = (1 << 20, 16 << 20)   # session.run's own copies (Calibrator.run_copies)
SCHEMA = 1


def model_bytes(graph) -> bytes:
    """A calibration graph as an opset-17 model (IR 8, what the pinned ORT loads)."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="hase.calibration")
    model.ir_version = 8
    return model.SerializeToString()


def chain_model(kind: str, n: int = CHAIN_N) -> tuple:
    """(ONNX bytes, input shape) of a chain of n nodes of one op class on a tiny float tensor."""
    shape = {"relu": [1], "add": [1], "reshape": [4, 4], "matmul": [4, 4], "conv": [1, 8, 4, 4]}[kind]
    names = ["x"] + [f"t{i}" for i in range(1, n)] + ["y"]
    inits, nodes = [], []
    if kind == "add":
        inits.append(numpy_helper.from_array(np.full(1, 0.5, np.float32), "c"))
    elif kind == "matmul":
        inits.append(numpy_helper.from_array(np.eye(4, dtype=np.float32) * 0.5, "w"))
    elif kind == "conv":
        inits.append(numpy_helper.from_array(np.eye(8, dtype=np.float32).reshape(8, 8, 1, 1) * 0.5, "w"))
    elif kind == "reshape":
        inits += [numpy_helper.from_array(np.array([16], np.int64), "s16"),
                  numpy_helper.from_array(np.array([4, 4], np.int64), "s44")]
    for i in range(n):
        a, b = names[i], names[i + 1]
        if kind == "relu":
            nodes.append(helper.make_node("Relu", [a], [b], name=f"n{i}"))
        elif kind == "add":
            nodes.append(helper.make_node("Add", [a, "c"], [b], name=f"n{i}"))
        elif kind == "matmul":
            nodes.append(helper.make_node("MatMul", [a, "w"], [b], name=f"n{i}"))
        elif kind == "conv":
            nodes.append(helper.make_node("Conv", [a, "w"], [b], name=f"n{i}", kernel_shape=[1, 1]))
        else:  # reshape: alternate [16] and [4,4]; the chain ends on [4,4] when n is even
            nodes.append(helper.make_node("Reshape", [a, "s16" if i % 2 == 0 else "s44"], [b], name=f"n{i}"))
    out_shape = shape if kind != "reshape" or n % 2 == 0 else [16]
    graph = helper.make_graph(nodes, f"calib_{kind}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], initializer=inits)
    return model_bytes(graph), shape


# the throughput kernels' work per run (FLOP; bytes read and written for add): compute_model's shapes below
COMPUTE_WORK = {"conv": 2 * 64 * 64 * 9 * 56 * 56, "matmul": 2 * 512 ** 3, "add": 3 * 4 * (1 << 22),
                # a conv that reuses its weights little (8 FLOP per weight byte against the conv above's 1,570):
                # real convs sit between the two, and a wider SIMD unit speeds them up less than the first
                # (inference/results/cpu-amd-epyc/transfer/unseen_vm/README.md, per node)
                "conv_lowreuse": 2 * 512 * 512 * 9 * 4 * 4}


def size_tag(nbytes: int) -> str:
    """'64KiB', '16MiB': the size in a copy column's name."""
    return f"{nbytes >> 20}MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10}KiB"


def run_copy_model(direction: str, nbytes: int) -> tuple:
    """(ONNX bytes, feed shape) whose session.run (numpy in, numpy out) is one pageable copy of nbytes and almost
    nothing else: h2d = a float input of nbytes reduced to one value on the GPU; d2h = one float input expanded to an
    output of nbytes. The copy a model's own session.run makes, through ORT's arena (OrtValue allocates a new buffer
    per copy, which `copies` times too)."""
    n = nbytes // 4
    if direction == "h2d":
        nodes = [helper.make_node("ReduceMax", ["x"], ["y"], keepdims=0)]
        x, y = [n], []
    else:
        shape = numpy_helper.from_array(np.array([n], np.int64), "shape")
        nodes = [helper.make_node("Constant", [], ["s"], value=shape), helper.make_node("Expand", ["x", "s"], ["y"])]
        x, y = [1], [n]
    graph = helper.make_graph(nodes, f"calib_run_{direction}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, y)])
    return model_bytes(graph), x


def compute_model(kind: str) -> tuple:
    """(ONNX bytes, feed shape, work) for the CPU EP's throughput: work in FLOP (conv, matmul) or bytes (add)."""
    if kind == "conv":      # 3x3, 64 -> 64 channels on 56x56: the bulk of a ResNet stage
        x, w = [1, 64, 56, 56], np.random.default_rng(0).standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    elif kind == "conv_lowreuse":   # 3x3, 512 -> 512 channels on 4x4: 9.4 MB of weights, a late stage at small input
        x, w = [1, 512, 4, 4], np.random.default_rng(0).standard_normal((512, 512, 3, 3)).astype(np.float32) * 0.01
        node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    elif kind == "matmul":
        x, w = [512, 512], np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32) * 0.05
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
    else:                   # add: read two 16 MiB operands, write one
        x, w = [1 << 22], np.full(1 << 22, 0.5, np.float32)
        node = helper.make_node("Add", ["x", "w"], ["y"])
    graph = helper.make_graph([node], f"calib_cpu_{kind}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, x)],   # same shape out
                              initializer=[numpy_helper.from_array(w, "w")])
    return model_bytes(graph), x, COMPUTE_WORK[kind]


# CPU EP: how a node's time moves with the thread count depends on its size: MLAS and ORT's thread pool split a
# node across threads only above some work (on an idle 2-vCPU EPYC, 1 -> 2 threads: a 0.29 MFLOP conv 4.5 -> 4.0 us,
# 3.6 MFLOP 32.5 -> 18.5 us, 58 MFLOP 497 -> 250 us). So besides the large kernels' throughput, per-node time on
# chains of smaller ones: 3x3 convs (channels, side) and Adds (elements), LADDER_N nodes each.
LADDER_CONV = ((16, 8), (32, 14), (64, 28))          # 0.29, 3.6, 58 MFLOP (the throughput conv above: 231)
LADDER_ADD = (1 << 14, 1 << 17)                        # 0.19, 1.6 MB moved (the throughput add above: 50 MB)
# transformer-shaped GEMMs, [tokens, width] x [width, width]: recorded, not yet used. Between the 16-vCPU Xeon and the
# 2-vCPU AVX-512 EPYC (2 threads, 37 fresh models) the 512^3 MatMul sped up 2.5x, but swin's and vit's Gemm nodes
# (width 96-384) 1.4-1.7x, and models rich in them were predicted 23-45% fast after calibration (session 28); whether
# GEMM speed follows these shapes is for both CPUs' profiles to say
LADDER_GEMM = ((64, 64), (576, 96), (2304, 96), (196, 384), (784, 192))   # 0.5, 10.6, 42, 58, 58 MFLOP a node
LADDER_N = 4


def ladder_model(kind: str, size) -> tuple:
    """(ONNX bytes, feed shape, work: MFLOP for conv and gemm, MB read+written for add) of a LADDER_N-node chain."""
    names = ["x"] + [f"t{i}" for i in range(1, LADDER_N)] + ["y"]
    if kind == "conv":
        c, hw = size
        shape = [1, c, hw, hw]
        init = numpy_helper.from_array(np.random.default_rng(0).standard_normal((c, c, 3, 3)).astype(np.float32)
                                       * (0.3 / (3 * c ** 0.5)), "w")
        nodes = [helper.make_node("Conv", [names[i], "w"], [names[i + 1]], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
                 for i in range(LADDER_N)]
        work = 2 * c * c * 9 * hw * hw / 1e6
    elif kind == "gemm":
        m, k = size
        shape = [m, k]
        init = numpy_helper.from_array(np.random.default_rng(0).standard_normal((k, k)).astype(np.float32)
                                       / k ** 0.5, "w")
        nodes = [helper.make_node("MatMul", [names[i], "w"], [names[i + 1]]) for i in range(LADDER_N)]
        work = 2 * m * k * k / 1e6
    else:
        shape = [1, int(size)]
        init = numpy_helper.from_array(np.full(shape, 0.5, np.float32), "w")
        nodes = [helper.make_node("Add", [names[i], "w"], [names[i + 1]]) for i in range(LADDER_N)]
        work = 3 * 4 * int(size) / 1e6
    graph = helper.make_graph(nodes, f"calib_ladder_{kind}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=[init])
    return model_bytes(graph), shape, work


def geomean(values) -> float:
    v = [x for x in values if x > 0 and math.isfinite(x)]
    return float(math.exp(sum(map(math.log, v)) / len(v))) if v else math.nan


def host_index(host_us_per_node: dict) -> float:
    """The one number a prediction scales host dispatch by: the geometric mean of the launching chains."""
    return geomean(host_us_per_node[k] for k in LAUNCHING)


def host_columns(host_us_per_node: dict, index_us: float, prefix: str = "calib_") -> dict:
    """Flat columns of the chains' per-node times and their index (trace_run's rows, the agent's gauges)."""
    return {**{f"{prefix}{k}_us": v for k, v in host_us_per_node.items()}, f"{prefix}host_index_us": index_us}


def host_layout() -> dict:
    """Where this process runs on the host: what moves host speed between processes (issue 23 item 4)."""
    out = {"affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()}
    nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
    out["numa_nodes"] = len(nodes) or 1
    try:  # field 39 of /proc/self/stat: the CPU this thread last ran on
        out["current_cpu"] = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        out["current_cpu"] = -1
    gov = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    out["cpufreq_governor"] = gov.read_text().strip() if gov.exists() else ""
    try:
        out["loadavg_1m"] = os.getloadavg()[0]
    except OSError:
        out["loadavg_1m"] = math.nan
    return out


def current_cpu() -> int:
    """The CPU this thread last ran on (field 39 of /proc/thread-self/stat); -1 where it cannot be read."""
    try:
        return int(Path("/proc/thread-self/stat").read_text().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        return -1


def cpu_times() -> tuple:
    """(steal, total) jiffies of the whole host from /proc/stat; (0, 0) where it cannot be read. On a VM, steal is the
    time the hypervisor ran something else on this VM's vCPUs: a neighbour on the physical host."""
    try:
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return (f[7] if len(f) > 7 else 0), sum(f[:8])


def steal_pct(before: tuple, after: tuple) -> float:
    """Share of the host's CPU time stolen by the hypervisor between two cpu_times() readings (%); nan if none."""
    total = after[1] - before[1]
    return 100.0 * (after[0] - before[0]) / total if total > 0 else math.nan


@dataclasses.dataclass
class Calibration:
    device: str
    host_us_per_node: dict            # chain -> median run time / nodes (us)
    host_index_us: float              # geometric mean over the launching chains (us per node)
    copy_gbps: dict = dataclasses.field(default_factory=dict)      # 'h2d_1MiB' -> GB/s (CUDA)
    compute: dict = dataclasses.field(default_factory=dict)        # CPU EP: 'conv_gflops', 'matmul_gflops', 'add_gbps', 'conv_lowreuse_gflops'
    ladder: dict = dataclasses.field(default_factory=dict)         # CPU EP: {'conv'|'gemm': [[MFLOP, us/node]], 'add': [[MB, us/node]]}
    sm_clock_mhz: float = math.nan
    threads: int = 0
    took_s: float = 0.0
    layout: dict = dataclasses.field(default_factory=dict)
    provenance: dict = dataclasses.field(default_factory=dict)
    time_unix: float = 0.0
    # session.run of a one-node model, numpy in and out (us): the fixed cost every run pays, in this process; the
    # timelines' c0 comes from profiled processes and over-predicts tiny models (docs/method.md, session 24)
    run_fixed_us: float = math.nan

    def to_dict(self) -> dict:
        """JSON-safe: a value not measured (NaN) is null."""
        def clean(v):
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            return None if isinstance(v, float) and not math.isfinite(v) else v
        return clean({"schema": SCHEMA, **dataclasses.asdict(self)})

    def columns(self, prefix: str = "calib_") -> dict:
        """Flat columns: host chains, their index, copies and compute."""
        row = host_columns(self.host_us_per_node, self.host_index_us, prefix)
        row.update({f"{prefix}{k}": v for k, v in {**self.copy_gbps, **self.compute}.items()})
        if isinstance(self.run_fixed_us, (int, float)) and math.isfinite(self.run_fixed_us):
            row[f"{prefix}run_fixed_us"] = self.run_fixed_us
        return row


def from_dict(d: dict, source="calibration profile") -> Calibration:
    """A profile read back; HaseError naming the field when it is not one."""
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise HaseError(f"not a calibration profile of schema {SCHEMA} (field 'schema')", source)
    names = {f.name for f in dataclasses.fields(Calibration)}
    try:
        cal = Calibration(**{k: v for k, v in d.items() if k in names})
    except TypeError as e:
        raise HaseError(f"missing field: {e}", source)
    if not (isinstance(cal.host_index_us, (int, float)) and cal.host_index_us > 0):
        raise HaseError(f"field 'host_index_us' must be a positive number, not {cal.host_index_us!r}", source)
    return cal


def load_profile(path) -> Calibration:
    return from_dict(paths.read_json(Path(path), "calibration profile"), path)


class Calibrator:
    """Small sessions kept open so a measurement can repeat at ~10 ms per chain."""

    def __init__(self, device: str = "cpu", device_id: int = 0, threads: int = 0, warmup: int = 20):
        self.device, self.device_id, self.threads = device, device_id, threads
        self.chains = {}
        for kind in (*LAUNCHING, "reshape"):
            blob, shape = chain_model(kind)
            sess = make_session(blob, device, "disable", threads=threads, device_id=device_id)
            run = make_runner(sess, {"x": np.ones(shape, np.float32)}, "device", device_id)
            for _ in range(warmup):
                run()
            self.chains[kind] = (sess, run)
        self._copy_runs = {}   # run_copies' small sessions, made at its first call
        self._probe = None     # compute_probe's matmul session, made at its first call

    # On a small VM the intra-op threads do not always get a core each: on the project's 2-vCPU EPYC a 2-thread
    # MatMul ran 600-700 us for runs of tens of seconds and 1,190-1,490 us (its 1-thread time) for others, within
    # one process (session 38, 242 reads over 3 minutes). ORT's node times of a model swing with it (the same Gemm
    # shape 2.2-3.9x apart between models measured minutes apart), so trace_run times this probe just before and
    # just after each CPU session: the compute speed the session really had.
    def compute_probe(self, budget_ms: float = 15.0) -> float:
        """GFLOP/s of a 512^3 MatMul (268 MFLOP) at this calibrator's thread count, its session kept open."""
        if self.device != "cpu":
            return math.nan
        if self._probe is None:
            blob, shape, work = compute_model("matmul")
            x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            run = make_runner(make_session(blob, "cpu", "all", threads=self.threads), {"x": x}, "e2e")
            # 100 ms untimed first: on 2-vCPU VMs a fresh process's first 15 ms read 0.4-0.5x the speed a moment
            # later (the probe before / after of 23 committed profiles: median 0.41-0.49, 75-93% of them then
            # warned that the speed moved; with 100 ms: 0.97-1.0, session 46)
            time_loop(run, None, 100.0, 3, 100000)
            self._probe = (run, work)
        run, work = self._probe
        return work / (time_loop(run, None, budget_ms, 5, 1000)["median_ms"] / 1e3) / 1e9

    def host(self, budget_ms: float = 40.0) -> dict:
        """Per-node host time of each chain (us): the median of runs over budget_ms per chain."""
        out = {}
        for kind, (_, run) in self.chains.items():
            r = time_loop(run, None, budget_ms, 10, 20000)
            out[kind] = r["median_ms"] * 1e3 / CHAIN_N
        return out

    def copies(self) -> dict:
        if self.device != "cuda":
            return {}
        import onnxruntime as ort
        out = {}
        for nbytes in COPY_BYTES:
            a = np.ones(nbytes // 4, np.float32)
            tag = size_tag(nbytes)
            h2d, d2h = [], []
            for _ in range(5 if nbytes >= 1 << 24 else 20):
                t = time.perf_counter()
                ov = ort.OrtValue.ortvalue_from_numpy(a, "cuda", self.device_id)
                h2d.append(time.perf_counter() - t)
                t = time.perf_counter()
                ov.numpy()
                d2h.append(time.perf_counter() - t)
            out[f"h2d_{tag}_gbps"] = nbytes / float(np.median(h2d)) / 1e9
            out[f"d2h_{tag}_gbps"] = nbytes / float(np.median(d2h)) / 1e9
        return out

    def run_copies(self, budget_ms: float = 10.0, sizes=RUN_COPY_BYTES, keep: bool = True) -> dict:
        """GB/s of the pageable copies session.run itself makes (run_copy_model), per direction and size: the median
        run over budget_ms, less the same model's run at 4 KiB (ORT's per-run cost and the one kernel). The small
        sessions are made once and kept (keep=False: released after), so a repeat costs ~6 x budget_ms. CUDA only."""
        if self.device != "cuda":
            return {}
        if not self._copy_runs:
            for direction in ("h2d", "d2h"):
                for nbytes in (4096, *sizes):
                    blob, shape = run_copy_model(direction, nbytes)
                    sess = make_session(blob, self.device, threads=self.threads, device_id=self.device_id)
                    run = make_runner(sess, {"x": np.ones(shape, np.float32)}, "e2e", self.device_id)
                    for _ in range(3):
                        run()
                    self._copy_runs[(direction, nbytes)] = (sess, run)
        ms = {k: time_loop(run, None, budget_ms, 5, 5000)["median_ms"] for k, (_, run) in self._copy_runs.items()}
        if not keep:
            self._copy_runs = {}
        out = {}
        for (direction, nbytes), t in ms.items():
            if nbytes == 4096:
                continue
            tag = size_tag(nbytes)
            out[f"run_{direction}_{tag}_gbps"] = nbytes / max((t - ms[(direction, 4096)]) * 1e-3, 1e-9) / 1e9
        return out

    def _cpu_median_ms(self, blob: bytes, x, warmup: int, budget_ms: float, max_loops: int) -> float:
        """Median session.run (ms) of a one-input model on the CPU EP at this calibrator's thread count."""
        run = make_runner(make_session(blob, "cpu", "all", threads=self.threads), {"x": x}, "e2e")
        for _ in range(warmup):
            run()
        return time_loop(run, None, budget_ms, 5, max_loops)["median_ms"]

    def compute(self, budget_ms: float = 200.0) -> dict:
        if self.device != "cpu":
            return {}
        out = {}
        for kind in ("conv", "matmul", "add", "conv_lowreuse"):
            blob, shape, work = compute_model(kind)
            x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            sec = self._cpu_median_ms(blob, x, 3, budget_ms, 10000) / 1e3
            key = "add_gbps" if kind == "add" else f"{kind}_gflops"
            out[key] = work / sec / 1e9
        return out

    def run_fixed(self, budget_ms: float = 40.0) -> float:
        """Median session.run (us) of a one-node model (Relu on 16 floats), numpy in and out, on this device."""
        if getattr(self, "_fixed", None) is None:
            x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])
            y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])
            blob = model_bytes(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "calib_fixed", [x], [y]))
            sess = make_session(blob, self.device, "all", threads=self.threads, device_id=self.device_id)
            run = make_runner(sess, {"x": np.ones((1, 16), np.float32)}, "e2e", self.device_id)
            for _ in range(20):
                run()
            self._fixed = (sess, run)
        return time_loop(self._fixed[1], None, budget_ms, 10, 20000)["median_ms"] * 1e3

    def ladder(self, budget_ms: float = 40.0) -> dict:
        """Per-node time (us) of chains of small and mid-size convs and Adds at the session's thread count."""
        if self.device != "cpu":
            return {}
        out = {}
        for kind, sizes in (("conv", LADDER_CONV), ("add", LADDER_ADD), ("gemm", LADDER_GEMM)):
            pts = []
            for size in sizes:
                blob, shape, work = ladder_model(kind, size)
                ms = self._cpu_median_ms(blob, np.ones(shape, np.float32), 5, budget_ms, 20000)
                pts.append([work, ms * 1e3 / LADDER_N])
            out[kind] = pts
        return out

    def calibrate(self, budget_ms: float = 40.0, run_copy_budget_ms: float = 0.0, warn: bool = True) -> Calibration:
        """run_copy_budget_ms > 0 (CUDA): also session.run's own copy rates (run_*_gbps in copy_gbps), sessions released.
        warn: log when the CPU compute speed moved during the pass (probe_moved); a caller that retakes it says so."""
        t0 = time.perf_counter()
        probe0 = self.compute_probe() if self.device == "cpu" else math.nan
        host = self.host(budget_ms)
        copies = self.copies()
        if run_copy_budget_ms > 0:
            copies.update(self.run_copies(run_copy_budget_ms, keep=False))
        cal = Calibration(device=self.device, host_us_per_node=host,
                          host_index_us=host_index(host), copy_gbps=copies,
                          compute=self.compute(5 * budget_ms), ladder=self.ladder(budget_ms), threads=self.threads,
                          layout=host_layout(),
                          provenance=provenance(self.device, self.device_id), time_unix=time.time(),
                          run_fixed_us=self.run_fixed(budget_ms))
        if self.device == "cuda":
            from hase.benchmark.trace_run import sm_clock_mhz
            cal.sm_clock_mhz = sm_clock_mhz(self.device_id)
        else:   # the compute speed before and after: a VM whose threads shared a core meanwhile is named
            probe1 = self.compute_probe()
            cal.compute.update(probe_matmul_gflops_before=probe0, probe_matmul_gflops_after=probe1)
            if warn and probe_moved(cal.compute):
                get_logger("benchmark").warning(
                    "compute speed moved during the calibration (a MatMul at the session's threads read %.0f, then %.0f "
                    "GFLOP/s): this machine's intra-op threads share cores at times; calibrate again", probe0, probe1)
        cal.took_s = time.perf_counter() - t0
        return cal


def probe_moved(compute: dict, frac: float = 0.75) -> bool:
    """True when the CPU compute probe before and after a calibration pass differ by more than `frac` (the slower
    below frac x the faster): the VM's intra-op threads changed state meanwhile, so its rates are of two states."""
    a, b = (compute or {}).get("probe_matmul_gflops_before"), (compute or {}).get("probe_matmul_gflops_after")
    if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in (a, b)):
        return False
    return min(a, b) < frac * max(a, b)


def calibrate(device: str = "auto", device_id: int = 0, threads: int = 0, budget_ms: float = 40.0,
              warmup: int = 20, run_copy_budget_ms: float = 0.0) -> Calibration:
    """One full calibration of this process on a resolved device."""
    dev = resolve_device(device, device_id)
    return Calibrator(dev, device_id, threads, warmup).calibrate(budget_ms, run_copy_budget_ms)


def main() -> int:
    p = base_parser("Calibrate this process's host dispatch, copies and (CPU EP) compute", "benchmark")
    p.set_defaults(config=CONFIG)
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("host_calibration", args.log_level)
    if float(cfg["budget_ms"]) <= 0:
        raise HaseError(f"config budget_ms: must be > 0, not {cfg['budget_ms']}")
    t0 = time.perf_counter()
    cal = calibrate(cfg["device"], int(cfg["device_id"]), int(cfg["threads"]), float(cfg["budget_ms"]),
                    int(cfg["warmup"]), float(cfg["run_copy_budget_ms"]))
    cal.took_s = time.perf_counter() - t0       # session creation included
    d = cal.to_dict()
    log.info("%s: host %.2f us/node (%s), %s in %.1f s", cal.device, cal.host_index_us,
             " ".join(f"{k} {v:.2f}" for k, v in cal.host_us_per_node.items()),
             " ".join(f"{k} {v:.1f}" for k, v in {**cal.copy_gbps, **cal.compute}.items()), cal.took_s)
    if cfg["out"] and cfg["key"]:  # one entry of a {process: profile} file (trace_run's calibration.json)
        out = Path(cfg["out"])
        try:
            have = json.loads(out.read_text()) if out.exists() else {}
        except ValueError as ex:
            raise HaseError(f"not JSON ({ex})", out) from ex
        if not isinstance(have, dict):
            raise HaseError("not a {process: profile} JSON object", out)
        paths.atomic_write_text(out, json.dumps({**have, str(cfg["key"]): d}, indent=1))
        log.info("wrote %s [%s]", out, cfg["key"])
    elif cfg["out"]:
        paths.atomic_write_text(Path(cfg["out"]), json.dumps(d, indent=1))
        log.info("wrote %s", cfg["out"])
    else:
        print(json.dumps(d, indent=1))
    return 0


if __name__ == "__main__":
    run_main(main)
