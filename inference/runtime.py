"""The whole-model prediction at run time (a library module; the CLI is inference/predict_model_latency.py, the
Predictor API hase/api.py): analyse a model for the target EP (phase 2, cached), its kernel times at idle
(phase 5's predictor), the timeline model of ORT's run under a load (inference/timeline_model.py), the trace, the
text summary.
"""
import json
from pathlib import Path

from hase.inference.load_sources import BG, DCGM_ONLY  # noqa: F401  (BG: the load keys' prefix)
from hase.utils import paths
from hase.utils.errors import HaseError

DEFAULTS = {"device": "auto", "predictor_dir": "", "timeline_model": "", "pin_dims": {}, "seed": 0,
            # local sampling: at least sample_s, then until the busy field's standard error over SAMPLE_CHUNK_S
            # windows is <= sample_busy_se (a fraction), at most sample_max_s (one 0.5 s CPU sample swung a
            # prediction 0.96 -> 3.25 ms)
            "sample_s": 1.0, "sample_max_s": 5.0, "sample_busy_se": 0.02,
            "prometheus": {"url": "", "selector": 'gpu="0"', "lookback_s": 30, "queries": {}}, "top_kernels": 15,
            "probe": {"max_age_s": 60.0, "idle_probe_us": 0.0, "local_ms": 200.0},
            # a calibration's copy rate scales session.run's copies (machine_calibration.copy_scales): off until an
            # exam judges it (session 28, post hoc on 5 spent-exam machines: 2 better, 2 worse, 1 unchanged)
            "calibrate_copies": False,
            # a calibration scales the host terms and session.run's copies by the end-to-end response fitted between
            # the training machines (inference/fit_machine_response.py): off until exam v23's machine panel judges it
            "calibrate_response": False,
            "machine_response": "inference/results/{target}/machine_response/response.json",
            # the session the user will run: ORT's defaults unless told otherwise
            "cudnn_conv_algo_search": "EXHAUSTIVE", "io_binding": False, "cpu_pinned": False}

DEFAULT_SUB = "default"   # inference/results/<gpu>/default/: the shipped timeline model of a GPU


def shipped_timeline(slug: str) -> Path:
    """The committed default timeline model of a device slug (in the repository, whatever HASE_HOME says)."""
    return paths.REPO / "inference" / "results" / slug / DEFAULT_SUB / "timeline_model.json"


# This machine's CPU EP, unless a timeline is named: the CPU corpus's node trees (333 models of 67 families, 2 intra-op
# threads, a 2-vCPU AMD EPYC), carried to this CPU by its calibration (machine_calibration.cpu_node_ratios). On a
# 2-vCPU Xeon and models they never saw: 13.5% MAPE on 37 generator models, 13.3% on 12 torchvision models, where the
# main job's own timeline scored 62.8% and 33.5% (inference/results/cpu-intel-r-xeon-r-processor/unseen_vm/)
CPU_FALLBACK = "inference/results/cpu-amd-epyc/corpus/timeline_model.json"
CPU_FALLBACK_MAPE = "13-14% MAPE on a CPU and models it never saw"


def cpu_fallback_timeline() -> Path:
    return paths.REPO / CPU_FALLBACK


# ---------- prediction ----------
def load_timeline_model(cfg: dict, slug: str):
    """(model, path) of the fitted timeline model; (None, path) when there is none."""
    from hase.inference.timeline_model import load
    if cfg["timeline_model"]:
        path = Path(cfg["timeline_model"])
    else:  # the shipped default (measured terms, all-data predictor: training/predictors/<gpu>), measured terms +
        # measured interference (fit_interference.py), measured terms, evaluator.py --fit's; then the shipped default
        # committed in the repository when HASE_HOME points elsewhere
        cands = [paths.inference_results_dir() / slug / sub / "timeline_model.json"
                 for sub in (DEFAULT_SUB, "interference", "measured", ".")]
        cands.insert(len(cands) - 1, shipped_timeline(slug))
        path = next((c for c in cands if c.exists()), cands[-1])
    if not path.exists():
        if cfg["timeline_model"]:
            raise HaseError("file not found", path)
        return None, path
    return load(path), path


def control_flow_risk(kernels) -> str:
    """A warning naming the If/Loop/Scan nodes of a record: each is priced as one kernel, and the nodes of its
    body (ort_graph_parser.subgraph_summary: run once per iteration, or per branch taken) are in no prediction."""
    found = []
    for k in kernels:
        bodies = [v for vs in (k.get("attributes") or {}).values() for v in (vs if isinstance(vs, list) else [vs])
                  if isinstance(v, dict) and "subgraph" in v]
        if bodies:
            found.append(f"{k['id']} ({'/'.join(str(b.get('nodes', '?')) for b in bodies)} body nodes)")
    if not found:
        return ""
    return (f"control flow not modelled: {', '.join(found[:5])}{' ...' if len(found) > 5 else ''} priced as one "
            f"kernel each; the nodes inside the body (run once per iteration or branch taken) are not predicted, "
            f"so the total is a lower bound")


def gpu_slug(model: dict) -> str:
    """The GPU a timeline model was fitted for, from its predictor's folder (inference/results/<gpu>/...); ''."""
    return paths.gpu_of(model.get("predictor_dir"))


def prepare_record(record: dict, predictor, model: dict) -> dict:
    """Load-independent part of a prediction (kernel times at idle); cache it per model."""
    from hase.inference.node_model import NodeModel, kernel_ms as to_ms
    from hase.inference.timeline_model import prepared
    from hase.inference import precision
    kernels = record["kernels"]
    # float16 nodes on the GPU: the trees price their float32 views, the float16 term takes it from there
    # (inference/precision.py); the trees never saw a float16 node
    trained = (getattr(predictor, "manifest", None) or {}).get("float_dtypes") or []
    term = (precision.load_term(precision.term_path(gpu_slug(model)))
            if record.get("device") == "cuda" and "float16" not in trained else None)   # trees that know float16: as is
    priced, f16 = precision.views(kernels) if term else (kernels, None)
    if isinstance(predictor, NodeModel):   # predicts the host dispatch per node too: both trees in one pass
        gpu_us, host = predictor.predict(priced)
        kernel_ms = to_ms(kernels, gpu_us if f16 is None else precision.apply(kernels, gpu_us, f16, term))
    else:
        kernel_ms, host = predictor.predict_kernels(priced, model["idle_load"]), None
        if f16 is not None:
            ids = [k.get("id", str(i)) for i, k in enumerate(kernels)]
            us = precision.apply(kernels, [kernel_ms.get(i, 0.0) * 1e3 for i in ids], f16, term)
            kernel_ms = dict(kernel_ms, **{i: float(v) / 1e3 for i, v in zip(ids, us) if i in kernel_ms})
    prep = prepared(record, kernel_ms, model, node_host_us=host)
    prep["kernel_ms"] = kernel_ms
    prep["standalone_sum_ms"] = float(sum(kernel_ms.values()))
    prep["unseen_types"] = predictor.unseen_types(record["kernels"])
    prep["kin_types"] = predictor.kin_types(record["kernels"]) if hasattr(predictor, "kin_types") else {}
    prep["risks"] = record_risks(record, predictor, term if f16 is not None else None)
    return prep


def record_risks(record: dict, predictor=None, term=None) -> list:
    """The known gaps of the predictor and of the analysis for one record, one line each (inference/node_model.py,
    offline_cuda): every prediction path names them, with kernel times or from a table. term: the float16 term
    that priced its float16 nodes, if one did."""
    from hase.inference.node_model import TRAINED_FLOAT_DTYPES, per_group_risk, precision_risk
    trained = tuple((getattr(predictor, "manifest", None) or {}).get("float_dtypes") or TRAINED_FLOAT_DTYPES)
    risks = [per_group_risk(record["kernels"]) if record.get("device") == "cuda" else "",
             precision_risk(record["kernels"], trained, term), control_flow_risk(record["kernels"])]
    off = record.get("offline") or {}
    if off and not off.get("claimed", True):
        risks.append("graph analysed offline (no CUDA EP on this machine) and not claimed: "
                     + "; ".join(off.get("unclaimed_because") or []))
    return [r for r in risks if r]


def analyse(model_path: Path, device: str, cfg: dict, offline: bool = False) -> dict:
    """Phase 2 record of the model for the target EP (cached by file name, size and mtime). offline: the CUDA EP's
    graph reproduced with the CPU build (ort_analysis/offline_cuda.py), for a machine without a CUDA EP."""
    from hase.ort_analysis import offline_cuda
    from hase.ort_analysis.fusion_detector import build_record, record_path
    # pinned dynamic dims make another graph: in the file name and the key, so a batch-32 analysis never answers
    # for batch 8 (it did: the key was the file alone)
    pins = {str(k): v for k, v in sorted((cfg.get("pin_dims") or {}).items())}
    stem = model_path.stem + "".join(f"@{k}={v}" for k, v in pins.items())
    rp = offline_cuda.record_path(stem) if offline else record_path(stem, device)
    st = model_path.stat()
    key = f"{model_path.resolve()}:{st.st_size}:{int(st.st_mtime)}:pins={json.dumps(pins, sort_keys=True)}"
    if offline:
        key += f":{offline_cuda.METHOD}:{offline_cuda.VERSION}:{offline_cuda.facts_digest()}"
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


def session_options(cfg: dict, field: str = "") -> dict:
    """The session options that change latency, validated: {'cudnn_conv_algo_search', 'io_binding', 'cpu_pinned'}
    (cpu_pinned: the process bound to one CPU, inference/host_setting.py). field: how the caller names them in an
    error ('options.' for the API and the service)."""
    from hase.utils.ort_session import check_cudnn_algo
    algo = check_cudnn_algo(cfg.get("cudnn_conv_algo_search", "EXHAUSTIVE"))
    for k in ("io_binding", "cpu_pinned"):
        if not isinstance(cfg.get(k, False), bool):
            raise HaseError(f"{field}{k} must be true or false, not '{cfg[k]}'")
    return {"cudnn_conv_algo_search": algo, "io_binding": bool(cfg.get("io_binding", False)),
            "cpu_pinned": bool(cfg.get("cpu_pinned", False))}


def host_setting_note(setting, options: dict) -> str:
    if not options.get("cpu_pinned"):
        return "unbound process (ORT's default)"
    from hase.inference import host_setting
    return host_setting.note(setting) if setting else "cpu_pinned asked for, not modelled here: as unbound"


def predict_record(record: dict, predictor, load: dict, model=None, options=None, prep=None) -> dict:
    """Prediction for an analysed model under one load (schedulers: pass prep=prepare_record(...), cached per
    model; it is not modified). options: session_options(); io_binding = inputs and outputs already on the GPU
    (no copies)."""
    options = options or {"cudnn_conv_algo_search": "EXHAUSTIVE", "io_binding": False}
    from hase.graph_model.dag_critical_path import build_dag, calculate_latency
    from hase.inference import timeline_model as tm
    if model is None:  # no fitted timeline: the plan's first version, Σ in ORT's order
        kernel_ms = predictor.predict_kernels(record["kernels"], load)
        total = calculate_latency(build_dag(record), kernel_ms)
        return {"model": record["model"], "device": record["device"], "total_ms": total, "method": "sum",
                "p10_ms": total, "p90_ms": total, "spread_source": "none (no timeline model)",
                "kernel_sum_ms": total, "n_kernels": len(record["kernels"]),
                "kernels": [{"id": k["id"], "type": k["type"], "predicted_ms": kernel_ms[k["id"]]}
                            for k in record["kernels"]], "unseen_types": predictor.unseen_types(record["kernels"])}
    prep = prep if prep is not None else prepare_record(record, predictor, model)
    if record["device"] == "cuda":
        prep = tm.with_options(prep, model, options["cudnn_conv_algo_search"])
    copies = not options["io_binding"]
    spread_q, setting = model.get("spread"), None
    if options.get("cpu_pinned") and record["device"] != "cuda":
        prep = dict(prep, risks=list(prep.get("risks") or []) + [
            "cpu_pinned is modelled for the CUDA EP only (a CPU EP session's intra-op pool spans the CPUs it is "
            "given): predicted as an unbound process"])
    elif options.get("cpu_pinned"):
        from hase.inference import host_setting
        setting = host_setting.pinned_factors(gpu_slug(model))
        if setting is None:
            prep = dict(prep, risks=list(prep.get("risks") or []) + [
                f"cpu_pinned: no host-speed study for this GPU ({gpu_slug(model) or 'unknown'}): predicted as an "
                f"unbound process"])
        else:
            prep, spread_q = host_setting.pinned(prep, spread_q, setting)
    p = model["params"]
    terms = tm.load_terms(load, model["idle_clock_mhz"])
    res = tm.predict_us(prep, p, terms, copies)
    idle = tm.predict_us(prep, p, tm.load_terms(model["idle_load"], model["idle_clock_mhz"]), copies)
    spread = tm.with_spread(prep, p, terms, spread_q, copies, central=res)
    host = prep["h"] * p["kappa"]
    run_share = prep.get("interference") == tm.RUN_SHARE
    # run-level slicing: the neighbour's cost is one run-level term, the kernels keep their idle GPU time
    gpu = tm.gpu_idle_us(prep, p) if run_share else tm.gpu_stretched(tm.gpu_idle_us(prep, p), p, terms)
    return {"model": record["model"], "device": record["device"], "total_ms": res["total_us"] / 1e3,
            "p10_ms": spread["p10"] / 1e3, "p90_ms": spread["p90"] / 1e3,
            "spread_source": (("measured across fresh sessions (host dispatch and copy terms)"
                               + (", widened to the model's own error on architectures and machines it did not see"
                                  if model["spread"].get("residual_log_q") else "")) if model.get("spread")
                              else "none (timeline model without a measured spread)"),
            "session_options": options,
            "host_setting": host_setting_note(setting, options),
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
            "unseen_types": prep["unseen_types"], "kin_types": prep.get("kin_types", {}),
            "risks": prep.get("risks", []),
            "per_node_note": per_node_note(host, record["device"]),
            "_prep": prep, "_host": host, "_gpu": gpu,
            "_copies_us": (res["h2d_us"], res["d2h_us"])}


def write_trace(record: dict, res: dict, model: dict, path: Path) -> None:
    """The predicted timeline as a Chrome trace, drawn by the phase 6.2 simulator."""
    from hase.graph_model.overlap_simulator import simulate, write_chrome_trace
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
    from hase.utils.ort_session import provenance
    here = provenance(device)
    for key, mine in (("gpu_name", here.get("gpu_name")), ("ort_version", here.get("ort_version"))):
        theirs = manifest_meta.get(key)
        if theirs and mine and str(theirs) != str(mine):
            log.warning("predictor trained with %s=%s, this machine has %s: predictions may be off", key, theirs, mine)


def per_node_note(host_us, device: str) -> str:
    """What a negative per-node term means ('' where it is not negative). The CPU EP timeline of
    inference/fit_cpu_timeline.py fits it as (plain wall - Σ ORT-profiled node times) per node: -7.5 us on the
    measured Xeon, where the profiler's own cost inside each node's window exceeds what a node costs beyond its
    compute in a plain session.run. Kept as fitted (its sum with the profiled node times is the measured wall),
    explained in the output."""
    import numpy as np
    h = np.asarray(host_us, float)
    if not len(h) or float(h.sum()) >= 0:
        return ""
    what = "compute column" if device == "cpu" else "host table"
    return (f"per-node overhead is negative ({float(h.mean()):.1f} us a node): a correction, not a cost. The "
            f"{what} is ORT-profiled node time, which holds the profiler's own cost; on the machine measured that "
            f"exceeded what a node costs beyond its compute in a plain session.run, and the fitted term (plain wall "
            f"- Σ profiled node times, per node) takes the excess back out")


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
                 *([f"  {res['per_node_note']}"] if res.get("per_node_note") else []),
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
    if (res.get("session_options") or {}).get("cpu_pinned"):
        lines.append(f"  {res.get('host_setting')}")
    if res.get("host_scale") is not None:   # machine calibration (inference/machine_calibration.py)
        cs = res.get("copy_scales") or {}
        lines.append(f"  host side x{res['host_scale']:.3f} for the target's host speed"
                     + (f", copies x{cs.get('h2d', 1.0):.2f} in and x{cs.get('d2h', 1.0):.2f} out for its "
                        + ("host speed (machine response)" if res.get("machine_response") else "copy rate")
                        if any(v != 1.0 for v in cs.values()) else "")
                     + (f" ({res['calibration_source']})" if res.get("calibration_source") else ""))
    elif res.get("cpu_scales"):
        sc = res["cpu_scales"]
        lines.append("  CPU terms for the target's speed: " + ", ".join(
            f"{k} x{v:.3f}" for k, v in sc.items() if isinstance(v, (int, float)))
            + (f" ({res['calibration_source']})" if res.get("calibration_source") else ""))
    return "\n".join(lines)


def spread_words(res: dict) -> str:
    """The p10-p90 part of the headline: measured across fresh sessions, the time-slicing mixture of runs, or
    'no spread measured for this machine' (a timeline model fitted without repeated sessions)."""
    measured = not str(res.get("spread_source", "none")).startswith("none")
    mixture = res.get("interference_model") == "run_share" and res["neighbour_busy"] > 0
    rng = f"{res['p10_ms']:.3f}-{res['p90_ms']:.3f} ms"
    wide = f"{res['p90_ms']:.3f}" != f"{res['p10_ms']:.3f}"   # a zero-width spread says nothing
    if measured and wide:
        own = " and the model's own error" if "own error" in str(res.get("spread_source")) else ""
        return f"p10-p90 across {'runs and fresh sessions' if mixture else 'fresh sessions'}{own} {rng}"
    if wide and res["p90_ms"] > res["p10_ms"]:
        return f"p10-p90 across runs (time slicing) {rng}; no session-to-session spread measured for this machine"
    return "no spread measured for this machine"


def idle_above_loaded(res: dict, model) -> str:
    """A warning when the prediction at idle exceeds the one under the current load by more than the spread (p90 -
    p10; 2% of the idle figure where none was measured): the timeline model's idle reference was itself taken
    under load. None otherwise."""
    if res["method"] != "timeline":
        return None
    tol = max(res["p90_ms"] - res["p10_ms"], 0.02 * res["idle_ms"])
    if res["idle_ms"] - res["total_ms"] <= tol:
        return None
    from hase.benchmark.gpu_metrics import busy_reading
    field, value, _ = busy_reading((model or {}).get("idle_load", {}), BG)
    ref = f" (its idle_load has {BG}{field} = {value:.3g})" if field else ""
    return (f"the idle prediction {res['idle_ms']:.3f} ms exceeds the one under the current load {res['total_ms']:.3f} "
            f"ms by more than the spread ({tol:.3f} ms): the timeline model's idle reference was measured under "
            f"load{ref}; fit it again on an idle machine")
