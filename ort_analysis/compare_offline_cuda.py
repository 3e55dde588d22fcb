"""Check the offline CUDA-EP analysis (ort_analysis/offline_cuda.py, CPU build) against kernel records made on
a GPU, model by model.

  python ort_analysis/compare_offline_cuda.py [--records R.json.xz ...] [--export] [--out DIR]

Records: files {model: record} (records.json.xz, how GPU jobs bring them) or single <model>.cuda.json[.gz]
records; default: every committed nvidia-*/*.json.xz. New GPU records are compared by pointing at them.
The model files are <models_dir>/<model>.onnx (phase 1's and model_zoo/build_corpus.py's names); `--export`
exports a missing torchvision one (<arch>_bs<B>_<H>x<W>, on the CPU) first; a model without a file is reported as
not compared.

Per model:
  kernel list   the kernel types in ORT's order and their counts (the GPU record's against the offline one's)
  kernels       and kernel for kernel: the same kernel at every position (type, op, attributes, input/output shapes and
                dtypes, integer constants: kernel_key) and the same edges between kernels
  prediction    inference/predict_model_latency.predict_record on both records at the timeline model's idle load,
                for each timeline model that can run here (its predictor built): the relative difference
Writes <out>/summary.json (and prints a table); exit status 0 whatever the result (the CI test judges).
"""
import json
import re
import warnings
from collections import Counter
from pathlib import Path


from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402

DEFAULTS = {"records": ["ort_analysis/ort_kernel_record/nvidia-*/*.json.xz"], "models_dir": "",
            "models": [],   # restrict to these record names ([] = all)
            "gpu": "nvidia-h200",  # whose timeline models predict (inference/results/<gpu>/...)
            "timeline_models": ["measured_cupti_lines", "interference"],
            "pin_dims": {}, "seed": 0, "keep_small_values": 64}
STEM = re.compile(r"(?P<arch>.+)_bs(?P<b>\d+)_(?P<h>\d+)x(?P<w>\d+)$")


def gpu_records(patterns) -> dict:
    """{model: GPU record} from the given files/globs (later files win); offline records are skipped."""
    from hase.graph_model.dag_critical_path import load_record, records_in_file
    out = {}
    for f in paths.expand_globs([str(paths.REPO / p) if not Path(p).is_absolute() else p for p in patterns]):
        recs = records_in_file(f) if f.name.endswith(".json.xz") else {None: load_record(f)}
        for m, rec in recs.items():
            if rec.get("device") != "cuda" or rec.get("offline"):
                continue
            where = str(f.relative_to(paths.REPO)) if f.is_relative_to(paths.REPO) else str(f)
            out[m or rec["model"]] = {**rec, "_from": where}
    return out


def kernel_list(rec: dict) -> list:
    return [k["type"] for k in rec["kernels"]]


def edge_set(rec: dict) -> set:
    return {(e["src"], e["dst"]) for e in rec["edges"]}


def kernel_key(k: dict) -> str:
    """What makes a kernel the kernel it is: its signature's fields (fusion_detector.signature) less the values of
    float constants (random weights differ from one export to the next; integer ones, e.g. a Reshape's shape, stay)."""
    def inp(e):
        if not e:
            return None
        v = e.get("value") if not str(e.get("dtype") or "").startswith("float") else None
        return (e["shape"], e["dtype"], "initializer" if e["role"] in ("const", "weight") else e["role"], v)
    return json.dumps({"t": k["type"], "op": k["op_type"], "d": k["domain"], "a": k["attributes"],
                       "i": [inp(e) for e in k["inputs"]], "o": [(o["shape"], o["dtype"]) for o in k["outputs"]]},
                      sort_keys=True)


def compare_records(gpu: dict, off: dict) -> dict:
    """How an offline record differs from the GPU one: kernel list (types in order, counts), kernel for kernel."""
    tg, to = kernel_list(gpu), kernel_list(off)
    cg, co = Counter(tg), Counter(to)
    sig_g, sig_o = [kernel_key(k) for k in gpu["kernels"]], [kernel_key(k) for k in off["kernels"]]
    out = {"kernels_gpu": len(tg), "kernels_offline": len(to),
           "original_nodes": [gpu.get("original_node_count"), off.get("original_node_count")],
           "types_in_order": tg == to, "type_counts": cg == co,
           "signatures": sig_g == sig_o, "edges": edge_set(gpu) == edge_set(off)}
    out["kernel_list_match"] = out["types_in_order"] and out["type_counts"]
    out["kernel_for_kernel"] = out["kernel_list_match"] and out["signatures"] and out["edges"]
    if cg != co:
        out["count_diff"] = {t: [cg.get(t, 0), co.get(t, 0)] for t in sorted(set(cg) | set(co))
                             if cg.get(t, 0) != co.get(t, 0)}
    i = next((i for i, (a, b) in enumerate(zip(sig_g, sig_o)) if a != b), None)
    if i is None and len(sig_g) != len(sig_o):
        i = min(len(sig_g), len(sig_o))
    if i is not None:
        def at(rec, j):
            if j >= len(rec["kernels"]):
                return None
            k = rec["kernels"][j]
            return {"id": k["id"], "node": k["node_name"],
                    "in": [e["shape"] for e in k["inputs"] if e and e["role"] == "activation"],
                    "out": [o["shape"] for o in k["outputs"]]}
        out["first_difference"] = {"index": i, "gpu": at(gpu, i), "offline": at(off, i)}
    return out


class NoKernelPredictor:
    """For a timeline model whose GPU times come from its own CUPTI table (gpu_table): it needs no kernel predictor;
    predict_record still asks one for standalone times, which that model does not use."""
    device = "cuda"
    load_fields = []

    def predict_kernels(self, kernels, load):
        return {k["id"]: 0.0 for k in kernels}

    def unseen_types(self, kernels):
        return []


def timeline_models(gpu: str, names, log) -> dict:
    """{name: (timeline model, predictor)} of those that can run here; a missing predictor is logged."""
    from hase.inference import timeline_model as tm
    from hase.training.train_kernel_model import load_predictor
    out = {}
    for name in names:
        path = paths.inference_results_dir() / gpu / name / "timeline_model.json"
        if not path.exists():
            path = paths.REPO / "inference" / "results" / gpu / name / "timeline_model.json"
        if not path.exists():
            log.warning("timeline model %s: no %s", name, path)
            continue
        model = tm.load(path)
        try:
            pdir = tm.predictor_of(model)
        except HaseError as e:
            log.warning("timeline model %s skipped: %s", name, e)
            continue
        out[name] = (model, NoKernelPredictor() if pdir is None else load_predictor(pdir))
    return out


def predict_idle(rec: dict, model: dict, predictor) -> float:
    from hase.inference.predict_model_latency import predict_record
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(predict_record(rec, predictor, model["idle_load"], model)["total_ms"])


def model_file(models_dir: Path, name: str, export: bool, log) -> Path:
    f = models_dir / f"{name}.onnx"
    if f.exists() or not export:
        return f
    m = STEM.match(name)
    if not m:
        raise HaseError(f"cannot export '{name}': not <arch>_bs<B>_<H>x<W>")
    from hase.model_zoo.torchvision_exporter import build_torch_model, export_one
    log.info("exporting %s (torchvision, CPU)", name)
    models_dir.mkdir(parents=True, exist_ok=True)
    export_one(build_torch_model(m["arch"], int(m["h"])), int(m["b"]), int(m["h"]), 17, f)
    return f


def offline_record(onnx: Path, cfg: dict, log) -> dict:
    """The offline record of a model file, cached beside the others by file size and mtime."""
    from hase.ort_analysis import offline_cuda
    rp = offline_cuda.record_path(onnx.stem)
    st = onnx.stat()
    key = f"{onnx.resolve()}:{st.st_size}:{int(st.st_mtime)}:{offline_cuda.METHOD}:{offline_cuda.VERSION}"
    if rp.exists():
        rec = json.loads(rp.read_text())
        if rec.get("cache_key") == key:
            return rec
    rec = offline_cuda.analyse(onnx, cfg["pin_dims"], cfg["seed"], cfg["keep_small_values"], log)
    rec["cache_key"] = key
    paths.atomic_write_text(rp, json.dumps(rec, indent=1) + "\n")
    return rec


def compare_all(cfg: dict, export: bool, log) -> dict:
    from hase.utils.progress import progress
    recs = gpu_records(cfg["records"])
    if cfg["models"]:
        missing = [m for m in cfg["models"] if m not in recs]
        if missing:
            raise HaseError(f"no GPU record for {missing[0]}")
        recs = {m: recs[m] for m in cfg["models"]}
    models_dir = Path(cfg["models_dir"]) if cfg["models_dir"] else paths.models_dir()
    tms = timeline_models(cfg["gpu"], cfg["timeline_models"], log)
    rows = {}
    for name in progress(sorted(recs), desc="compare", unit="model"):
        gpu = recs[name]
        try:
            f = model_file(models_dir, name, export, log)
        except HaseError as e:   # not a torchvision name (a generated corpus model): its file must be there
            rows[name] = {"compared": False, "why": f"no model file and cannot export it: {e}"}
            continue
        if not f.exists():
            rows[name] = {"compared": False, "why": f"no model file {f} (--export makes it)"}
            continue
        off = offline_record(f, cfg, log)
        row = {"compared": True, "gpu_record": gpu["_from"], **compare_records(gpu, off),
               "claimed": off["offline"]["claimed"], "unclaimed_because": off["offline"]["unclaimed_because"],
               "gpu_ort": gpu.get("provenance", {}).get("ort_version"),
               "offline_ort": off["offline"]["ort_version"], "prediction_ms": {}}
        for tname, (model, predictor) in tms.items():
            a, b = predict_idle(gpu, model, predictor), predict_idle(off, model, predictor)
            row["prediction_ms"][tname] = {"gpu_record": a, "offline_record": b, "rel_diff": (b - a) / a}
        rows[name] = row
        log.info("%s: kernel list %s, kernel for kernel %s%s", name, "same" if row["kernel_list_match"] else "DIFFERS",
                 "yes" if row["kernel_for_kernel"] else "NO",
                 "".join(f", {t} {100 * p['rel_diff']:+.3f}%" for t, p in row["prediction_ms"].items()))
    done = [r for r in rows.values() if r["compared"]]
    claimed = [r for r in done if r["claimed"]]

    def share(rs, key):
        return sum(1 for r in rs if r[key]) / len(rs) if rs else None
    diffs = {t: [abs(r["prediction_ms"][t]["rel_diff"]) for r in done if t in r["prediction_ms"]] for t in tms}
    from hase.ort_analysis import offline_cuda
    from hase.utils.ort_session import provenance
    return {"what": "offline CUDA-EP analysis (ort_analysis/offline_cuda.py, CPU build) against GPU records",
            "provenance": provenance("cpu"),
            "analysis": {"method": offline_cuda.METHOD, "version": offline_cuda.VERSION},
            "records": cfg["records"], "models": len(rows), "compared": len(done), "claimed": len(claimed),
            "kernel_list_match": sum(1 for r in done if r["kernel_list_match"]),
            "kernel_for_kernel": sum(1 for r in done if r["kernel_for_kernel"]),
            "kernel_list_match_share": share(done, "kernel_list_match"),
            "claimed_kernel_for_kernel_share": share(claimed, "kernel_for_kernel"),
            "prediction_abs_rel_diff_max": {t: max(v) if v else None for t, v in diffs.items()},
            "timeline_models": {t: str(m[0].get("gpu_source") or "") for t, m in tms.items()},
            "per_model": rows}


def format_table(s: dict) -> str:
    tn = list(s["timeline_models"])
    head = (f"{'model':34s} {'kernels':>9s} {'list':>5s} {'k4k':>4s} {'claim':>5s} "
            + " ".join(f"{t[:22]:>22s}" for t in tn))
    lines = [head]
    for m, r in s["per_model"].items():
        if not r["compared"]:
            lines.append(f"{m:34s} not compared: {r['why']}")
            continue
        k = f"{r['kernels_gpu']}/{r['kernels_offline']}"
        pr = " ".join(f"{100 * r['prediction_ms'][t]['rel_diff']:+21.4f}%" if t in r["prediction_ms"] else f"{'-':>22s}"
                      for t in tn)
        lines.append(f"{m:34s} {k:>9s} {'yes' if r['kernel_list_match'] else 'NO':>5s} "
                     f"{'yes' if r['kernel_for_kernel'] else 'NO':>4s} {'yes' if r['claimed'] else 'no':>5s} {pr}")
    lines.append(f"{s['kernel_list_match']}/{s['compared']} same kernel list, {s['kernel_for_kernel']}/{s['compared']} "
                 f"kernel for kernel, {s['claimed']} claimed; max |prediction difference|: " +
                 ", ".join(f"{t} {100 * v:.4f}%" for t, v in s["prediction_abs_rel_diff_max"].items() if v is not None))
    return "\n".join(lines)


def main() -> int:
    p = base_parser("Check the offline CUDA-EP analysis against GPU kernel records", "ort_analysis",
                    "compare_offline_cuda.yaml")
    p.add_argument("--records", action="append",
                   help="GPU records: records.json.xz or <model>.cuda.json[.gz] (repeatable)")
    p.add_argument("--export", action="store_true", help="export missing model files from torchvision first")
    p.add_argument("--out", type=Path, help="folder for summary.json (default: print only)")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    if args.records:
        cfg["records"] = args.records
    log = get_logger("ort_analysis", args.log_level)
    s = compare_all(cfg, args.export, log)
    print(format_table(s))
    if args.out:
        paths.atomic_write_text(args.out / "summary.json", json.dumps(s, indent=1, default=float) + "\n")
        save_resolved(cfg, args.out)
    return 0


if __name__ == "__main__":
    run_main(main)
