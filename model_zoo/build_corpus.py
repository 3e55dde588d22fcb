"""Phase 1b: export the corpus (model_zoo/corpus_split.yaml) to ONNX, several architectures in parallel.

  python model_zoo/build_corpus.py --set split=train [--set workers=12]
  python model_zoo/build_corpus.py --set 'archs=[vit-s3, swin-s0]' --set max_configs=1
  python model_zoo/build_corpus.py --set 'archs=[resnet50, vit-s2]' --set dtype=float16   # float16 twins
  python model_zoo/build_corpus.py --set split=exam --set chunk=2/4   # the 2nd quarter of the exam's architectures

Each architecture: its configs (generator.arch_spec; a config over `max_gflop` per run gets the largest
power-of-two batch under it), exported with opset 17, and the first config validated against PyTorch on
the CPU EP (random weights; relative error <= tolerance). Writes model_zoo/models/<arch>_bs<B>_<H>x<W>.onnx
and corpus_manifest.json (family, split, config, GFLOP per run, parameters, validation). Resumable: files
already exported are kept. An architecture that fails (an exporter without a rule for one of its ops) is
logged and listed under `failed`, and the rest go on.
"""
import json
import math
import time
from pathlib import Path


import numpy as np  # noqa: E402

from hase.model_zoo.corpus import load_split  # noqa: E402
from hase.model_zoo.generator import build_model, file_stem, forward_gflop, input_shape, spec_of  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.progress import progress  # noqa: E402

DEFAULTS = {"split": "all", "split_file": "model_zoo/corpus_split.yaml", "archs": [], "workers": 1, "max_gflop": 600.0, "max_configs": 3, "opset": 17,
            "validate": True, "tolerance": 1e-3, "seed": 0, "dtype": "float32", "tolerance_float16": 0.05,
            "chunk": ""}
# chunk "i/n": the i-th of n parts of the split's architectures (sorted, every n-th from the i-th, so each part mixes
# families), for an exam spread over several machines when one session's device time does not hold it all
# dtype float16: each architecture's configs exported again as a float16 twin, <arch>-fp16_bs<B>_<H>x<W> (weights,
# input and every float tensor in float16, as model.half() exports it). A twin is no architecture of the split
# (manifest split 'precision_twin', twin_of <arch>): no fit trains on it and no exam scores it; it is measured beside
# its float32 model to learn what float16 kernels cost (the node models are float32-only: node_model.precision_risk)
TWIN_SUFFIX = {"float16": "-fp16"}
MANIFEST = "corpus_manifest.json"


def plan_configs(spec: dict, g1_of, max_gflop: float, max_configs: int) -> list:
    """The spec's configs with each batch capped so one run stays under max_gflop (g1_of(size): GFLOP at
    batch 1); duplicates after capping are dropped."""
    out, seen = [], set()
    for c in spec["configs"][:max_configs]:
        g1 = g1_of(c["size"])
        cap = 2 ** int(math.floor(math.log2(max_gflop / g1))) if g1 > 0 and g1 <= max_gflop else 1
        b = max(1, min(c["batch"], cap))
        if (b, c["size"]) not in seen:
            seen.add((b, c["size"]))
            out.append({"batch": b, "size": c["size"], "asked_batch": c["batch"], "gflop": round(g1 * b, 3)})
    return out


def chunk_of(archs: list, chunk: str) -> list:
    """The `chunk` ("i/n", 1 <= i <= n) part of archs: sorted, every n-th from the i-th; "" keeps them all."""
    if not chunk:
        return list(archs)
    try:
        i, n = (int(x) for x in str(chunk).split("/"))
    except ValueError:
        raise HaseError(f"must be i/n (e.g. 2/4), not '{chunk}'", "chunk") from None
    if not 1 <= i <= n:
        raise HaseError(f"'{chunk}': i must be between 1 and n", "chunk")
    return sorted(archs)[i - 1::n]


def export_arch(arch: str, cfg: dict, out_dir: str) -> dict:
    """Export one architecture's configs; returns its manifest entries (or the error)."""
    import torch
    torch.set_num_threads(1)
    from hase.model_zoo.torchvision_exporter import export_one, relative_error
    t0 = time.perf_counter()
    try:
        spec = spec_of(arch)
        models, g1 = {}, {}

        def model_at(size):
            if size not in models:
                models[size] = build_model(spec, size)
            return models[size]

        def g1_of(size):
            if size not in g1:
                g1[size] = forward_gflop(model_at(size), input_shape_of(spec, 1, size, model_at(size)))
            return g1[size]
        entries = {}
        twin = TWIN_SUFFIX.get(cfg["dtype"], "")
        if cfg["dtype"] != "float32" and not twin:
            raise HaseError(f"dtype must be float32 or float16, not '{cfg['dtype']}'")
        for i, c in enumerate(plan_configs(spec, g1_of, cfg["max_gflop"], cfg["max_configs"])):
            model = model_at(c["size"])
            shape = input_shape_of(spec, c["batch"], c["size"], model)
            stem = file_stem(spec, c["batch"], c["size"])
            if twin:
                stem = arch + twin + stem[len(arch):]
            out = Path(out_dir) / f"{stem}.onnx"
            if not out.exists():
                export_one(_as(model, cfg["dtype"]), c["batch"], c["size"], cfg["opset"], out, shape=shape,
                           dtype=cfg["dtype"])
            e = {"arch": arch + twin, "family": spec["family"], "seed": spec["seed"], "batch": c["batch"],
                 "size": c["size"], "asked_batch": c["asked_batch"], "input_shape": list(shape),
                 "gflop": c["gflop"], "params_m": round(sum(p.numel() for p in model.parameters()) / 1e6, 3),
                 "file": out.name, "dtype": cfg["dtype"]}
            if twin:
                e["twin_of"] = arch
            if cfg["validate"] and i == 0:
                e["relative_error_cpu"] = validate(model, out, shape, cfg)
            entries[stem] = e
        return {"arch": arch, "entries": entries, "seconds": round(time.perf_counter() - t0, 1)}
    except Exception as ex:  # exporter/ORT/timm raise many types; each means "this architecture failed"
        return {"arch": arch, "error": " ".join(str(ex).split())[:240], "seconds": round(time.perf_counter() - t0, 1)}


def input_shape_of(spec, batch, size, model) -> tuple:
    if spec["family"] == "timm":  # timm models say their own input size
        return (batch,) + tuple(getattr(model, "pretrained_cfg", {}).get("input_size", (3, size, size)))
    return input_shape(spec, batch, size)


def _as(model, dtype: str):
    """The model itself (float32) or a float16 copy (the float32 one stays for the FLOP count and the reference)."""
    if dtype == "float32":
        return model
    import copy
    return copy.deepcopy(model).half()


def validate(model, onnx_path: Path, shape, cfg) -> float:
    """ORT's CPU EP on the exported file against the float32 PyTorch model on the same input (a float16 twin gets
    that input in float16, and its own, looser tolerance)."""
    import torch
    from hase.model_zoo.torchvision_exporter import relative_error
    from hase.utils.ort_session import make_session
    sess = make_session(onnx_path, "cpu", opt_level="all", threads=1)
    x = np.random.default_rng(cfg["seed"]).standard_normal(shape, dtype=np.float32)
    half = cfg.get("dtype", "float32") == "float16"
    if half:
        x = x.astype(np.float16)
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0].astype(np.float32)
    with torch.no_grad():
        ref = model(torch.from_numpy(x.astype(np.float32))).float().numpy()
    err = relative_error(got, ref)
    tol = cfg["tolerance_float16"] if half else cfg["tolerance"]
    if not np.isfinite(err) or err > tol:
        raise HaseError(f"ORT output differs from PyTorch: relative error {err:.2e} > {tol:.0e}", onnx_path)
    return float(err)


def main() -> int:
    p = base_parser("Phase 1b: export the generated corpus to ONNX", "model_zoo", "corpus.yaml")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("model_zoo", args.log_level)
    if cfg["dtype"] not in ("float32", *TWIN_SUFFIX):
        raise HaseError(f"dtype must be float32 or float16, not '{cfg['dtype']}'")
    split = load_split(paths.REPO / cfg["split_file"])
    if cfg["archs"]:
        archs = list(cfg["archs"])
    elif cfg["split"] in ("train", "exam"):
        archs = getattr(split, cfg["split"])
    elif cfg["split"] == "all":
        archs = split.train + split.exam
    else:
        raise HaseError(f"split must be train, exam or all, not '{cfg['split']}'")
    archs = chunk_of(archs, cfg["chunk"])
    out_dir = paths.models_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    mpath = out_dir / MANIFEST
    man = json.loads(mpath.read_text()) if mpath.exists() else {"files": {}, "failed": {}, "archs": {}}
    log.info("exporting %d architectures with %d workers", len(archs), cfg["workers"])
    jobs = [(a, cfg, str(out_dir)) for a in archs]
    if cfg["workers"] > 1:
        import multiprocessing as mp
        pool = mp.get_context("spawn").Pool(cfg["workers"])
        results = pool.imap_unordered(_star, jobs)
    else:
        pool, results = None, map(_star, jobs)
    for r in progress(results, total=len(jobs), desc="corpus", unit="arch"):
        a = r["arch"]
        if "error" in r:   # kept in the manifest too, so a run whose every architecture failed still says why
            man["failed"][a] = r["error"]
            log.warning("%s failed: %s", a, r["error"])
        else:
            man["failed"].pop(a, None)
            tag = "precision_twin" if cfg["dtype"] != "float32" else split.split_of(a)
            name = a + TWIN_SUFFIX.get(cfg["dtype"], "")
            for stem, e in r["entries"].items():
                e["split"] = tag
                man["files"][stem] = e
            man["archs"][name] = {"family": split.family.get(a, spec_of(a)["family"]), "split": tag,
                                  "configs": len(r["entries"]), "seconds": r["seconds"]}
            log.info("%s ok: %d configs in %.1fs", a, len(r["entries"]), r["seconds"])
        paths.atomic_write_text(mpath, json.dumps(man, indent=1, sort_keys=True) + "\n")
    if pool is not None:
        pool.close()
    save_resolved(cfg, out_dir, "resolved_config_corpus.json")
    log.info("done: %d architectures exported, %d failed", len(man["archs"]), len(man["failed"]))
    return 0


def _star(job):
    return export_arch(*job)


if __name__ == "__main__":
    run_main(main)
