"""The Predictor API: what a scheduler (or `hase predict`, or `hase serve`) calls.

    import hase
    p = hase.load_predictor("nvidia-h200")          # or "nvidia-h100", "cpu" (this machine's CPU EP), a device slug
    rec = p.analyse("model.onnx")                   # phase 2 record for the target EP (cache it: it is a dict)
    r = p.predict(rec, load={"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.4, "DCGM_FI_DEV_SM_CLOCK": 1980})
    r.total_ms, r.p10_ms, r.p90_ms, r.idle_ms, r.breakdown, r.warnings, r.provenance
    p.predict_many([rec_a, rec_b], load=...)       # or [(rec, load), ...]

A Predictor is thread-safe: the kernel predictor's models load once under a lock, each analysed model's
load-independent part (kernel times at idle) is cached per (model, session options) and never modified, and a
prediction shares no state with another. Bad input is a HaseError with a one-line message naming the field or file.
"""
import hashlib
import json
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hase.utils.errors import HaseError

GPUS = ("nvidia-h200", "nvidia-h100")   # GPUs with a shipped predictor and timeline model
_WARN_LOCK = threading.Lock()   # warnings.catch_warnings changes process-wide state: one at a time


@dataclass(frozen=True)
class Prediction:
    """One prediction of `session.run` (ms): central value, p10-p90 across fresh sessions (and, next to a part-time
    neighbour, across runs), the idle value, the per-node breakdown (host dispatch and GPU time, us), warnings and
    where every input came from."""
    model: str
    target: str
    total_ms: float
    p10_ms: float
    p90_ms: float
    idle_ms: float
    breakdown: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    provenance: dict = field(default_factory=dict)
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _plain(v):
    """numpy scalars and arrays -> Python numbers and lists (JSON-ready)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist"):
        return v.tolist()
    return v


def _read_record(path: Path) -> dict:
    from hase.utils import paths
    rec = paths.read_json(path, "phase 2 record")
    if not isinstance(rec, dict) or not isinstance(rec.get("kernels"), list) or "device" not in rec:
        raise HaseError("not a phase 2 record (needs 'kernels' and 'device')", path)
    from hase.graph_model.dag_critical_path import check_record
    try:   # a file is handed in like a record dict: checked where it enters, the field named
        check_record(rec)
    except HaseError as e:
        raise HaseError(str(e), path)
    return rec


def record_key(record: dict) -> str:
    """A stable id of an analysed model (what the service's analysis ids are)."""
    return hashlib.sha256(json.dumps(record.get("kernels"), sort_keys=True, default=str).encode()
                          + str(record.get("graph_inputs")).encode()).hexdigest()[:16]


_CUDA_OK = None


def cuda_here() -> bool:
    global _CUDA_OK
    if _CUDA_OK is None:
        from hase.utils.ort_session import cuda_probe
        _CUDA_OK = cuda_probe()[0]
    return _CUDA_OK


def analyse_onnx(onnx_path, device: str, cfg: dict) -> tuple:
    """(record, how) for the target EP. CUDA: a CUDA EP here, else the offline analysis
    (ort_analysis.offline_cuda.analyse), else a one-line error."""
    from hase.inference.runtime import analyse
    path = Path(onnx_path)
    if not path.is_file():
        raise HaseError("file not found" if not path.exists() else "not a file", path)
    if device == "cpu":
        return analyse(path, "cpu", cfg), "ORT CPU EP here"
    if cuda_here():
        return analyse(path, "cuda", cfg), "ORT CUDA EP here"
    try:
        import hase.ort_analysis.offline_cuda  # noqa: F401  (runtime.analyse runs it and caches the record on disk)
    except ImportError:
        raise HaseError("analysing a model for a GPU needs a working CUDA EP here or the offline CUDA-EP analysis "
                        "(ort_analysis.offline_cuda, not available); or pass a phase 2 record (.json) made on a GPU "
                        "machine", path)
    try:
        return analyse(path, "cuda", cfg, offline=True), "offline CUDA-EP analysis (ort_analysis.offline_cuda)"
    except HaseError as e:
        if "NOT_IMPLEMENTED" in e.cause and _has_bfloat16(path):
            # ORT's CPU build has no bfloat16 kernel for most ops (Gemm, MatMul, LayerNormalization...) and, unlike
            # float16, inserts no Casts around them: the CUDA EP runs the model, the offline analysis cannot
            raise HaseError("a bfloat16 model: the offline CUDA-EP analysis runs it with ORT's CPU build, which has "
                            "no bfloat16 kernel for some of its ops; analyse it on a GPU machine "
                            "(hase analyse --device cuda) and pass that record (.json), or export it in float16 ("
                            + e.cause[:160] + ")", path)
        raise


def _has_bfloat16(path: Path) -> bool:
    """Whether a model has a bfloat16 graph input or weight (the protobuf only: weights are not read)."""
    from onnx import TensorProto
    from hase.utils.onnx_io import load_model
    try:
        g = load_model(path, load_weights=False).graph
    except HaseError:
        return False
    return (any(t.data_type == TensorProto.BFLOAT16 for t in g.initializer)
            or any(v.type.tensor_type.elem_type == TensorProto.BFLOAT16 for v in list(g.input) + list(g.value_info)))


class Predictor:
    """Predictions for one target (a GPU or the CPU EP): its timeline model and kernel predictor, loaded once."""

    def __init__(self, target: str, timeline_model=None, predictor_dir=None, config=None):
        from hase.inference import timeline_model as tm
        from hase.inference.runtime import DEFAULTS, load_timeline_model, session_options
        from hase.utils import paths
        from hase.utils.config import _merge, resolve
        cfg = resolve(DEFAULTS, paths.phase_config("inference"))   # inference/config.yaml: Prometheus queries, probe
        if config is not None and not isinstance(config, dict):
            raise HaseError(f"config must be a mapping {{key: value}}, not {type(config).__name__}")
        if config:
            _merge(cfg, dict(config), "config")
        if timeline_model:
            cfg["timeline_model"] = str(timeline_model)
        if predictor_dir:
            cfg["predictor_dir"] = str(predictor_dir)
        self.cfg = cfg
        if target in ("cpu", "local-cpu") or str(target).startswith("cpu-"):
            self.device = "cpu"
            from hase.utils.ort_session import device_slug
            self.slug = device_slug("cpu") if target in ("cpu", "local-cpu") else target
        else:
            self.device, self.slug = "cuda", target
        self.target = self.slug
        self.fallback = False   # this machine's CPU: the shipped CPU corpus's trees, scaled by a local calibration
        if (self.device == "cpu" and target in ("cpu", "local-cpu") and not cfg["timeline_model"]
                and not cfg["predictor_dir"]):
            # judged on this kind of machine (inference/results/cpu-intel-r-xeon-r-processor/unseen_vm/torchvision/):
            # 13.3% on torchvision models at 224 px, where the main job's own timeline (phase 5 on two small
            # architectures) scored 33.5% and a committed timeline of another CPU of the same name 35.3%
            from hase.inference.runtime import cpu_fallback_timeline
            if cpu_fallback_timeline().exists():
                cfg = dict(cfg, timeline_model=str(cpu_fallback_timeline()))
                self.fallback = True
        self.model, self.timeline_path = load_timeline_model(cfg, self.slug)
        if self.model is None and not cfg["timeline_model"] and target != "cpu":
            # a named device's committed timeline (e.g. the Xeon CPU's) when HASE_HOME points elsewhere
            for sub in ("default", "interference", "measured", "."):
                cand = paths.REPO / "inference" / "results" / self.slug / sub / "timeline_model.json"
                if cand.exists():
                    self.model, self.timeline_path = load_timeline_model(dict(cfg, timeline_model=str(cand)), self.slug)
                    break
        pdir = tm.predictor_of(self.model, cfg["predictor_dir"]) or paths.train_models_dir() / self.slug
        if cfg["predictor_dir"] and not (Path(pdir) / "manifest.json").exists():   # named, so never passed over
            raise HaseError("predictor_dir: " + ("not found" if not Path(pdir).exists() else
                                                 "no manifest.json (not a built phase 5 predictor)"), pdir)
        self.predictor = None
        if (Path(pdir) / "manifest.json").exists():
            from hase.training.kernel_predictor import load_predictor
            self.predictor = load_predictor(pdir)
            from hase.inference.runtime import check_ep
            check_ep(self.predictor, self.device, pdir)
        elif not (self.model and self.model.get("gpu_table")):   # a CUPTI/line table needs no kernel predictor
            raise HaseError(self._missing_message(), pdir)
        self.predictor_dir = Path(pdir) if self.predictor else None
        self.default_options = session_options(cfg)
        self._lock = threading.Lock()
        self._records = {}   # analysis cache: (path, size, mtime) -> record
        self._preps = {}     # record key -> prepared timeline input (read-only)
        self._response = None   # (machine response, warning) once read (machine_response)
        self._ids = {}       # id(record) -> (record, record key)
        self._local_cal = None   # (time, profile or None, note): calibration="local", reused LOCAL_REUSE_S[device]
        self.fields = self._fields()

    def local_calibration(self) -> tuple:
        """(profile or None, note): this machine's calibration for this target, read now or within the last
        LOCAL_REUSE_S[device] seconds (inference/machine_calibration.local_calibration: a host reading is true for
        seconds, calibration_age/). None when this machine is not the target."""
        from hase.inference import machine_calibration as mc
        with self._lock:
            if self._local_cal and time.time() - self._local_cal[0] < mc.LOCAL_REUSE_S[self.device]:
                return self._local_cal[1:]
        if self.device == "cuda":
            from hase.utils.ort_session import device_slug, resolve_device
            try:
                here = device_slug("cuda") if resolve_device("auto") == "cuda" else "no CUDA GPU"
            except HaseError:
                here = "no CUDA GPU"
            if here != self.slug:
                got = (None, f"calibration 'local': this machine has {here}, the target is {self.slug}: host not scaled")
                with self._lock:
                    self._local_cal = (time.time(), *got)
                return got
        threads = int((self.model or {}).get("threads") or 0) if self.device == "cpu" else 0
        got = mc.local_calibration(self.device, threads=threads)
        with self._lock:
            self._local_cal = (time.time(), *got)
        return got

    def _missing_message(self) -> str:
        if self.device == "cpu":
            return (f"no CPU EP predictor for this machine ({self.slug}): run `hase pipeline --device cpu` (about "
                    f"2-5 min on 2 cores), or predict for a measured CPU with "
                    f"--set timeline_model=inference/results/cpu-intel-r-xeon-r-processor/timeline_model.json")
        from hase.api import GPUS
        return (f"no predictor for '{self.slug}' (shipped: {', '.join(GPUS)}; others: measure the kernel space on "
                f"that GPU, then `hase build-predictor`)")

    def _fields(self) -> list:
        from hase.inference import timeline_model as tm
        own = [f[3:] for f in self.predictor.load_fields] if self.predictor else []
        return list(dict.fromkeys(own + tm.load_fields_of(self.model, self.device)))

    # ---- inputs ------------------------------------------------------------------------------
    def idle_load(self) -> dict:
        """The load at which the timeline was measured: what `load=None` means."""
        from hase.inference import timeline_model as tm
        idle = dict((self.model or {}).get("idle_load", {}))
        for f in self.fields:
            idle.setdefault("bg_" + f, 0.0)
        if self.model and self.device == "cuda" and self.model.get("idle_clock_mhz"):
            idle["bg_" + tm.CLOCK] = float(self.model["idle_clock_mhz"])
        return idle

    def check_load(self, load: dict, where: str = "load") -> tuple:
        """(load {bg_field: value}, wait info, warnings [str]) from {field: value} (with or without bg_): every field
        the predictor reads must be there, and every known field (read or not) in its range
        (benchmark/gpu_metrics.FIELD_SPECS: 97 for a 0-1 ratio says the exporter is wrong); unknown fields are
        named in one warning."""
        from hase.benchmark.gpu_metrics import check_value
        from hase.inference.load_sources import BG, WAIT, launch_wait, snapshot_warning
        if not isinstance(load, dict):
            raise HaseError(f"{where} must be an object {{field: value}}")
        got = {}
        for k, v in load.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise HaseError(f"{where}.{k} must be a number, not {type(v).__name__}")
            got[k[len(BG):] if str(k).startswith(BG) else str(k)] = float(v)
        unknown = snapshot_warning(got, where)
        missing = [f for f in self.fields if f not in got]
        if missing:
            raise HaseError(f"{where}.{missing[0]} is missing (this predictor reads: {', '.join(self.fields)})")
        wait, info, warning = launch_wait(got, where, float(self.cfg["probe"]["max_age_s"]), time.time(), self.device)
        out = {BG + f: check_value(f, got[f], where) for f in self.fields}
        if wait is not None:
            out[BG + WAIT] = wait
        return out, info, [w for w in (unknown, warning) if w]

    def analyse(self, onnx_path, pin_dims=None) -> dict:
        """Phase 2 record of an ONNX model for this target's EP (cached by path, size, mtime and pinned dims).
        pin_dims: {dynamic dim name: size} (None: the predictor's config's, inference/config.yaml pin_dims)."""
        path = Path(onnx_path)
        if not path.is_file():
            raise HaseError("file not found" if not path.exists() else "not a file", path)
        pins = dict(self.cfg.get("pin_dims") or {}) if pin_dims is None else pin_dims
        if not isinstance(pins, dict):
            raise HaseError(f"pin_dims must be an object {{dim name: size}}, not {type(pins).__name__}")
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns, tuple(sorted((str(k), repr(v))
                                                                             for k, v in pins.items())))
        with self._lock:
            rec = self._records.get(key)
        if rec is None:
            with _ANALYSE_LOCK:   # ORT writes the optimized graph beside the model: one analysis at a time
                try:
                    rec, how = analyse_onnx(path, self.device, dict(self.cfg, pin_dims=pins))
                except HaseError as e:   # what to pass, as this API takes it (pin_dims={...}, not --set)
                    raise e.worded("api") from None
            rec = dict(rec, analysed_by=how)
            with self._lock:
                self._records[key] = rec
        return rec

    def _record(self, model_or_record) -> dict:
        if isinstance(model_or_record, dict):
            from hase.graph_model.dag_critical_path import check_record
            check_record(model_or_record)
            return model_or_record
        path = Path(model_or_record)
        name = path.name.lower()
        if name.endswith((".json", ".json.gz", ".json.xz")):
            return _read_record(path)
        return self.analyse(path)

    def options(self, options=None) -> dict:
        from hase.inference.runtime import session_options
        if options is None:
            return self.default_options
        if not isinstance(options, dict):
            raise HaseError("options must be an object {cudnn_conv_algo_search, io_binding, cpu_pinned}")
        unknown = sorted(set(options) - {"cudnn_conv_algo_search", "io_binding", "cpu_pinned"})
        if unknown:
            raise HaseError(f"options.{unknown[0]} is not a session option Hase models "
                            f"(cudnn_conv_algo_search, io_binding, cpu_pinned)")
        # the field as the caller named it (the service reports the field)
        return session_options({**self.default_options, **options}, field="options.")

    def _key_of(self, record: dict) -> str:
        """record_key(), remembered per record object (hashing a record costs ~5 ms; a scheduler passes the same
        dict again and again). The cache holds the record, so its id cannot be reused while cached."""
        with self._lock:
            hit = self._ids.get(id(record))
        if hit is not None and hit[0] is record:
            return hit[1]
        key = record_key(record)
        with self._lock:
            if len(self._ids) >= 4096:
                self._ids.pop(next(iter(self._ids)))
            self._ids[id(record)] = (record, key)
        return key

    def prepared(self, record: dict) -> dict:
        """The record's load-independent timeline input (kernel times at idle), cached; do not modify it."""
        from hase.inference.runtime import prepare_record
        key = record.get("_hase_key") or self._key_of(record)
        with self._lock:
            prep = self._preps.get(key)
        if prep is None:
            with _WARN_LOCK, warnings.catch_warnings():
                warnings.simplefilter("ignore")   # unseen types are reported from prep["unseen_types"]
                prep = prepare_record(record, self.predictor, self.model)
            with self._lock:
                self._preps[key] = prep
        return prep

    def machine_response(self) -> tuple:
        """({"dispatch": e_d, "copies": e_c} or None, warning or None): the end-to-end machine response of this
        target (config machine_response, {target} filled in; inference/fit_machine_response.py), read once."""
        if self._response is None:
            from hase.inference.machine_calibration import load_response
            from hase.utils import paths
            p = Path(str(self.cfg.get("machine_response") or "").replace("{target}", self.slug))
            resp, warn = load_response(p if p.is_absolute() else paths.REPO / p)
            self._response = (resp, warn and f"{warn}: calibrated by the node-dispatch elasticity alone")
        return self._response

    # ---- prediction --------------------------------------------------------------------------
    def predict(self, model_or_record, load=None, options=None, calibration=None) -> Prediction:
        """Predicted session.run of an ONNX file, a record file or a record dict, under `load` ({DCGM field: value};
        None: idle, as measured) with session `options` (None: ORT's defaults). calibration: the target node's host
        calibration (benchmark/host_calibration.py profile, dict or path, or its host_index_us): host-side terms
        scaled by it (inference/machine_calibration.py); "local": this machine's, read now (about 1-2 s, then reused
        10 min; only where this machine is the target); None: the training machines' host speed, except for this
        machine's CPU without a named timeline (`fallback`: the CPU corpus's, scaled by "local"); False: not scaled."""
        from hase.inference.runtime import predict_record
        record = self._record(model_or_record)
        if record.get("device") != self.device:
            raise HaseError(f"the record is analysed for the {record.get('device')} EP, this predictor is for the "
                            f"{self.device} EP ({self.target})")
        opts = self.options(options)
        warns = []
        if load is None:
            ld, info, w = self.idle_load(), {"wait_source": "idle (no load given)"}, None
            src = "idle (no load given)"
        elif isinstance(load, tuple):   # (checked load, info, warning, source): from a load source
            ld, info, w, src = load
        else:
            ld, info, w = self.check_load(load)
            src = "given"
        warns += [w] if isinstance(w, str) else list(w or [])
        model, copy_sc, trees_scales = self.model, None, None
        if self.fallback and calibration is None:   # another CPU's timeline: scaled here unless told not to
            calibration = "local"
        elif self.fallback and isinstance(calibration, dict) and not (calibration.get("compute") or {}):
            # host chains alone (the node agent's hase_calib_* gauges): they cannot carry the CPU corpus's trees to
            # this CPU, and unscaled they are at the EPYC's speed; this machine's own calibration instead
            warns.append("the calibration given holds no CPU EP compute rates (field 'compute'; the node agent "
                         "exports the host chains only): this machine's own calibration used for the CPU EP")
            calibration = "local"
        if calibration is False:   # explicitly none
            calibration = None
        if isinstance(calibration, str) and calibration == "local" and model is not None:
            calibration, note = self.local_calibration()
            info = dict(info, calibration_source=note)
            from hase.benchmark.host_calibration import probe_moved
            if calibration is None or probe_moved(calibration.get("compute")):   # none, or of two states of the VM
                warns.append(note)
        if calibration is not None and model is not None:
            from hase.inference import machine_calibration as mc
            if isinstance(calibration, (str, Path)):
                from hase.benchmark.host_calibration import load_profile
                calibration = load_profile(calibration)
            if (model.get("gpu_table") or {}).get("key") == "cpu":   # CPU EP: lines, per-node and fixed terms
                scales, cw = mc.cpu_scales(model, calibration)
                model = mc.calibrated_cpu_model(model, scales)
                info = dict(info, cpu_scales=scales)
            elif model.get("node_source") == "trees" and model.get("scale_lines"):   # CPU EP node trees: each
                # node's time scaled by its own line's ratio (mc.cpu_node_ratios), per-node term and c0 by the host
                scales, cw = mc.cpu_scales(model, calibration)
                model = dict(model, params=dict(model["params"],
                                                c0_us=float(model["params"].get("c0_us", 0.0)) * scales["host"]))
                trees_scales = scales
                info = dict(info, cpu_scales=scales)
            elif model.get("node_source") == "trees":   # older CPU node trees, without the lines to scale them by
                cw = ("calibration not applied: this CPU timeline's node compute comes from node trees, which a "
                      "calibration does not scale yet; predicted at the speed of the CPU it was measured on ("
                      + ", ".join((model.get("calibration_ref") or {}).get("cpus") or ["unknown"]) + ")")
                info = dict(info, calibration_not_applied="node_source trees")
            else:
                resp, rw = self.machine_response() if self.cfg.get("calibrate_response") else (None, None)
                warns += [rw] if rw else []
                if resp:   # end-to-end response between machines: host terms and pageable copies (opt-in)
                    scale, copy_sc, cw = mc.response_scales(model, calibration, resp)
                    info = dict(info, copy_scales=copy_sc, machine_response=resp)
                else:
                    scale, cw = mc.host_scale(model, calibration)
                cw = cw or mc.range_note(model, calibration)   # scaled, but outside the fitted machines' readings
                model = dict(model, params=mc.calibrated_params(model["params"], scale))
                info = dict(info, host_scale=scale)
                sc, ccw = mc.copy_scales(model, calibration)
                if resp:   # the copies are scaled by the host's response above
                    info = dict(info, copy_scales_by_rate_not_applied=sc)
                elif self.cfg.get("calibrate_copies"):   # session.run's copies at the target's copy rate (opt-in)
                    copy_sc = sc
                    info = dict(info, copy_scales=copy_sc)
                    if ccw:
                        warns.append(ccw)
                else:   # not scaled: say so when the target copies far off its GPU kind's rate
                    info = dict(info, copy_scales_not_applied=sc)
            if cw:
                warns.append(cw)
        if self.fallback:
            from hase.inference.runtime import CPU_FALLBACK_MAPE
            ref = model.get("calibration_ref") or {}
            cal_threads = (calibration.get("threads") if isinstance(calibration, dict)
                           else getattr(calibration, "threads", None)) if trees_scales else None
            session_threads = int(cal_threads or 0) or model.get("threads")   # scaled: the calibration's count
            warns.append(f"CPU EP ({self.slug}): predicted with the CPU corpus's node trees ({self.timeline_path}; "
                         f"{', '.join(ref.get('cpus') or ['?'])}, {model.get('threads')} intra-op threads) "
                         + (f"scaled by this machine's calibration ({CPU_FALLBACK_MAPE})" if trees_scales
                            else "not scaled: at that CPU's speed")
                         + f", for a session with {session_threads} intra-op threads; a timeline of this "
                         f"machine's own (hase pipeline --device cpu) is used only when named (--set timeline_model=)")
        if self.model is None:   # no timeline model: the plain Σ in ORT's order
            if self.predictor is None:
                raise HaseError(self._missing_message())
            with _WARN_LOCK, warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                res = predict_record(record, self.predictor, ld, None, opts)
                idle = predict_record(record, self.predictor, self.idle_load(), None, opts)["total_ms"]
            warns += sorted({str(c.message) for c in caught})
            res["idle_ms"] = idle
        else:
            prep = self.prepared(record) if self.predictor is not None and "cpu_scales" not in model else None
            if prep is None:   # a table timeline (no kernel predictor, or CPU lines scaled): prepare without kernel times
                from hase.inference.timeline_model import prepared as tm_prepared
                prep = tm_prepared(record, {k["id"]: 0.0 for k in record["kernels"]}, model)
                from hase.inference.runtime import record_risks
                prep.update(kernel_ms={k["id"]: 0.0 for k in record["kernels"]}, standalone_sum_ms=0.0, unseen_types=[],
                            risks=record_risks(record))
            if trees_scales:   # the trees' node times at the target's speed (the cached prep stays unscaled)
                from hase.inference.machine_calibration import cpu_node_ratios
                r = cpu_node_ratios(model, trees_scales, record)
                ids = [k.get("id", str(i)) for i, k in enumerate(record["kernels"])]
                prep = dict(prep, dev=prep["dev"] * r, h=prep["h"] * trees_scales["host"],
                            kernel_ms={i: prep["kernel_ms"][i] * x for i, x in zip(ids, r) if i in prep["kernel_ms"]})
            if copy_sc:
                from hase.inference.machine_calibration import calibrated_copies
                prep = calibrated_copies(prep, copy_sc)
            try:
                res = predict_record(record, self.predictor, ld, model, opts, prep=prep)
            except HaseError as e:   # the timeline refuses a session option: name it
                if "cudnn_conv_algo_search" in str(e):
                    raise HaseError(f"options.cudnn_conv_algo_search: {e}")
                raise
            for t in res.get("unseen_types") or []:
                warns.append(f"kernel type '{t}' was not in the training data; predicted by the generic "
                             f"FLOPs/bytes model")
            for t, kin in (res.get("kin_types") or {}).items():
                warns.append(f"kernel type '{t}' was not in the training data; priced as '{kin}' (the same CUDA "
                             f"kernel family, inference/node_model.py KIN)")
            warns += list(res.get("risks") or [])
            from hase.inference.machine_calibration import copy_note
            off = copy_note(info.get("copy_scales_not_applied"), res.get("copy_ms"))
            if off:
                warns.append(off)
            from hase.inference.runtime import idle_above_loaded
            odd = idle_above_loaded(res, model)   # the timeline's idle reference was itself measured under load
            if odd:
                warns.append(odd)
        if load is not None and self.model is not None:
            from hase.inference.timeline_model import has_load_terms
            if not has_load_terms(self.model):   # then how the wait was sourced does not matter: say what does
                from hase.inference.load_sources import LaunchWaitWarning
                warns = [x for x in warns if not isinstance(x, LaunchWaitWarning)]
                warns.append(f"the timeline model for {self.target} has no interference terms ({self.timeline_path}):"
                             f" predicted at idle, the given load is not applied")
        if (self.device == "cpu" and self.model is not None and "cpu_scales" not in info and not self.fallback
                and self.slug not in Path(str(self.timeline_path)).parts):
            # a CPU timeline is one CPU's at one thread count (inference/results/<cpu>/...): the target's name is
            # this machine's, the numbers are not (README: the committed Xeon's, given on an AMD EPYC)
            warns.append(f"CPU EP timeline {self.timeline_path} is not this machine's ({self.slug}): the prediction "
                         f"is for the CPU it was measured on, at {self.model.get('threads') or 'its'} intra-op "
                         f"threads; measure this CPU for its own (hase pipeline --device cpu)")
        warns += list((self.model or {}).get("warnings_for_users", []))
        details = {k: v for k, v in res.items() if not k.startswith("_") and k not in (
            "kernels", "total_ms", "p10_ms", "p90_ms", "idle_ms", "model", "device")}
        details.update(info)
        details["load"] = ld
        breakdown = [{k: (float(v) if hasattr(v, "dtype") else v) for k, v in kk.items()} for kk in res["kernels"]]
        prov = {"target": self.target, "device": self.device, "timeline_model": str(self.timeline_path)
                if self.model else None, "predictor_dir": str(self.predictor_dir) if self.predictor_dir else None,
                "predictor_trained_on": (self.predictor.manifest.get("trained_on") if self.predictor else None),
                "load_source": src, "session_options": opts, "analysed_by": record.get("analysed_by", "given record"),
                "ort_version_of_record": (record.get("provenance") or {}).get("ort_version")}
        return Prediction(model=record.get("model", "?"), target=self.target, total_ms=float(res["total_ms"]),
                          p10_ms=float(res["p10_ms"]), p90_ms=float(res["p90_ms"]),
                          idle_ms=float(res.get("idle_ms", res["total_ms"])), breakdown=breakdown,
                          warnings=warns, provenance=_plain(prov), details=_plain(details))

    def sweep(self, onnx_path, dim: str, sizes, load=None, options=None, calibration=None) -> list:
        """Predictions of one ONNX model with its dynamic dim `dim` pinned to each of `sizes` (the batch, a
        sequence length): [(size, Prediction)], in the order given. Each size is its own analysis (the graph ORT
        runs changes with the shapes; cached like analyse). The model's other dynamic dims come from the config's
        pin_dims."""
        from hase.utils.onnx_io import graph_input_dims, load_model
        path = Path(onnx_path)
        if not path.is_file():
            raise HaseError("file not found" if not path.exists() else "not a file", path)
        dynamic = sorted({d for dims in graph_input_dims(load_model(path, load_weights=False)).values()
                          for d in (dims or []) if isinstance(d, str) and d})
        if dim not in dynamic:
            raise HaseError(f"sweep dim '{dim}' is not a named dynamic dim of the model's inputs (its dynamic dims: "
                            f"{', '.join(dynamic) or 'none'})", path)
        sizes = list(sizes)
        if not sizes or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in sizes):
            raise HaseError(f"sweep sizes must be whole numbers > 0, got {sizes!r:.60}")
        out = []
        for v in sizes:
            pins = {**(self.cfg.get("pin_dims") or {}), dim: v}
            res = self.predict(self.analyse(path, pin_dims=pins), load, options, calibration)
            res.details["pin_dims"] = pins
            out.append((v, res))
        return out

    def predict_many(self, items, load=None, options=None) -> list:
        """Predictions of many models: items are models/records (all under `load`) or (model, load) pairs."""
        out = []
        for it in items:
            if isinstance(it, tuple) and len(it) == 2:
                out.append(self.predict(it[0], it[1], options))
            else:
                out.append(self.predict(it, load, options))
        return out


_ANALYSE_LOCK = threading.Lock()
_CACHE = {}
_CACHE_LOCK = threading.Lock()


def load_predictor(target: str = "nvidia-h200", timeline_model=None, predictor_dir=None, config=None) -> Predictor:
    """The Predictor of a target: 'nvidia-h200', 'nvidia-h100' (shipped), 'cpu' (this machine's CPU EP: needs a
    phase 5 CPU predictor, `hase pipeline --device cpu`), or a device slug with a timeline model. Cached per
    arguments: the same object is returned to every caller (it is thread-safe)."""
    if not isinstance(target, str) or not target:
        raise HaseError("target must be a GPU name such as nvidia-h200, or cpu")
    key = (target, str(timeline_model), str(predictor_dir), json.dumps(config, sort_keys=True, default=str))
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = Predictor(target, timeline_model, predictor_dir, config)
        return _CACHE[key]
