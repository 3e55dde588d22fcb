"""Phase 3: build every kernel of the phase 2 records as its own ONNX model and verify it in ORT.

  python kernel_model/kernel_builder.py [--device cuda] [--set records=[path.json]]

A kernel model is the optimized node itself (op type, domain, attributes) with its activation
inputs as graph inputs, its weights as random initializers of the recorded shapes, and small
constant inputs (shapes, axes) with their recorded values. Files are named
<type>_<shape signature>.onnx in kernel_model/kernel_onnx/; a kernel that several models share
is built once. index.json lists every kernel with its features and the instances that use it.
"""
import json
import time
from pathlib import Path


import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from hase.utils.progress import progress  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import ONNX_OF_NAME, dummy_array  # noqa: E402
from hase.utils.ort_session import make_session, provenance, resolve_device  # noqa: E402

DEFAULTS = {"device": "auto", "records": [], "opt_level": "disable", "skip_categories": [], "seed": 0,
            "overwrite": False, "verify": True}
INDEX = "index.json"


def kernel_id(kernel: dict) -> str:
    """A kernel's name across phases: its file stem here, Kernel_ID in phase 4's CSV."""
    return f"{kernel['type']}_{kernel['signature']}"


def kernel_filename(kernel: dict) -> str:
    return kernel_id(kernel) + ".onnx"


def _attr(name, value):
    return helper.make_attribute(name, value)


def kernel_to_onnx(kernel: dict, opsets: dict, seed: int = 0) -> onnx.ModelProto:
    """One-node ONNX model of a recorded kernel, weights random."""
    rng = np.random.default_rng(seed)
    g_inputs, inits, node_inputs = [], [], []
    for i, e in enumerate(kernel["inputs"]):
        if e is None:
            node_inputs.append("")
            continue
        name = f"in{i}"
        node_inputs.append(name)
        if e["shape"] is None or e["dtype"] is None:
            raise HaseError(f"kernel {kernel['id']}: input {i} has no recorded shape")
        if e["role"] == "activation":
            g_inputs.append(helper.make_tensor_value_info(name, ONNX_OF_NAME[e["dtype"]], e["shape"]))
        elif e["role"] == "const":
            inits.append(numpy_helper.from_array(np.array(e["value"], dtype=e["dtype"]).reshape(e["shape"]), name))
        else:  # weight: random values of the recorded shape; latency does not depend on them
            arr = dummy_array(e["shape"], e["dtype"], rng)
            if arr.dtype.kind == "f":
                arr = (arr * 0.05).astype(arr.dtype)
            inits.append(numpy_helper.from_array(arr, name))
    outs = [helper.make_tensor_value_info(f"out{j}", ONNX_OF_NAME[o["dtype"] or "float32"], o["shape"])
            for j, o in enumerate(kernel["outputs"])]
    node = helper.make_node(kernel["op_type"], node_inputs, [f"out{j}" for j in range(len(outs))],
                            name=kernel["type"], domain="" if kernel["domain"] == "ai.onnx" else kernel["domain"])
    node.attribute.extend(_attr(k, v) for k, v in kernel["attributes"].items())
    graph = helper.make_graph([node], kernel["type"], g_inputs, outs, initializer=inits)
    imports = [helper.make_opsetid("" if d == "ai.onnx" else d, v) for d, v in opsets.items()]
    model = helper.make_model(graph, opset_imports=imports, producer_name="hase.kernel_builder")
    model.ir_version = 8
    return model


def verify(path: Path, kernel: dict, device: str, opt_level: str, seed: int) -> dict:
    sess = make_session(path, device, opt_level)
    rng = np.random.default_rng(seed)
    feed = {}
    for i, e in enumerate(kernel["inputs"]):
        if e is not None and e["role"] == "activation":
            feed[f"in{i}"] = dummy_array(e["shape"], e["dtype"], rng)
    t0 = time.perf_counter()
    try:
        res = sess.run(None, feed)
    except Exception as ex:  # ORT runtime errors: the kernel cannot run on this EP
        raise HaseError(f"ORT cannot run kernel on {device}: {' '.join(str(ex).split())[:200]}", path)
    ms = (time.perf_counter() - t0) * 1e3
    for o, r in zip(kernel["outputs"], res):
        if list(r.shape) != list(o["shape"]):
            raise HaseError(f"output shape {list(r.shape)} != recorded {o['shape']}", path)
    return {"verified": True, "first_run_ms": round(ms, 3), "providers": sess.get_providers()[:1]}


def kernel_build(record: dict, device: str = None, cfg: dict = None, out_dir: Path = None, index: dict = None,
                 log=None) -> dict:
    """Build (or reuse) the standalone model of every kernel of one record; returns the index.
    device: EP to verify on (default: the record's own); cfg: this phase's settings (default DEFAULTS)."""
    device = device or record["device"]
    cfg = {**DEFAULTS, **(cfg or {})}
    out_dir = Path(out_dir or paths.kernel_onnx_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    index = index if index is not None else {"kernels": {}}
    for k in record["kernels"]:
        if k["category"] in cfg["skip_categories"]:
            continue
        fname = kernel_filename(k)
        entry = index["kernels"].get(fname)
        path = out_dir / fname
        if entry is None or cfg["overwrite"] or not path.exists() or (cfg["verify"] and not entry.get("verified")):
            model = kernel_to_onnx(k, record["opsets"], cfg["seed"])
            helper.set_model_props(model, {"hase.kernel_id": kernel_id(k),
                                           "hase.source": f"{record['model']}:{k['id']}",
                                           "hase.ort_version": record["provenance"].get("ort_version", ""),
                                           "hase.ep": k["ep"]})
            tmp = path.with_name(path.name + ".tmp.onnx")
            onnx.save(model, str(tmp))
            try:
                check = verify(tmp, k, device, cfg["opt_level"], cfg["seed"]) if cfg["verify"] else \
                    {"verified": None}
            except HaseError:
                tmp.unlink(missing_ok=True)
                raise
            tmp.replace(path)
            entry = {"file": fname, "type": k["type"], "category": k["category"], "op_type": k["op_type"],
                     "domain": k["domain"], "signature": k["signature"], "attributes": k["attributes"],
                     "inputs": [{kk: vv for kk, vv in e.items() if kk != "value"} if e else None for e in k["inputs"]],
                     "outputs": k["outputs"], "flops": k["flops"], "bytes_read": k["bytes_read"],
                     "bytes_written": k["bytes_written"], "ep": k["ep"], "device": device, "instances": [], **check}
            index["kernels"][fname] = entry
        inst = f"{record['model']}:{k['id']}"
        if inst not in entry["instances"]:
            entry["instances"].append(inst)
    return index


def load_record(path: Path) -> dict:
    rec = paths.read_json(path, "kernel record")
    if not isinstance(rec, dict) or "kernels" not in rec or "opsets" not in rec:
        raise HaseError("not a kernel record (no 'kernels'/'opsets')", path)
    return rec


def main() -> int:
    p = base_parser("Phase 3: build one standalone ONNX model per unique kernel", "kernel_model")
    p.add_argument("--record", action="append", type=Path, help="kernel record JSON (repeatable)")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("kernel_model", args.log_level)
    device = resolve_device(cfg["device"])
    records = paths.kernel_records([str(r) for r in args.record] if args.record else cfg["records"], device)
    out_dir = paths.kernel_onnx_dir()
    index_path = out_dir / INDEX
    index = json.loads(index_path.read_text()) if index_path.exists() else {"kernels": {}}
    if index.get("device") not in (None, device):
        raise HaseError(f"kernel folder holds {index['device']} kernels; use another HASE_HOME or clear it", index_path)
    n_inst = 0
    for rp in progress(records, desc="build", unit="record"):
        rec = load_record(rp)
        if rec.get("device") != device:
            raise HaseError(f"record is for {rec.get('device')}, target is {device}", rp)
        kernel_build(rec, device, cfg, out_dir, index, log)
        n_inst += len(rec["kernels"])
        index.update({"device": device, "provenance": provenance(device)})
        paths.atomic_write_text(index_path, json.dumps(index, indent=1) + "\n")
    save_resolved(cfg, out_dir)
    log.info("%d kernel instances -> %d unique kernel models in %s", n_inst, len(index["kernels"]), out_dir)
    return 0


if __name__ == "__main__":
    run_main(main)
