"""ORT sessions for a target device, and the provenance every artifact records.

--device cpu   CPUExecutionProvider only.
--device cuda  CUDAExecutionProvider; if a CUDA session cannot really run, HaseError (never a fallback).
--device auto  CUDA only when a probe session on CUDA runs and reports CUDA as its provider.
"""
import contextlib
import datetime
import functools
import logging
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from hase.utils.errors import HaseError

EP_OF = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
OPT_LEVELS = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}


# CUDA EP options that change latency; ORT's defaults (cuDNN times every conv algorithm once per
# session: EXHAUSTIVE) unless the caller asks otherwise
CUDNN_ALGO_SEARCH = ("EXHAUSTIVE", "HEURISTIC", "DEFAULT")


def check_cudnn_algo(algo: str) -> str:
    if algo not in CUDNN_ALGO_SEARCH:
        raise HaseError(f"cudnn_conv_algo_search must be one of {', '.join(CUDNN_ALGO_SEARCH)}, got '{algo}'")
    return algo


def _providers(device: str, device_id: int = 0, cuda_options=None):
    if device == "cuda":
        opts = {"device_id": device_id, **(cuda_options or {})}
        if opts.get("cudnn_conv_algo_search") is not None:
            check_cudnn_algo(opts["cudnn_conv_algo_search"])
        return [("CUDAExecutionProvider", opts), "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


@contextlib.contextmanager
def stderr_to_debug_log(name: str):
    """What native code (ORT's own logger) writes to stderr meanwhile goes to logs/<name>.log and the debug log,
    not the console: the CUDA probe on a machine without a GPU prints ORT's errors about missing CUDA libraries,
    which are the expected answer there, not the user's problem."""
    import sys
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
        if text.strip():
            from hase.utils import paths
            logging.getLogger("hase.ort_session").debug("%s: %s", name, text.strip())
            try:
                paths.atomic_write_text(paths.logs_dir() / f"{name}.log", text)
            except OSError:  # read-only checkout: the debug logger still has it
                pass


@functools.lru_cache(maxsize=None)
def cuda_probe(device_id: int = 0):
    """(ok, reason): build a one-node model and run it on CUDA EP. ORT's log of the probe goes to
    logs/cuda_probe.log (stderr_to_debug_log)."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return False, f"onnxruntime {ort.__version__} has no CUDAExecutionProvider (install onnxruntime-gpu)"
    with stderr_to_debug_log("cuda_probe"):
        return _cuda_probe_session(device_id)


def _cuda_probe_session(device_id: int):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "probe", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.log_severity_level = 4
    try:
        s = ort.InferenceSession(m.SerializeToString(), so, providers=_providers("cuda", device_id))
        if s.get_providers()[0] != "CUDAExecutionProvider":
            return False, "CUDA EP did not load (no GPU, driver or CUDA libraries)"
        s.run(None, {"x": np.ones(4, np.float32)})
    except Exception as e:  # ORT raises several types here; any of them means no CUDA
        return False, f"CUDA session failed: {str(e).splitlines()[0]}"
    return True, "ok"


def resolve_device(device: str, device_id: int = 0) -> str:
    if device not in ("cpu", "cuda", "auto"):
        raise HaseError(f"unknown device '{device}' (cpu, cuda or auto)")
    if device == "cpu":
        return "cpu"
    ok, why = cuda_probe(device_id)
    if device == "cuda" and not ok:
        raise HaseError(f"--device cuda cannot run: {why}")
    return "cuda" if ok else "cpu"


# ORT writes the optimized model as one protobuf, which cannot be over 2 GB; constant folding can make it so (timm's
# mvitv2_tiny at batch 32: 97 MB in, 3.66 GB out), and then session creation fails with this message. open_session
# makes the session once more with the optimized model's initializers in a file beside it.
TOO_BIG_TO_SAVE = "Protobuf serialization failed"
EXTERNAL_FILE_KEY = "session.optimized_model_external_initializers_file_name"
EXTERNAL_MIN_KEY = "session.optimized_model_external_initializers_min_size_in_bytes"
EXTERNAL_MIN_BYTES = 32768   # smaller ones stay inline: every integer tensor parse_graph keeps a value of (4096 x 8 B)
TMP_SUFFIX = ".tmp.onnx"     # callers write '<final>.tmp.onnx' and rename it to '<final>' once it is complete


def external_data_file(optimized_path) -> Path:
    """Where an optimized model's external initializers go: '<final optimized file>.data' in the same folder, so the
    model's (relative) reference stays valid after the caller renames '<final>.tmp.onnx' to '<final>'."""
    p = Path(optimized_path)
    name = p.name[: -len(TMP_SUFFIX)] if p.name.endswith(TMP_SUFFIX) else p.name
    return p.with_name(name + ".data")


def session_options(opt_level="all", optimized_path=None, profile_prefix=None, threads=0,
                    log_severity=3, free_dims=None, external_initializers=False) -> ort.SessionOptions:
    """external_initializers: the optimized model's initializers (EXTERNAL_MIN_BYTES and up) go to
    external_data_file(optimized_path) instead of into the model."""
    so = ort.SessionOptions()
    for dim_name, value in (free_dims or {}).items():
        so.add_free_dimension_override_by_name(str(dim_name), int(value))
    so.graph_optimization_level = OPT_LEVELS[opt_level]
    so.log_severity_level = log_severity
    if threads:
        so.intra_op_num_threads = int(threads)
    if optimized_path is not None:
        so.optimized_model_filepath = str(optimized_path)
        if external_initializers:
            so.add_session_config_entry(EXTERNAL_FILE_KEY, external_data_file(optimized_path).name)
            so.add_session_config_entry(EXTERNAL_MIN_KEY, str(EXTERNAL_MIN_BYTES))
    if profile_prefix is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_prefix)
    return so


def make_session(model, device: str, opt_level="all", optimized_path=None, profile_prefix=None,
                 threads=0, device_id=0, free_dims=None, cuda_options=None, log_severity=3) -> ort.InferenceSession:
    """Session on a resolved device ('cpu' or 'cuda'). Errors name the model file.
    cuda_options: extra CUDA EP options, e.g. {"cudnn_conv_algo_search": "HEURISTIC"}. log_severity: ORT's session
    log level (4: fatal only, where every ORT error is raised and reported as a HaseError anyway)."""
    name = model if isinstance(model, (str, Path)) else "<in-memory model>"
    if isinstance(model, (str, Path)) and not Path(model).exists():
        raise HaseError("file not found", model)
    options = dict(opt_level=opt_level, optimized_path=optimized_path, profile_prefix=profile_prefix,
                   threads=threads, free_dims=free_dims, log_severity=log_severity)
    providers = _providers(device, device_id, cuda_options)
    src = str(model) if isinstance(model, (str, Path)) else model
    try:
        sess = open_session(src, providers, options)
    except Exception as e:  # InvalidGraph, InvalidProtobuf, NotImplemented, Fail...
        raise HaseError(_ort_cause(e), name)
    if device == "cuda" and sess.get_providers()[0] != "CUDAExecutionProvider":
        raise HaseError("CUDA EP did not load for this session", name)
    return sess


def open_session(src, providers, options: dict, **kwargs) -> ort.InferenceSession:
    """ort.InferenceSession(src, session_options(**options), providers, **kwargs). When ORT cannot write the optimized
    model (options' optimized_path) because it is over protobuf's 2 GB, the session is made once more with the
    model's initializers in external_data_file(optimized_path). ORT's exceptions pass through."""
    try:
        return ort.InferenceSession(src, session_options(**options), providers=providers, **kwargs)
    except Exception as e:  # ORT raises several types; only the failed save of the optimized model is retried
        if options.get("optimized_path") is None or TOO_BIG_TO_SAVE not in str(e):
            raise
    logging.getLogger("hase.ort_session").info(
        "%s: optimized model over protobuf's 2 GB; its initializers go to %s", options["optimized_path"],
        external_data_file(options["optimized_path"]).name)
    return ort.InferenceSession(src, session_options(**options, external_initializers=True), providers=providers,
                                **kwargs)


def _ort_cause(e: Exception) -> str:
    msg = " ".join(str(e).split())
    for marker in ("INVALID_PROTOBUF", "INVALID_GRAPH", "NOT_IMPLEMENTED", "FAIL", "INVALID_ARGUMENT"):
        if marker in msg:
            return f"ORT cannot load it ({marker}): {msg.split(':', 2)[-1].strip()[:300]}"
    return f"ORT cannot load it: {msg[:300]}"


def ort_message(e: Exception, limit: int = 300) -> str:
    """ORT's exception as one short line: without its '[ONNXRuntimeError] : 1 : FAIL :' prefix and the C++ source
    location a kernel's status message carries (what is left says which node failed and why)."""
    import re
    msg = re.sub(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ", "", " ".join(str(e).split()))
    msg = re.sub(r"\S*onnxruntime_src/\S+:\d+ (?:[\w:~<>]+\([^()]*\) )?", "", msg)
    return msg[:limit]


def model_itself_fails(model_path, shapes: dict, pin_dims: dict, seed: int = 0):
    """ORT's message (ort_message) when the model as it was given fails to run on a plain CPU-EP session (no graph
    optimization) at these pins, with the analysis' dummy inputs; None when it runs, runs out of memory, or no such
    session can be made (the failure is then not shown to be the model's). For after an analysis session's run
    failed: is it the model (e.g. a traced size baked into a Reshape), or the graph ORT and Hase rewrote?"""
    from hase.utils.onnx_io import dummy_feed
    try:
        sess = open_session(str(model_path), [EP_OF["cpu"]],
                            dict(opt_level="disable", free_dims=pin_dims, log_severity=4))
    except Exception:
        return None
    try:
        sess.run(None, dummy_feed(sess, shapes, seed))
    except MemoryError:
        return None
    except Exception as e:
        return ort_message(e)
    return None


def run_failure(model_path, model, shapes: dict, pin_dims: dict, seed: int, err: Exception, what: str) -> HaseError:
    """The HaseError for an analysis session whose run failed (err): 'the model itself cannot run at pin_dims {...}:
    <ORT's message>' when the model fails the same way on a plain CPU-EP session (model_itself_fails, run only now:
    no cost when the analysis runs), else '<what>: <err>'."""
    from hase.utils.onnx_io import pins_text
    own = model_itself_fails(model_path, shapes, pin_dims, seed)
    if own is not None:
        return HaseError(f"the model itself cannot run {pins_text(model, pin_dims)}: {own}", model_path)
    return HaseError(f"{what}: {' '.join(str(err).split())[:200]}", model_path)


def gpu_info(device_id: int = 0) -> dict:
    """GPU name, driver and memory through NVML; empty when there is no NVIDIA GPU."""
    try:
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(device_id)
        name = pynvml.nvmlDeviceGetName(h)
        drv = pynvml.nvmlSystemGetDriverVersion()
        mem = pynvml.nvmlDeviceGetMemoryInfo(h).total
        return {"gpu_name": name.decode() if isinstance(name, bytes) else name,
                "gpu_driver": drv.decode() if isinstance(drv, bytes) else drv,
                "gpu_memory_gib": round(mem / 2**30, 1)}
    except Exception:  # pynvml missing, no driver, no device: all mean "no GPU info"
        return {}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_slug(device: str, device_id: int = 0) -> str:
    """Folder name for per-device results: 'nvidia-h200' on CUDA, 'cpu-<model>' on CPU."""
    from hase.utils.paths import slug
    if device == "cuda":
        return slug(gpu_info(device_id).get("gpu_name", "unknown-gpu"))
    return "cpu-" + slug(cpu_name())[:40]


def provenance(device: str, device_id: int = 0) -> dict:
    p = {
        "ort_version": ort.__version__,
        "onnx_version": onnx.__version__,
        "ep": EP_OF[device],
        "device": device,
        "host": platform.node(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    if device == "cuda":
        p.update(gpu_info(device_id))
    return p
