"""The `hase` command: one entry point over the phase scripts' main()s, plus `predict` on the Predictor API.

    hase predict model.onnx [--gpu nvidia-h200|nvidia-h100 | --device cpu] [--metrics-file F | --prometheus URL]
                 [--json F] [--trace F]
    hase serve [--host H] [--port P]
    hase <phase command> ...   (pipeline, export, analyse, collect, train, evaluate, agent, trace, build-predictor,
                               gpu-job):
                               the same arguments as the script itself; `hase <command> --help`
"""
import argparse
import importlib
import json
import sys
from pathlib import Path

# command -> (module whose main() it runs, what it does). Each script also runs as `python path/to/script.py`.
COMMANDS = {
    "pipeline": ("hase.utils.pipeline", "the main job: every phase in order (utils/pipeline.py)"),
    "export": ("hase.model_zoo.torchvision_exporter", "phase 1: export torchvision models to ONNX"),
    "analyse": ("hase.ort_analysis.fusion_detector", "phase 2: the kernels ORT runs for a model, per EP"),
    "collect": ("hase.benchmark.collector", "phase 4: measure kernels and models under loads"),
    "train": ("hase.training.train_kernel_model", "phase 5: train the kernel predictor on phase 4's CSV"),
    "predict": (None, "predict a model's session.run latency (Predictor API)"),
    "evaluate": ("hase.evaluator", "judge predictions against measurements (evaluator.py)"),
    "agent": ("hase.inference.node_agent", "node agent: DCGM fields + launch-wait probe for Prometheus"),
    "serve": ("hase.service", "the prediction service for schedulers (FastAPI on uvicorn)"),
    "trace": ("hase.benchmark.trace_run", "measured timelines of models in fresh sessions"),
    "calibrate": ("hase.benchmark.host_calibration", "this node's host dispatch, copy and CPU-EP speed (a profile JSON)"),
    "build-predictor": ("hase.training.build_predictor", "build a GPU's shipped compact predictor from its kernel space"),
    "gpu-job": ("hase.benchmark.gpu_job", "run a GPU job declared in benchmark/gpu_jobs.yaml (--list shows them)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: hase COMMAND [ARGS...]", "",
             "Predict ONNX Runtime latency on NVIDIA GPUs and the CPU EP under load.", "", "commands:"]
    lines += [f"  {c:<{width}}  {d}" for c, (_, d) in COMMANDS.items()]
    lines += ["", "hase COMMAND --help shows a command's arguments."]
    return "\n".join(lines)


def predict_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hase predict", description="Predict a model's session.run latency under the "
                                "current load, without running it (prints the central value, p10-p90, breakdown)")
    p.add_argument("model", type=Path, help="an ONNX model, or a phase 2 record (.json/.json.xz) for the target EP")
    tgt = p.add_mutually_exclusive_group()
    tgt.add_argument("--gpu", help="target GPU: nvidia-h200 or nvidia-h100 (need not be on this machine)")
    tgt.add_argument("--device", choices=["cpu", "cuda", "auto"], help="this machine's EP (default: auto)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--metrics-file", type=Path, help="JSON {DCGM field: value} of the GPU's background load")
    src.add_argument("--prometheus", metavar="URL", help="read the load from Prometheus (e.g. http://host:9090)")
    p.add_argument("--calibration", type=Path, help="host calibration profile of the target node "
                   "(benchmark/host_calibration.py --set out=F): host dispatch scaled by it; on the CPU EP also the "
                   "compute lines, at the same thread count")
    cal = p.add_mutually_exclusive_group()
    cal.add_argument("--calibrate", dest="calibrate", action="store_true", default=None,
                     help="calibrate this machine now (about 1-2 s) and scale the host-side terms by it; the default "
                     "for this machine's GPU (--device cuda/auto), where no --calibration or Prometheus gauge is given")
    cal.add_argument("--no-calibrate", dest="calibrate", action="store_false",
                     help="do not calibrate this machine: the training machines' host speed")
    p.add_argument("--selector", help="Prometheus label selector of the GPU (default: inference/config.yaml's)")
    p.add_argument("--json", type=Path, help="write the prediction (all fields, per-node breakdown) here")
    p.add_argument("--trace", type=Path, help="write the predicted timeline as a Chrome trace (ui.perfetto.dev)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override an inference/config.yaml key (e.g. io_binding=true, timeline_model=...)")
    p.add_argument("--top", type=int, default=15, help="rows of the per-kernel breakdown printed")
    p.add_argument("--sweep", metavar="DIM=V1,V2,...", help="predict the model with its dynamic dim DIM (e.g. the "
                   "batch) pinned to each value, one analysis each: a table of latency, p10-p90 and DIM per second")
    p.add_argument("--slo-ms", type=float, metavar="MS", help="with --sweep: the largest value whose p90 stays "
                   "within MS")
    return p


def parse_sweep(text: str) -> tuple:
    """'N=1,8,32' -> ('N', [1, 8, 32]); a one-line error naming --sweep otherwise."""
    from hase.utils.errors import HaseError
    dim, _, vals = str(text).partition("=")
    try:
        sizes = [int(v) for v in vals.split(",") if v.strip()]
    except ValueError:
        sizes = []
    if not dim.strip() or not sizes or any(v <= 0 for v in sizes):
        raise HaseError(f"--sweep {text}: expected DIM=V1,V2,... with whole numbers > 0 (e.g. --sweep N=1,8,32)")
    return dim.strip(), sizes


def format_sweep(model: str, target: str, dim: str, rows: list, slo_ms=None) -> str:
    """The sweep as a table: one row per value (latency, p10-p90, values of DIM per second at the central value)."""
    lines = [f"{model} on {target}, {dim} swept (one analysis each):",
             f"  {dim:>8s} {'latency_ms':>11s} {'p10-p90_ms':>17s} {dim + '/s':>12s}" + ("  within SLO" if slo_ms else "")]
    for v, r in rows:
        lines.append(f"  {v:>8d} {r.total_ms:>11.3f} {f'{r.p10_ms:.3f}-{r.p90_ms:.3f}':>17s} "
                     f"{v / r.total_ms * 1e3:>12.0f}" + (f"  {'yes' if r.p90_ms <= slo_ms else 'no'}" if slo_ms else ""))
    note = rows[0][1].details.get("host_setting", "") if rows else ""
    if rows and (rows[0][1].provenance.get("session_options") or {}).get("cpu_pinned"):
        lines.append(f"  {note}")
    if slo_ms:
        ok = [v for v, r in rows if r.p90_ms <= slo_ms]
        lines.append(f"  largest {dim} with p90 <= {slo_ms:g} ms: {max(ok)}" if ok else
                     f"  no {dim} swept has p90 <= {slo_ms:g} ms")
    return "\n".join(lines)


def predict_main(argv) -> int:
    from hase.api import load_predictor
    from hase.inference.load_sources import AGE, TS, WAIT, load_from_file, load_from_prometheus
    from hase.inference.runtime import DEFAULTS, format_prediction, predict_record, write_trace
    from hase.utils import paths
    from hase.utils.config import combine_overrides, resolve
    from hase.utils.errors import HaseError
    args = predict_parser().parse_args(argv)
    cfg = resolve(DEFAULTS, paths.phase_config("inference"), args.overrides)
    if not args.model.is_file():
        raise HaseError("file not found" if not args.model.exists() else "not a file", args.model)
    local = False
    calibration = args.calibration
    if args.gpu:
        target = args.gpu
    else:
        from hase.utils.ort_session import device_slug, resolve_device
        dev = resolve_device(args.device or cfg["device"])
        target, local = ("cpu" if dev == "cpu" else device_slug("cuda")), True
    overrides = combine_overrides(args.overrides)   # --set pin_dims.a=1 --set pin_dims.b=2: both dims
    pred = load_predictor(target, config=overrides or None)
    warn = []
    if args.metrics_file:
        load = pred.check_load(load_from_file(args.metrics_file), str(args.metrics_file))
        load = (*load, f"file {args.metrics_file}")
    elif args.prometheus:
        pcfg = dict(cfg["prometheus"], url=args.prometheus)
        if args.selector:
            pcfg["selector"] = args.selector
        got = load_from_prometheus(pcfg, pred.fields, optional=(WAIT, AGE, TS))
        load = (*pred.check_load(got, f"prometheus {args.prometheus}"), f"prometheus {args.prometheus}")
        if args.calibration is None:   # the node agent's hase_calib_* gauges, when it exports them
            from hase.inference.machine_calibration import from_prometheus
            calibration = from_prometheus(pcfg)
    elif local:
        from hase.inference.load_sources import current_load
        ld, src, info, w = current_load(cfg, pred.device, pred.fields)
        load = (ld, info, w, src)
    else:
        load = None
        warn.append(f"no load given for {target} (not this machine's device): predicted at idle; pass "
                    f"--metrics-file or --prometheus")
    if calibration is None and (args.calibrate or (args.calibrate is None and local and pred.device == "cuda")):
        # this GPU's host speed (issue 23). Not by default on the CPU EP: a CPU timeline is normally this machine's
        # own; where it has none, the Predictor calibrates the shipped fallback itself (hase.api, README CPU EP)
        calibration = "local"
    elif calibration is None and args.calibrate is False:   # --no-calibrate: not even a CPU fallback's own
        calibration = False
    if args.sweep or args.slo_ms is not None:
        if not args.sweep or args.trace:
            raise HaseError("--slo-ms needs --sweep" if not args.sweep else "--trace takes one model, not a --sweep")
        if args.slo_ms is not None and not args.slo_ms > 0:
            raise HaseError(f"--slo-ms {args.slo_ms}: expected a latency in ms > 0")
        dim, sizes = parse_sweep(args.sweep)
        rows = pred.sweep(args.model, dim, sizes, load, calibration=calibration)
        print(format_sweep(rows[0][1].model, target, dim, rows, args.slo_ms))
        for w in warn + list(dict.fromkeys(w for _, r in rows for w in r.warnings)):
            print(f"warning: {w}", file=sys.stderr)
        if args.json:
            paths.atomic_write_text(args.json, json.dumps({"dim": dim, "slo_ms": args.slo_ms, "points": [
                dict(r.to_dict(), value=v) for v, r in rows]}, indent=1, default=float) + "\n")
        return 0
    res = pred.predict(args.model, load, calibration=calibration)
    text = {**res.details, "model": res.model, "device": pred.device, "total_ms": res.total_ms, "p10_ms": res.p10_ms,
            "p90_ms": res.p90_ms, "idle_ms": res.idle_ms, "kernels": res.breakdown,
            "load_source": res.provenance.get("load_source")}   # local sampling: its window and the busy field's noise
    print(format_prediction(text, args.top))
    for w in warn + res.warnings:
        print(f"warning: {w}", file=sys.stderr)
    if args.trace:
        if pred.model is None:
            raise HaseError("a trace needs a timeline model", pred.timeline_path)
        record = pred._record(args.model)
        ld = res.details["load"]
        full = predict_record(record, pred.predictor, ld, pred.model, res.provenance["session_options"],
                              prep=pred.prepared(record))
        write_trace(record, full, pred.model, args.trace)
        print(f"predicted timeline written to {args.trace} (open in ui.perfetto.dev)", file=sys.stderr)
    if args.json:
        paths.atomic_write_text(args.json, json.dumps(res.to_dict(), indent=1, default=float) + "\n")
    return 0


def main(argv=None) -> None:
    from hase.utils.errors import run_main
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        sys.exit(0 if argv else 2)
    if argv[0] in ("-V", "--version"):
        from hase import __version__
        print(f"hase {__version__}")
        sys.exit(0)
    cmd, rest = argv[0], argv[1:]
    if cmd not in COMMANDS:
        print(f"error: unknown command '{cmd}' (hase --help lists them)", file=sys.stderr)
        sys.exit(2)
    if cmd == "predict":
        run_main(lambda: predict_main(rest))
    module = importlib.import_module(COMMANDS[cmd][0])
    sys.argv = [f"hase {cmd}", *rest]
    run_main(module.main)


if __name__ == "__main__":
    main()
