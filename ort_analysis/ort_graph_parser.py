"""Phase 2.1: let ORT optimize a model (ORT_ENABLE_ALL) for the target EP, save the optimized
graph, and list every node with its op type, input shapes and output shapes.

  python ort_analysis/ort_graph_parser.py --model model_zoo/models/resnet18_bs16_224x224.onnx [--device cuda]

Shapes come from ORT itself: one profiled run of the optimized session reports every node's
input/output shapes and the EP it ran on. Contrib ops (FusedConv, NCHWc Conv, Attention, ...)
that ONNX shape inference does not know are covered the same way.
"""
import json
import tempfile
from pathlib import Path


import numpy as np  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402
from hase.utils.onnx_io import (NAME_OF_ONNX, NAME_OF_ORT, check_run_memory, check_static, dummy_feed,  # noqa: E402
                                load_model)
from hase.utils.ort_session import make_session, resolve_device, run_failure  # noqa: E402

DEFAULTS = {"device": "auto", "models": [], "pin_dims": {}, "keep_small_values": 64, "seed": 0}


def optimized_dir() -> Path:
    return paths.kernel_record_dir() / "optimized"


def _profile_nodes(profile_file: str) -> dict:
    """{node name: {'inputs': [(dtype, shape)], 'outputs': [...], 'ep': provider}} from one run."""
    events = json.loads(Path(profile_file).read_text())
    nodes = {}
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time"):
            continue
        a = e.get("args", {})

        def conv(lst):
            return [(NAME_OF_ORT.get(next(iter(d)), next(iter(d))), list(next(iter(d.values())))) for d in lst]
        nodes.setdefault(e["name"][: -len("_kernel_time")], {
            "inputs": conv(a.get("input_type_shape", [])),
            "outputs": conv(a.get("output_type_shape", [])),
            "ep": a.get("provider"), "op_name": a.get("op_name")})
    return nodes


def optimize(model_path, device: str, pin_dims=None, seed=0, out_dir=None):
    """Write ORT's optimized graph for `device`; return (optimized path, per-node runtime info)."""
    model_path = Path(model_path)
    model = load_model(model_path, load_weights=False)
    shapes = check_static(model, pin_dims or {}, model_path)
    if device == "cpu":   # the run below is on this machine's CPU: refused before it when it cannot fit
        check_run_memory(model, shapes, pin_dims or {}, model_path)
    out_dir = Path(out_dir or optimized_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    opt_path = paths.optimized_file(out_dir / model_path.name, device)
    tmp = opt_path.with_name(opt_path.name + ".tmp.onnx")
    with tempfile.TemporaryDirectory() as td:
        sess = make_session(model_path, device, "all", optimized_path=tmp,
                            profile_prefix=Path(td) / "p", free_dims=pin_dims,
                            log_severity=4)   # ORT's errors come back as one HaseError line, not also its log
        try:
            sess.run(None, dummy_feed(sess, shapes, seed))
        except Exception as e:  # ORT runtime failure: the op cannot run on this EP, or the model at these pins
            if device != "cpu":
                raise HaseError(f"ORT cannot run it on {device}: {' '.join(str(e).split())[:200]}", model_path)
            raise run_failure(model_path, model, shapes, pin_dims or {}, seed, e, f"ORT cannot run it on {device}")
        info = _profile_nodes(sess.end_profiling())
    tmp.replace(opt_path)
    return opt_path, info


def subgraph_summary(g) -> dict:
    """A control-flow body (GraphProto) as JSON: its name, node count and op counts (the body itself is not
    analysed: the node runs it as one kernel here)."""
    ops = {}
    for n in g.node:
        key = f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
        ops[key] = ops.get(key, 0) + 1
    return {"subgraph": g.name, "nodes": len(g.node), "ops": dict(sorted(ops.items()))}


def attr_dict(node) -> dict:
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif hasattr(v, "node") and hasattr(v, "initializer"):   # a subgraph (If/Loop/Scan body): its summary
            v = subgraph_summary(v)
        elif isinstance(v, (list, tuple)):
            v = [x.decode() if isinstance(x, bytes) else subgraph_summary(x) if hasattr(x, "node") else x
                 for x in v]
        elif hasattr(v, "dims"):  # tensor attribute
            v = numpy_helper.to_array(v).tolist()
        if isinstance(v, float):
            v = round(v, 7)
        out[a.name] = v
    return out


def initializer_entry(t, keep_small_values: int, opt_path) -> dict:
    """An initializer as a node input: shape and dtype from its proto; the value only of a small one (a 'const':
    shapes, axes, scalars), read from the .data file beside opt_path if it is stored there. A weight is never read."""
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type))
    shape = list(t.dims)
    e = {"name": t.name, "shape": shape, "dtype": str(dtype), "role": "weight"}
    size = int(np.prod(shape, dtype=np.int64))
    if size <= keep_small_values or (dtype.kind in "iub" and size <= 4096):
        try:
            e["value"] = numpy_helper.to_array(t, base_dir=str(Path(opt_path).parent)).tolist()
        except (OSError, ValueError) as err:  # its .data file is gone or short
            raise HaseError(f"initializer {t.name}: its external data cannot be read ({type(err).__name__})", opt_path)
        e["role"] = "const"
    return e


def parse_graph(opt_path, info: dict, keep_small_values: int = 64) -> dict:
    """Nodes of the optimized graph with shapes, dtypes, EP and initializer roles."""
    # the protobuf only: a weight's shape and dtype are in it, and a graph over 2 GB has its weights in a .data file
    m = load_model(opt_path, load_weights=False)
    g = m.graph
    inits = {i.name: i for i in g.initializer}
    tensor = {}  # name -> {"shape", "dtype"}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if all(isinstance(d, int) for d in dims):
            tensor[vi.name] = {"shape": dims, "dtype": NAME_OF_ONNX.get(tt.elem_type, "float32")}
    for n in g.node:  # runtime shapes (authoritative) from the profiled run
        ni = info.get(n.name)
        if ni:
            for name, (dt, shp) in zip([o for o in n.output], ni["outputs"]):
                if name:
                    tensor[name] = {"shape": shp, "dtype": dt}
    nodes = []
    for n in g.node:
        ni = info.get(n.name, {})
        ins = []
        for idx, name in enumerate(n.input):
            if not name:
                ins.append(None)
                continue
            if name in inits:
                e = initializer_entry(inits[name], keep_small_values, opt_path)
            else:
                t = tensor.get(name)
                if t is None and idx < len(ni.get("inputs", [])):
                    dt, shp = ni["inputs"][idx]
                    t = {"shape": shp, "dtype": dt}
                e = {"name": name, "shape": t["shape"] if t else None,
                     "dtype": t["dtype"] if t else None, "role": "activation"}
            ins.append(e)
        outs = [{"name": o, **tensor.get(o, {"shape": None, "dtype": None})} for o in n.output if o]
        nodes.append({"name": n.name, "op_type": n.op_type, "domain": n.domain or "ai.onnx",
                      "ep": ni.get("ep"), "attributes": attr_dict(n), "inputs": ins, "outputs": outs})
    graph_inputs = [{"name": i.name, **tensor.get(i.name, {})} for i in g.input if i.name not in inits]
    graph_outputs = [{"name": o.name, **tensor.get(o.name, {})} for o in g.output]
    return {"nodes": nodes, "graph_inputs": graph_inputs, "graph_outputs": graph_outputs}


def format_nodes(parsed: dict) -> str:
    lines = []
    for i, n in enumerate(parsed["nodes"]):
        ins = ", ".join("x".join(map(str, e["shape"])) if e and e["shape"] is not None else "-"
                        for e in n["inputs"])
        outs = ", ".join("x".join(map(str, o["shape"])) if o["shape"] is not None else "?" for o in n["outputs"])
        op = n["op_type"] if n["domain"] == "ai.onnx" else f"{n['domain']}.{n['op_type']}"
        lines.append(f"{i:4d}  {op:32s} in[{ins}] -> out[{outs}]  ({n['ep'] or '?'})  {n['name']}")
    return "\n".join(lines)


def main() -> int:
    p = base_parser("Phase 2.1: print every node of ORT's optimized graph with shapes", "ort_analysis")
    p.add_argument("--model", required=True, type=Path, help="ONNX model file")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    device = resolve_device(cfg["device"])
    opt_path, info = optimize(args.model, device, cfg["pin_dims"], cfg["seed"])
    parsed = parse_graph(opt_path, info, cfg["keep_small_values"])
    print(f"# {args.model} on {device}: {len(parsed['nodes'])} nodes in the optimized graph ({opt_path})")
    print(format_nodes(parsed))
    return 0


if __name__ == "__main__":
    run_main(main)
