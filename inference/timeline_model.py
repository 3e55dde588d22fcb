"""Whole-model session.run latency as ORT really runs it, under a neighbour's load (phases 6.2 + 7).

Idle (seeds 000/001, CUDA EP): the host walks the kernels in order, paying a dispatch cost h_i per
node; the one CUDA stream runs each kernel (GPU time g_i) once it is launched and the previous one
is done. session.run = C0 + H2D(inputs) + timeline + D2H(outputs):

    host_end_i  = host_end_{i-1} + kappa * h_i
    gpu_start_i = max(host_end_i (+ wait if the stream was idle), gpu_end_{i-1})
    gpu_end_i   = gpu_start_i + g_i'

  h_i    host cost per ORT op type, the median ORT-profiler `_kernel_time` of that op at idle in the
         phase 4 node_times.csv (falls back to the kernel category's median, then the global one);
         kappa rescales it because profiling itself inflates host time.
  g_i    the phase 5 regressor's (or the lookup table's) device-mode time of the standalone kernel at
         idle load, minus the fixed cost every standalone IOBinding run pays (overhead_us: fitted,
         starting from the 5th percentile of idle device-mode kernel times, what a kernel that does
         nothing costs), never below `gpu_floor_frac` of the standalone time.
  copies the transfer model (benchmark/bandwidth.py): a*bytes + b per direction. With measured terms
         (fit_measured_timeline.copy_terms, `copies_measured`): the input copy's rate depends on the wait before
         it, which in back-to-back runs is the previous run's span S. Per byte it is
         1/bw_fast + (1/bw_slow - 1/bw_fast) * (1 - exp(-S / tau)), measured on the H200 machines at 20.5 and
         8.0 GB/s with tau 3.9 ms. C0 also gains a per-node term (ORT's per-run bookkeeping).

Under load, without MPS the GPU time-slices between processes. From the background metrics the
predictor sees before the job starts (never the job's own activity):

    u = bg DCGM_FI_PROF_GR_ENGINE_ACTIVE (neighbour busy 0-1), clock = idle SM clock / bg SM clock
    g_i'  = g_i * clock**clock_exp * (1 + alpha * u)   # our GPU work shares the engine
    wait  = beta_us * u          # a kernel launched onto an idle stream first waits for the
                                 # neighbour's running kernel (dispatch-bound models pay it often)
    wait  = HASE_LAUNCH_WAIT_US  # instead, when the node agent's launch-wait probe measured it
                                 # (inference/node_agent.py); on CPU EP it is added per kernel

Run-level time slicing (model["interference"] == "run_share", the model with measured terms; measured in
benchmark/results/nvidia-h200/interference/): the GPU does not interleave two processes' kernels, it hands the
whole engine to one context for a time slice, and a context keeps it across its own stream's short idle gaps. So
the neighbour costs a run time in proportion to the run's GPU span S (first launch to last kernel end, host gaps
included), not to its GPU busy time, and not per launch (a per-launch wait of 16-launch probe / 16 predicted
resnet18 bs1 next to a training job 3x too slow):

    run = idle timeline + max(W_run, alpha * u * S * (1 + gamma * m)) + G * (clock_ratio**clock_exp - 1)
    W_run = the probe's whole-run wait (HASE_LAUNCH_WAIT_US * its 16 launches): what a short run pays to get the
            GPU back from the neighbour. A run waits for the GPU once or shares it over its span, whichever is
            longer: next to a training job that never idles (W_run ~ 2 ms, one time slice) a 0.8 ms run pays
            W_run; a 16 ms run pays alpha*u*S.
    alpha  fair-share time slicing gives 1 (the run gets the GPU 1/(1+u) of the time it wants it)
    gamma  m = bg DCGM_FI_PROF_DRAM_ACTIVE / u: a memory-streaming neighbour (m ~ 0.9) costs more per slice than a
           compute one (m ~ 0.03) at equal u: it evicts the L2 our kernels had warm (fit_interference.py fits
           gamma on the compute vs memory training neighbours; 0 in models fitted before it)
Under a part-time neighbour runs are bimodal (a run is hit or not): the mixture with hit probability u gives
the p10/p90 (with_spread).

Fitted (a few physical constants, not a lookup), on the training architectures only: C0, kappa and
overhead_us at idle in IOBinding mode; copy_scale at idle in session.run mode (it maps the copy microbenchmark
to session.run's own copies); alpha and beta on the training loads (the plan's stressor levels).
clock_exp stays 0 unless the training loads move the clock. The fit is judged on neighbours and
models it never saw (evaluator.py).
"""
import itertools
import json
import math
from pathlib import Path


import numpy as np  # noqa: E402

from hase.benchmark.bandwidth import transfer_ms  # noqa: E402
from hase.benchmark.launch_probe import N_LAUNCHES as PROBE_LAUNCHES  # noqa: E402  launches in one probe run
from hase.graph_model.dag_critical_path import io_bytes  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

FORMAT = "hase.timeline_model/1"
BUSY, CLOCK = "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_SM_CLOCK"
DRAM = "DCGM_FI_PROF_DRAM_ACTIVE"
CPU_BUSY = "CPU_UTIL_PCT"
WAIT = "HASE_LAUNCH_WAIT_US"  # measured wait per launch onto an idle stream (us, >= 0)
CPU_EP = "CPUExecutionProvider"
LAUNCH = "launch_interval"
RUN_SHARE = "run_share"  # model["interference"]: run-level time slicing (else the per-launch wait)
  # host_semantics of a host table measured from CUDA launch intervals
DEFAULT_PARAMS = {"c0_us": 0.0, "kappa": 1.0, "overhead_us": 0.0, "copy_scale": 1.0, "alpha": 0.0, "beta_us": 0.0,
                  "clock_exp": 0.0, "gamma": 0.0}
INITIAL = {"c0_us": 50.0, "kappa": 1.0, "overhead_us": 20.0, "copy_scale": 1.0, "alpha": 0.5, "beta_us": 20.0,
           "clock_exp": 0.5, "gamma": 0.0}  # where a fit starts
SCALE = {"c0_us": 100.0, "kappa": 1.0, "overhead_us": 10.0, "copy_scale": 1.0, "alpha": 1.0, "beta_us": 100.0,
         "clock_exp": 1.0, "gamma": 1.0}
# Physical range of each fitted constant; a fit that ends on a bound is reported (at_bounds), not trusted.
#   c0_us        session.run's fixed cost: never negative; 10 ms would be a broken session
#   kappa        unprofiled / profiled host cost: profiling inflates it (< 1); 0 on CPU EP, where the
#                profiled node time is the compute the kernel times already hold; > 2 is not dispatch
#   overhead_us  what a standalone run of an empty kernel costs: >= 0, well under 1 ms
#   copy_scale   session.run's copies / the copy microbenchmark's (pageable vs pinned: a few x, not 10x)
#   alpha        stretch at a fully busy neighbour: fair-share time slicing gives ~1; 10 is no longer slicing
#   beta_us      wait per launch onto an idle stream: >= 0, at most a few time slices (the probe: <= 110 us)
#   clock_exp    time ~ clock^-clock_exp: 0 memory-bound, 1 compute-bound
#   gamma        extra share behind a memory-streaming neighbour (its DRAM/engine activity m = 1): the caches our
#                kernels left warm are evicted at every slice switch; 0 = none, 5 = six times a compute one's
LOWER = {"c0_us": 0.0, "kappa": 0.0, "overhead_us": 0.0, "copy_scale": 0.2, "alpha": 0.0, "beta_us": 0.0,
         "clock_exp": 0.0, "gamma": 0.0}
UPPER = {"c0_us": 1e4, "kappa": 2.0, "overhead_us": 1e3, "copy_scale": 5.0, "alpha": 10.0, "beta_us": 5e3,
         "clock_exp": 1.0, "gamma": 5.0}


# ---- inputs of the timeline ------------------------------------------------------------------
def host_table(node_times, records: dict, stress_col: str = "stress_level") -> dict:
    """Host cost per op type (us) from idle ORT-profiler node times of the given models.

    node_times: DataFrame with model, stress_level, node_name, op_name, kernel_time_us.
    records: {model: record} used to attach each node's kernel category (for the fallback)."""
    df = node_times[(node_times[stress_col] == 0) & node_times["model"].isin(list(records))]
    if df.empty:
        raise HaseError("no idle node times for the training models (node_times.csv at stress_level 0)")
    per_node = df.groupby(["model", "node_name", "op_name"], as_index=False)["kernel_time_us"].median()
    cat = {(m, k["node_name"]): k.get("category", "other") for m, r in records.items() for k in r["kernels"]}
    per_node["category"] = [cat.get((m, n), "other") for m, n in zip(per_node["model"], per_node["node_name"])]
    return {"by_op_us": {k: float(v) for k, v in per_node.groupby("op_name")["kernel_time_us"].median().items()},
            "by_category_us": {k: float(v) for k, v in per_node.groupby("category")["kernel_time_us"].median().items()},
            "default_us": float(per_node["kernel_time_us"].median()), "n_nodes": int(len(per_node))}


def host_us(record: dict, table: dict, gpu_us=None) -> np.ndarray:
    """Host cost per kernel (us): the op type's (else category's, else global) median; with measured
    lines (`by_key_line`, launch intervals) a + b * the kernel's GPU time for its class: cuDNN picks
    multi-kernel algorithms for the bigger convs, and each launch costs the host."""
    by_op, by_cat, d = table["by_op_us"], table["by_category_us"], table["default_us"]
    base = np.array([by_op.get(k["op_type"], by_cat.get(k.get("category"), d)) for k in record["kernels"]])
    lines = table.get("by_key_line")
    if lines and gpu_us is not None:
        for i, k in enumerate(record["kernels"]):
            ab = lines.get(gpu_key(k))
            if ab:
                base[i] = ab[0] + ab[1] * gpu_us[i]
    return base


def gpu_key(kernel: dict) -> str:
    """The GPU-time class of a kernel: its op type, with Conv split by what changes cuDNN's kernels."""
    if kernel.get("op_type") != "Conv":
        return kernel.get("op_type", "")
    a = kernel.get("attributes") or {}
    if (a.get("group") or 1) > 1:
        w = (kernel.get("weight_shapes") or [[]])[0]
        # depthwise (one input channel per group): memory-bound, 2 launches on the H200; grouped convs with wider
        # groups (ResNeXt, RegNet) ran as 4-6 launches each, with 3x the host cost
        return "Conv/depthwise" if len(w) > 1 and w[1] == 1 else "Conv/grouped"
    return "Conv/1x1" if list(a.get("kernel_shape") or []) == [1, 1] else "Conv"


def cpu_key(kernel: dict) -> str:
    """The CPU EP class of a kernel (a node's compute on MLAS): its fused type (Conv_Add_Relu: the epilogue
    reads another tensor), NCHWc or not, Conv split into 1x1 and grouped as on the GPU."""
    t = kernel.get("type") or kernel.get("op_type", "")
    if (kernel.get("domain") or "").endswith("nchwc"):
        t += "+nchwc"
    if kernel.get("op_type") not in ("Conv", "FusedConv"):
        return t
    a = kernel.get("attributes") or {}
    if (a.get("group") or 1) > 1:
        return t + "/grouped"
    return t + "/1x1" if list(a.get("kernel_shape") or []) == [1, 1] else t


KEYS = {"gpu": gpu_key, "cpu": cpu_key}   # a time table's `key`: which class each kernel's line is looked up by


def table_key(table: dict):
    return KEYS[table.get("key", "gpu")]


def gpu_table_fallbacks(record: dict, table: dict) -> np.ndarray:
    """True per kernel whose class has no line of its own (its category's or the global line is used)."""
    key = table_key(table)
    return np.array([key(k) not in table["by_key"] for k in record["kernels"]])


def gpu_table_us(record: dict, table: dict) -> np.ndarray:
    """GPU time per kernel (us) from the CUPTI-measured table: a_us + us_per_gflop * GFLOP + us_per_mb * MB
    of the kernel's class, else its category's, else the global line."""
    out, key = [], table_key(table)
    ws = table.get("work_scale") or {}   # CPU lines scaled to another thread count/CPU: per node size (cpu_scales)
    for k in record["kernels"]:
        c = table["by_key"].get(key(k)) or table["by_category"].get(k.get("category")) or table["default"]
        mb = ((k.get("bytes_read") or 0) + (k.get("bytes_written") or 0)) / 1e6
        g = (k.get("flops") or 0) / 1e9
        out.append(c[0] + c[1] * g * _log_interp(ws.get("flop"), g) + c[2] * mb * _log_interp(ws.get("mb"), mb))
    return np.array(out, float)


def _log_interp(points, x: float) -> float:
    """Multiplier at work x from [[work, m]] (log-linear between points, the end values beyond them); 1 without."""
    if not points or x <= 0:
        return 1.0
    xs, ys = np.log([p[0] for p in points]), [p[1] for p in points]
    return float(np.interp(math.log(x), xs, ys))


def standalone_us(record: dict, kernel_ms: dict) -> np.ndarray:
    """Standalone device-mode (IOBinding) time per kernel in us, from predictions in ms by kernel id."""
    return np.array([float(kernel_ms[k["id"]]) * 1e3 for k in record["kernels"]])


def gpu_idle_us(prep: dict, p: dict) -> np.ndarray:
    """GPU time per kernel at idle: the standalone time minus what a standalone run of a kernel that
    does nothing costs (overhead_us), never below `floor` of the standalone time."""
    return np.maximum(prep["dev"] - p["overhead_us"],
                      np.maximum(prep["floor"] * prep["dev"], prep.get("floor_us", 0.0))) * prep.get("gpu_scale", 1.0)


def copy_us(table, direction: str, nbytes_: float) -> float:
    return 0.0 if table is None else transfer_ms(table, direction, nbytes_) * 1e3


LOAD_PARAMS = ("alpha", "beta_us", "gamma", "clock_exp")


def has_load_terms(model: dict) -> bool:
    """Whether a timeline model has interference terms at all: a run-level model, or any per-launch load constant
    fitted away from 0. A model without them (the committed Xeon CPU timeline, a GPU fitted at idle only) predicts
    the idle timeline whatever the load; the prediction must say so (issue 24), never apply nothing silently."""
    if not model:
        return False
    if model.get("interference") == RUN_SHARE:
        return True
    return any(float((model.get("params") or {}).get(k) or 0.0) != 0.0 for k in LOAD_PARAMS)


def load_terms(load: dict, idle_clock_mhz: float) -> dict:
    """(u, clock ratio, measured wait per launch or None) from background metrics, keys with or
    without the bg_ prefix."""
    def get(f, default):
        for k in ("bg_" + f, f):
            v = load.get(k)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                return float(v)
        return default
    if ("bg_" + BUSY) in load or BUSY in load:
        u = get(BUSY, 0.0)
    else:  # CPU EP: the neighbour's CPU utilisation is its busy fraction
        u = get(CPU_BUSY, 0.0) / 100.0
    clk = get(CLOCK, idle_clock_mhz) if idle_clock_mhz else 0.0
    ratio = idle_clock_mhz / clk if idle_clock_mhz and clk > 0 else 1.0
    wait = get(WAIT, None)
    # how memory-bound the neighbour is: its DRAM activity per unit of engine activity (0 compute, ~0.9 streaming)
    mem = min(max(get(DRAM, 0.0) / u, 0.0), 1.0) if u > 0.01 else 0.0
    return {"u": min(max(u, 0.0), 1.0), "clock_ratio": max(ratio, 1.0),
            "wait_us": None if wait is None else max(wait, 0.0), "mem": mem}


# ---- the timeline ----------------------------------------------------------------------------
def prepared(record: dict, kernel_ms: dict, model: dict, node_host_us=None) -> dict:
    """Everything about one analysed model that does not depend on the load (cache it). node_host_us: the host
    dispatch per kernel where a node model predicts it (inference/node_model.py), else the host table's."""
    in_b, out_b = io_bytes(record.get("graph_inputs")), io_bytes(record.get("graph_outputs"))
    bw = model.get("bandwidth")
    cm = model.get("copies_measured")  # us per byte of session.run's own copies, from measured timelines
    h2d = in_b * cm["h2d_us_per_byte"] if cm else copy_us(bw, "h2d", in_b)
    d2h = out_b * cm["d2h_us_per_byte"] if cm else copy_us(bw, "d2h", out_b)
    h2d_wait = None   # the input copy slows with the wait before it (fit_measured_timeline.copy_terms)
    if cm and cm.get("h2d_slow_us_per_byte") is not None:
        h2d_wait = {"extra_us": in_b * max(cm["h2d_slow_us_per_byte"] - cm["h2d_us_per_byte"], 0.0),
                    "tau_us": float(cm["h2d_wait_tau_us"])}
    # GPU time: the CUPTI table where the model has one (overhead 0), else the standalone kernel times
    dev = gpu_table_us(record, model["gpu_table"]) if model.get("gpu_table") else standalone_us(record, kernel_ms)
    h = (np.asarray(node_host_us, float) if node_host_us is not None
         else host_us(record, model["host_table"], dev if model["host_table"].get("by_key_line") else None))
    return {"h": h,
            "launch_at_start": model.get("host_semantics") == LAUNCH, "dev": dev,
            "floor": float(model["gpu_floor_frac"]), "floor_us": float(model.get("gpu_floor_us", 0.0)),
            "on_host": np.array([k.get("ep") == CPU_EP for k in record["kernels"]]),
            "sync": np.array([k.get("op_type") == "MemcpyToHost" for k in record["kernels"]]),
            "h2d_us": h2d, "d2h_us": d2h, "h2d_wait": h2d_wait,
            # session.run's per-run cost that grows with the graph (ORT's execution frame, before and after Execute)
            "fixed_us": len(record["kernels"]) * float((cm or {}).get("us_per_node", 0.0)),
            "device": record.get("device", "cuda"), "n": len(record["kernels"]),
            "interference": model.get("interference", "per_launch")}


def h2d_after_wait_us(prep: dict, wait_us: float) -> float:
    """The input copy (us) of a run that follows `wait_us` of waiting for the GPU (the previous run's span,
    back to back): pageable copies ran at 20 GB/s after short runs and 8 GB/s after runs of several ms
    (measured, H200 machines: fit_measured_timeline.copy_terms); without that measurement, the fixed rate."""
    w = prep.get("h2d_wait")
    extra = w["extra_us"] * (1.0 - math.exp(-max(wait_us, 0.0) / w["tau_us"])) if w else 0.0
    return prep["h2d_us"] + extra


def timeline_us(prep: dict, p: dict, terms: dict, copies: bool = True) -> dict:
    """Predicted session.run (us) of one prepared model under one load; pure.
    copies=False: inputs and outputs already on the device (IOBinding, the 'device' mode)."""
    h = prep["h"] * p["kappa"]
    copy = p["copy_scale"] if copies else 0.0
    d2h = prep["d2h_us"] * copy
    fixed = p["c0_us"] + prep.get("fixed_us", 0.0)
    if prep["device"] == "cpu":  # host and compute are one thread; the load slows both
        body = float(np.sum(h + gpu_idle_us(prep, p))) * (1.0 + p["alpha"] * terms["u"])
        waits = prep["n"] * (terms.get("wait_us") or 0.0)  # scheduling wait behind CPU neighbours, per kernel
        return {"total_us": fixed + body + waits, "host_first": 0, "gpu_us": 0.0, "wait_us": waits,
                "wait_per_launch_us": terms.get("wait_us") or 0.0, "h2d_us": 0.0, "d2h_us": 0.0}
    g = gpu_stretched(gpu_idle_us(prep, p), p, terms)
    wait = p["beta_us"] * terms["u"] if terms.get("wait_us") is None else terms["wait_us"]
    t_host = t_gpu = 0.0   # from the end of the input copy, which depends on this span (below)
    n_first = 0
    for i in range(prep["n"]):
        if prep["on_host"][i]:          # CPU-placed node in a CUDA session runs on the host
            t_host += h[i] + g[i]
            continue
        # h_i measured as launch intervals (first launch of node i -> of node i+1): node i launches at
        # the start of its interval; as ORT-profiled node times: at its end
        launch = t_host if prep.get("launch_at_start") else t_host + h[i]
        t_host += h[i]
        if launch >= t_gpu:              # the stream was idle: this launch starts it again
            t_gpu = launch + wait + g[i]
            n_first += 1
        else:
            t_gpu += g[i]
        if prep["sync"][i]:
            t_host = t_gpu
    span = max(t_host, t_gpu)
    h2d = h2d_after_wait_us(prep, span) * copy   # back to back: the previous run's span was this one
    return {"total_us": fixed + h2d + span + d2h, "host_first": n_first, "gpu_us": float(np.sum(g)),
            "wait_us": wait * n_first, "wait_per_launch_us": wait, "span_us": span, "interference_us": 0.0,
            "h2d_us": h2d, "d2h_us": d2h}


def run_share_us(prep: dict, p: dict, terms: dict, copies: bool = True) -> dict:
    """Timeline under load with run-level time slicing (module docstring): the idle timeline of the run plus
    max(W_run, alpha * u * S) plus the clock term on its GPU time; pure."""
    idle = timeline_us(prep, p, {"u": 0.0, "clock_ratio": 1.0, "wait_us": 0.0}, copies)
    if prep["device"] == "cpu":
        return timeline_us(prep, p, terms, copies)
    w_run = (terms.get("wait_us") or 0.0) * PROBE_LAUNCHES
    share = p["alpha"] * terms["u"] * idle["span_us"] * (1.0 + p.get("gamma", 0.0) * terms.get("mem", 0.0))
    clock = idle["gpu_us"] * (terms["clock_ratio"] ** p["clock_exp"] - 1.0)
    extra = max(w_run, share) + clock
    return dict(idle, total_us=idle["total_us"] + extra, interference_us=extra, wait_us=w_run if w_run >= share else 0.0,
                wait_per_launch_us=terms.get("wait_us") or 0.0, gpu_us=idle["gpu_us"] + clock, u=terms["u"])


def predict_us(prep: dict, p: dict, terms: dict, copies: bool = True) -> dict:
    """The model's own timeline under load: run-level slicing or the per-launch wait (prep['interference'])."""
    if prep.get("interference") == RUN_SHARE:
        return run_share_us(prep, p, terms, copies)
    return timeline_us(prep, p, terms, copies)


def with_options(prep: dict, model: dict, algo: str) -> dict:
    """The prepared model under a cudnn_conv_algo_search other than the one the kernel times were measured
    with: GPU time scaled by the measured ratio (benchmark/trace_run.py sessions with both searches)."""
    ratios = model.get("algo_gpu_ratio") or {}
    ref = model.get("algo", "EXHAUSTIVE")
    if algo == ref:
        return prep
    if algo not in ratios:
        raise HaseError(f"cudnn_conv_algo_search {algo} was not measured for this timeline model (have: "
                        f"{', '.join(sorted(ratios)) or ref}); DEFAULT ran some convs in cuDNN's fallback, "
                        f"5-90x slower")
    r = ratios[algo]
    if r.get("max", 1.0) > 3.0:  # DEFAULT: some models 5-90x, others not: a median would mislead
        raise HaseError(f"cudnn_conv_algo_search {algo} is not predictable: measured GPU time {r['ratio']:.2g}x "
                        f"(median) to {r['max']:.2g}x of {ref} on {r['models']} models")
    return dict(prep, gpu_scale=prep.get("gpu_scale", 1.0) * r["ratio"])


def with_spread(prep: dict, p: dict, terms: dict, spread, copies: bool = True, central=None) -> dict:
    """Central, p10 and p90 session.run (us): the timeline with the host dispatch and the copy terms at
    the measured per-session quantiles (host speed is what varies between fresh sessions). Without a
    measured spread p10 = p90 = central. central: predict_us()'s result for these terms when already run.
    Run-level slicing under a part-time neighbour: runs are a mixture, a share u of them hit by the
    neighbour (extra E / u each, mean extra E), the rest not; p10 is an unhit run unless u >= 0.9, p90 a hit
    one unless u <= 0.1."""
    run_share = prep.get("interference") == RUN_SHARE and prep["device"] != "cpu"
    central = central or predict_us(prep, p, terms, copies)
    central_us = central["total_us"]
    out = {"central": central_us, "p10": central_us, "p90": central_us}
    if prep["device"] == "cpu" and spread and "session_us" in spread:  # CPU EP (fit_cpu_timeline.py): the whole
        lo, hi = spread["session_us"]   # run's per-session quantiles over its model's median; one thread does all
        rq = spread.get("residual_log_q") or [0.0, 0.0]   # and the model's own error (cpu_band.py, fit_cpu_timeline)
        return {"central": central_us, "p10": central_us * min(lo, 1.0, math.exp(rq[0])),
                "p90": central_us * max(hi, 1.0, math.exp(rq[1]))}
    extra, u = (central["interference_us"], terms["u"]) if run_share else (0.0, 0.0)
    hit10 = extra if u >= 0.9 else 0.0
    hit90 = extra / u if u > 0.1 else extra
    if run_share:  # the mixture around the central host speed, also without a measured spread
        out["p10"], out["p90"] = central_us - extra + hit10, central_us - extra + hit90
    for tag, i in (("p10", 0), ("p90", 1)) if spread else ():
        f = spread["before_us"][i]
        w = prep.get("h2d_wait")
        q = dict(prep, h=prep["h"] * spread["host_sum_us"][i], h2d_us=prep["h2d_us"] * f,
                 h2d_wait=dict(w, extra_us=w["extra_us"] * f) if w else None)
        r = predict_us(q, p, terms, copies)
        out[tag] = r["total_us"] - r["interference_us"] + (hit10 if tag == "p10" else hit90) * (
            r["interference_us"] / extra if extra > 0 else 0.0)
    rq = (spread or {}).get("residual_log_q")
    if rq:  # the model's own error on unseen architectures (out-of-fold quantiles), beside the session spread
        out["p10"] = min(out["p10"], central_us * math.exp(rq[0]))
        out["p90"] = max(out["p90"], central_us * math.exp(rq[1]))
    out["p10"], out["p90"] = min(out["p10"], out["central"]), max(out["p90"], out["central"])
    return out


def gpu_stretched(g, p: dict, terms: dict):
    """GPU time under load: fair-share time slicing (alpha) and the neighbour's clock drop."""
    return g * terms["clock_ratio"] ** p["clock_exp"] * (1.0 + p["alpha"] * terms["u"])


def predict_ms(prep: dict, params: dict, load: dict, idle_clock_mhz: float, copies: bool = True) -> float:
    return predict_us(prep, params, load_terms(load, idle_clock_mhz), copies)["total_us"] / 1e3


# ---- fitting ---------------------------------------------------------------------------------
def fit_params(cases: list, idle_clock_mhz: float, free: tuple, start: dict, copies: bool = True) -> dict:
    """Least squares on relative error over cases [(prep, load, measured_ms)], only `free` params move."""
    from scipy.optimize import least_squares
    if not cases:
        raise HaseError("no cases to fit the timeline model on")
    terms = [load_terms(ld, idle_clock_mhz) for _, ld, _ in cases]

    def resid(x):
        p = dict(start)
        p.update({k: v * SCALE[k] for k, v in zip(free, x)})
        return np.array([predict_us(prep, p, t, copies)["total_us"] / 1e3 / y - 1.0
                         for (prep, _, y), t in zip(cases, terms)])
    lo = np.array([LOWER[k] / SCALE[k] for k in free])
    hi = np.array([UPPER[k] / SCALE[k] for k in free])
    # the max() in the timeline makes the cost piecewise: start from a small grid and keep the best.
    # (a start on the bound of 0 would freeze finite differences, whose step is relative to x)
    base = np.array([(start[k] or INITIAL[k]) / SCALE[k] for k in free])
    best = None
    for mult in itertools.product((0.2, 1.0, 5.0), repeat=len(free)):
        x0 = np.clip(base * np.array(mult), lo + 1e-6, hi - 1e-6)
        sol = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=0.1)
        if best is None or sol.cost < best.cost:
            best = sol
    sol = best
    out = dict(start)
    out.update({k: float(v * SCALE[k]) for k, v in zip(free, sol.x)})
    return out


def at_bounds(params: dict, free) -> list:
    """The fitted constants (of `free`) that ended on their LOWER/UPPER bound: the data pushed them
    out of their physical range, so the term they stand for is not what the data show."""
    out = []
    for k in free:
        tol = 1e-3 * SCALE[k]  # least_squares stops within its tolerance of a bound, not on it
        for side, limit in (("lower", LOWER[k]), ("upper", UPPER[k])):
            if abs(params[k] - limit) <= tol:
                out.append({"param": k, "value": float(params[k]), "bound": side, "limit": float(limit)})
    return out


# ---- persistence -----------------------------------------------------------------------------
def at_commit(commit: str, path: str) -> str:
    """The timeline model file `path` (repository-relative) as committed in `commit`: its folder unpacked by git
    archive into a temporary directory, with a predictor_dir inside that folder pointed at the unpacked copy. How a
    scorer judges the fit an exam or a machine panel was frozen against after a refit has replaced it."""
    import subprocess
    import tempfile
    folder = str(Path(path).parent)
    tmp = Path(tempfile.mkdtemp(prefix=f"hase_fit_{commit[:12]}_"))
    got = subprocess.run(f"git archive {commit} {folder} | tar -x -C {tmp}", shell=True, cwd=paths.REPO,
                         capture_output=True, text=True)
    out = tmp / path
    if got.returncode != 0 or not out.is_file():
        raise HaseError(f"timeline_commit: {commit} has no {path} (git archive: {got.stderr.strip()[:200] or 'empty'})")
    d = json.loads(out.read_text())
    pd_ = str(d.get("predictor_dir") or "")
    if pd_ and (pd_ == folder or pd_.startswith(folder + "/")):
        d["predictor_dir"] = str(tmp / pd_)
        out.write_text(json.dumps(d))
    return str(out)


def predictor_of(model, explicit=""):
    """The kernel predictor a prediction with this timeline model must use: `explicit` (--set predictor_dir) first,
    else the one the model was fitted with where its GPU/node time comes from a predictor (it records
    predictor_dir: its overhead term is relative to THAT predictor's kernel times), else None (the caller's
    default). A recorded predictor that is not built is a one-line error."""
    if explicit:
        return Path(explicit)
    if not model or model.get("gpu_table") or not model.get("predictor_dir"):
        return None
    pdir = paths.from_home(model["predictor_dir"])
    if not (pdir / "manifest.json").exists() and (paths.REPO / model["predictor_dir"] / "manifest.json").exists():
        pdir = paths.REPO / model["predictor_dir"]   # a committed predictor (training/predictors/<gpu>)
    if not (pdir / "manifest.json").exists():
        raise HaseError(f"the timeline model takes its kernel times from the predictor {pdir}, which is not built "
                        f"(phase 5: training/kernel_space_report.py or train_kernel_model.py; or --set predictor_dir=...)")
    return pdir


def load_fields_of(model, device: str) -> list:
    """The background metrics the timeline itself reads (whatever the kernel predictor's own load features):
    busy fraction and SM clock on a GPU (and DRAM activity when its gamma is on), CPU utilisation on CPU EP."""
    if not model:
        return []
    if device == "cpu":
        return [CPU_BUSY]
    return [BUSY, CLOCK] + ([DRAM] if model.get("params", {}).get("gamma", 0.0) else [])


def train_archs(model: dict) -> set:
    """The architectures a timeline model with measured terms was fitted on (its measured train_models)."""
    return {paths.model_arch(m) for m in model.get("measured", {}).get("train_models", [])}


def save(model: dict, path: Path) -> None:
    paths.atomic_write_text(path, json.dumps({"format": FORMAT, **model}, indent=1, default=float) + "\n")


def load(path: Path) -> dict:
    m = paths.read_json(path, "timeline model")
    if not isinstance(m, dict) or m.get("format") != FORMAT:
        raise HaseError(f"not a timeline model (format {FORMAT})", path)
    missing = [k for k in ("params", "host_table", "standalone_overhead_us", "gpu_floor_frac", "idle_load")
               if k not in m]
    if missing:
        raise HaseError(f"timeline model lacks '{missing[0]}'", path)
    m["params"] = {**DEFAULT_PARAMS, "overhead_us": m["standalone_overhead_us"], **m["params"]}
    return m
