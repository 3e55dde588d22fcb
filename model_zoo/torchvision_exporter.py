"""Phase 1: export torchvision classification models to ONNX, write ORT's optimized graph for the
target EP, and validate each file against PyTorch.

  python model_zoo/torchvision_exporter.py [--device cpu|cuda|auto] [--set models=[resnet50]]

Outputs (model_zoo/models/): <model>_bs<B>_<H>x<W>.onnx, <...>.opt.<ep>.onnx, manifest.json.
"""
import contextlib
import io
import json
import time
from pathlib import Path


import numpy as np  # noqa: E402
from hase.utils.progress import progress  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.ort_session import make_session, provenance, resolve_device  # noqa: E402

DEFAULTS = {
    "models": ["resnet18"], "batch_sizes": [16, 64, 128], "resolutions": [224, 320, 512],
    "dtype": "float32", "opset": 17, "device": "auto", "seed": 0,
    "tolerance": {"cpu": 1e-3, "cuda": 1e-2}, "overwrite": False,
}


def classification_models() -> list:
    import torchvision
    return sorted(torchvision.models.list_models(module=torchvision.models))


def build_torch_model(name: str, resolution: int):
    import torchvision
    known = classification_models()
    if name not in known:
        raise HaseError(f"unknown model name '{name}' (torchvision classification models: "
                        f"{', '.join(known[:8])}, ...)")
    kwargs = {}
    if name.startswith("vit_"):  # ViTs fix their position embedding to the image size
        kwargs["image_size"] = resolution
    # random weights: no network on the GPU machine or CI, and latency does not depend on values
    model = torchvision.models.get_model(name, weights=None, **kwargs).eval()
    return fill_zero_weights(model)


def fill_zero_weights(model):
    """Give zero-initialised weight matrices (ViT's classifier head) small random values: with them
    the output is the bias alone, the same in ORT and PyTorch whatever ORT computed before it."""
    import torch
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in model.parameters():
            if prm.dim() >= 2 and not bool(prm.any()):
                prm.copy_(torch.randn(prm.shape, generator=g) * 0.02)
    return model


def export_one(model, batch: int, res: int, opset: int, out: Path, shape=None, dtype: str = "float32") -> None:
    """shape: the input's shape when it is not an image batch (an encoder's [B, S, D]); dtype: the input's (a
    float16 model, model.half(), takes a float16 input)."""
    import torch
    x = torch.randn(*(shape or (batch, 3, res, res)))
    if dtype == "float16":
        x = x.half()
    tmp = out.with_name(out.name + ".tmp")
    # the fused MHA fast path (aten::_native_multi_head_attention) has no ONNX symbolic
    torch.backends.mha.set_fastpath_enabled(False)
    # TorchScript exporter first (fast, stable node names); torch.export-based one as fallback
    # (e.g. adaptive pooling to a size that does not divide the input)
    errors = []
    for dynamo in (False, True):
        try:
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                torch.onnx.export(model, (x,), str(tmp), input_names=["input"], output_names=["output"],
                                  opset_version=opset if not dynamo else max(opset, 18), dynamo=dynamo,
                                  external_data=False)
            tmp.replace(out)
            return
        except Exception as e:  # exporter raises many types; all mean "this exporter failed"
            errors.append(" ".join(str(e).split())[:160])
            tmp.unlink(missing_ok=True)
    raise HaseError(f"torch.onnx.export failed: {errors[0]}", out)


def torch_reference(model, x: np.ndarray, device: str) -> np.ndarray:
    import torch
    dev = "cuda" if device == "cuda" and torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        return model.to(dev)(torch.from_numpy(x).to(dev)).float().cpu().numpy()


def relative_error(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))


def informative(ref: np.ndarray) -> bool:
    """A reference that differs between samples and classes can catch a wrong graph; a constant one cannot."""
    flat = ref.reshape(ref.shape[0], -1)
    return bool(np.ptp(flat) > 0 and (flat.shape[0] == 1 or np.ptp(flat, axis=0).max() > 0))


def optimize_and_validate(model, onnx_path: Path, device: str, batch: int, res: int, tol: float, seed: int):
    """Write ORT's optimized graph for the EP; run it and compare with PyTorch."""
    opt_path = paths.optimized_file(onnx_path, device)
    tmp = opt_path.with_name(opt_path.name + ".tmp.onnx")
    sess = make_session(onnx_path, device, opt_level="all", optimized_path=tmp)
    tmp.replace(opt_path)
    x = np.random.default_rng(seed).standard_normal((batch, 3, res, res), dtype=np.float32)
    got = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    ref = torch_reference(model, x, device)
    if not informative(ref):
        raise HaseError("PyTorch output is constant over the batch and classes: comparing with it proves "
                        "nothing", onnx_path)
    err = relative_error(got, ref)
    if not np.isfinite(err) or err > tol:
        raise HaseError(f"ORT output differs from PyTorch: relative error {err:.2e} > {tol:.0e}", onnx_path)
    return opt_path, err


def main() -> int:
    p = base_parser("Phase 1: export torchvision models to ONNX and validate them in ORT", "model_zoo")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("model_zoo", args.log_level)
    device = resolve_device(cfg["device"])
    if cfg["dtype"] != "float32":
        raise HaseError(f"dtype {cfg['dtype']} not supported yet (float32 only)")
    out_dir = paths.models_dir()
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch
    torch.manual_seed(cfg["seed"])
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {"files": {}}
    jobs = [(m, b, r) for m in cfg["models"] for b in cfg["batch_sizes"] for r in cfg["resolutions"]]
    for m in cfg["models"]:  # fail fast on a bad name, before any export
        if m not in classification_models():
            build_torch_model(m, 224)
    log.info("exporting %d files for %s on %s EP", len(jobs), cfg["models"], device)
    model_cache = {}
    for name, batch, res in progress(jobs, desc="export", unit="model"):
        fname = paths.model_file(name, batch, res, res)
        onnx_path = out_dir / fname
        entry = manifest["files"].get(fname, {})
        opt_path = paths.optimized_file(onnx_path, device)
        if (not cfg["overwrite"] and onnx_path.exists() and opt_path.exists()
                and entry.get("validated", {}).get(device) is not None):
            continue
        key = (name, res if name.startswith("vit_") else 0)
        if key not in model_cache:
            model_cache.clear()
            model_cache[key] = build_torch_model(name, res)
        model = model_cache[key].cpu()
        t0 = time.perf_counter()
        if cfg["overwrite"] or not onnx_path.exists():
            export_one(model, batch, res, cfg["opset"], onnx_path)
        _, err = optimize_and_validate(model, onnx_path, device, batch, res, cfg["tolerance"][device], cfg["seed"])
        entry.update({"model": name, "batch": batch, "height": res, "width": res, "opset": cfg["opset"],
                      "dtype": cfg["dtype"], "file": fname})
        entry.setdefault("validated", {})[device] = {"relative_error": err, "tolerance": cfg["tolerance"][device],
                                                     "seconds": round(time.perf_counter() - t0, 2),
                                                     "provenance": provenance(device)}
        manifest["files"][fname] = entry
        paths.atomic_write_text(manifest_path, json.dumps(manifest, indent=2) + "\n")
        log.info("%s ok on %s (rel err %.1e)", fname, device, err)
    save_resolved(cfg, out_dir, extra={"provenance": provenance(device)})
    log.info("done: %d files in %s", len(jobs), out_dir)
    return 0


if __name__ == "__main__":
    run_main(main)
