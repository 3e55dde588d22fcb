"""Phase 7.1: predict a model's session.run latency under the current load, without timing it.

  python inference/predict_model_latency.py --model resnet18.onnx [--device cuda]
         [--metrics-file snapshot.json] [--json out.json] [--trace timeline.json]

Steps: phase 2 analysis of the model for the target EP -> phase 5 regressors' time of every kernel
at idle -> the timeline model of ORT's run (inference/timeline_model.py: host dispatch per node,
GPU stream in order, input/output copies, fixed cost) -> the neighbour's time-slice interference
from the background load -> total ms, with the per-kernel breakdown (host us, GPU us, which side
bounds it) and, with --trace, the predicted timeline as a Chrome trace (ui.perfetto.dev).
The timeline model's constants come from evaluator.py --fit (inference/results/<slug>/
timeline_model.json); without that file the plain Σ of the kernels in ORT's order is reported.

Load fields (the predictor's inputs) are exactly the DCGM fields the regressors were trained on,
from --metrics-file (JSON {field: value}), Prometheus (config prometheus.url) or local sampling.
The launch-wait probe (inference/node_agent.py) comes from the same source when it is there:
HASE_LAUNCH_WAIT_US (us per launch onto an idle stream) with HASE_LAUNCH_WAIT_AGE_S or
HASE_LAUNCH_WAIT_TIMESTAMP_S (unix s); locally the probe runs briefly when probe.idle_probe_us is
set. It replaces the fitted beta_us * u; absent or older than probe.max_age_s, the prediction is
DCGM-only, with a warning naming the field. The JSON's wait_source says which one was used.
"""
import json
import time
import warnings
from pathlib import Path



from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import device_slug, resolve_device  # noqa: E402

# the runtime lives in library modules (inference/runtime.py, inference/load_sources.py); these names stay
# importable from here
from hase.inference.load_sources import (AGE, BG, DCGM_ONLY, TS, WAIT, current_load, launch_wait,  # noqa: E402,F401
                                    load_from_file, load_from_prometheus, load_local, probe_local, prom_value,
                                    promql_of, SAMPLE_CHUNK_S, UnknownFieldWarning, check_snapshot,
                                    describe_window, sampled_enough)
from hase.inference.runtime import (DEFAULTS, analyse, check_ep, check_provenance, format_prediction,  # noqa: E402,F401
                               load_timeline_model, predict_record, prepare_record, session_options, write_trace,
                               idle_above_loaded, spread_words)


def main() -> int:
    p = base_parser("Phase 7: predict whole-model latency under the current load", "inference")
    p.add_argument("--model", required=True, type=Path)
    p.add_argument("--metrics-file", type=Path, help="JSON {DCGM field: value} of the current background load")
    p.add_argument("--json", type=Path, help="write the prediction and per-kernel breakdown here")
    p.add_argument("--trace", type=Path, help="write the predicted timeline as a Chrome trace here")
    p.add_argument("--gpu", help="predict for this GPU (its folder name, e.g. nvidia-h200: inference/results/<gpu>/, "
                                 "training/models/<gpu>) on the CUDA EP; on a machine without a CUDA EP the CUDA "
                                 "EP's graph is reproduced offline (ort_analysis/offline_cuda.py), and it says so")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("inference", args.log_level)
    if not args.model.is_file():  # before any load is sampled: that can take seconds or need a server
        raise HaseError("file not found" if not args.model.exists() else "not a file", args.model)
    offline, offline_why = False, None
    if args.gpu:
        from hase.utils.ort_session import cuda_probe
        if args.device == "cpu":
            raise HaseError("--gpu predicts for the CUDA EP; it cannot go with --device cpu")
        device, slug = "cuda", args.gpu
        ok, offline_why = cuda_probe()
        offline = not ok
    else:
        device = resolve_device(cfg["device"])
        slug = device_slug(device)
    from hase.inference import timeline_model as tm
    from hase.training.train_kernel_model import load_predictor
    model, mpath = load_timeline_model(cfg, slug)
    pdir = tm.predictor_of(model, cfg["predictor_dir"]) or paths.train_models_dir() / slug
    predictor = load_predictor(pdir)
    check_ep(predictor, device, pdir)
    check_provenance(predictor.manifest.get("metadata", {}), device, log)
    options = session_options(cfg)
    # the predictor's load features and what the timeline itself reads (a kernel-space predictor has none)
    fields = list(dict.fromkeys([f[len(BG):] for f in predictor.load_fields] + tm.load_fields_of(model, device)))
    if offline:
        log.warning("no CUDA EP on this machine (%s): the CUDA EP's graph for %s is reproduced offline with the "
                    "CPU build of onnxruntime (ort_analysis/offline_cuda.py)", offline_why, slug)
    if offline and not args.metrics_file and not cfg["prometheus"]["url"]:
        # the target GPU is not here: nothing to sample; its timeline model's idle load stands for it
        if model is None:
            raise HaseError(f"no load source for {slug} (--metrics-file or prometheus.url) and no timeline model "
                            f"with an idle load", mpath)
        load, src = dict(model["idle_load"]), f"idle (no {slug} here to sample: the timeline model's idle load)"
        wait_info, wait_warning = {"wait_source": DCGM_ONLY}, None
        log.warning("no load source for %s (--metrics-file or prometheus.url): predicting at idle", slug)
    else:
        with warnings.catch_warnings(record=True) as caught:   # unknown fields of the snapshot: one warning
            warnings.simplefilter("always")
            load, src, wait_info, wait_warning = current_load(cfg, device, fields, args.metrics_file)
        for w in caught:
            log.warning("%s", w.message)
    if wait_warning:
        log.warning("%s", wait_warning)
    if model and model.get("threads"):
        log.info("the timeline model is for sessions with %s intra-op threads (ORT's intra_op_num_threads)",
                 model["threads"])
    t0 = time.perf_counter()
    record = analyse(args.model, device, cfg, offline=offline)
    t1 = time.perf_counter()
    if offline and record["offline"]["claimed"]:   # not claimed: the prediction's risks say why
        log.info("offline analysis: claimed (its ops seen on the CUDA EP in GPU records, float32, no CUDA-only "
                 "rewrite)")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = predict_record(record, predictor, load, model, options)
    t2 = time.perf_counter()
    for w in [c.message for c in caught] + list(res.get("risks") or []):
        log.warning("%s", w)
    # the first call also loads the tree models into ORT; a scheduler keeps them loaded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        predict_record(record, predictor, load, model, options)
    if model is None:  # the plain sum has no launches to wait at
        wait_info = {**wait_info, "wait_source": "unused (no timeline model)"}
    res.update({"load": load, "load_source": src, **wait_info, "predict_s": t2 - t1,
                "predict_warm_s": time.perf_counter() - t2,
                "analyse_s": t1 - t0,
                "predictor_dir": str(pdir), "timeline_model": str(mpath) if model else None,
                "intra_op_threads": (model or {}).get("threads"), "gpu": slug,
                "analysis": ({"offline": True, "why": offline_why, **{k: record["offline"][k] for k in
                              ("method", "claimed", "unclaimed_because")}} if offline else {"offline": False})})
    if offline:
        print(f"# {slug}, CUDA EP: graph analysed offline (no CUDA EP here; ort_analysis/offline_cuda.py, "
              f"{'claimed' if record['offline']['claimed'] else 'NOT claimed'})")
    print(format_prediction(res, cfg["top_kernels"]))
    odd = idle_above_loaded(res, model)
    if odd:
        log.warning("%s", odd)
    if args.trace:
        if model is None:
            raise HaseError("a trace needs the fitted timeline model (evaluator.py --fit)", mpath)
        write_trace(record, res, model, args.trace)
        log.info("predicted timeline written to %s (open in ui.perfetto.dev)", args.trace)
    if args.json:
        out = {k: v for k, v in res.items() if not k.startswith("_")}
        paths.atomic_write_text(args.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    run_main(main)
