"""Phase 2.2: compare the original graph with ORT's optimized graph, name every kernel by its
fused op chain (utils/kernel_registry.py), and write one JSON record per model.

  python ort_analysis/fusion_detector.py [--device cuda] [--set models=[path.onnx]]

Output: ort_analysis/ort_kernel_record/<model>.<ep>.json with kernels (id, type, attributes,
shapes, dtypes, FLOPs, bytes, source nodes, EP) and the edges between kernels; plus
summary_<ep>.json: per model, kernel-type counts, the original op chains each type replaced, and
phase 1's ORT-vs-PyTorch error.
"""
import hashlib
import json
from collections import Counter
from pathlib import Path


from hase.utils.progress import progress  # noqa: E402

from hase.ort_analysis.flops import kernel_bytes, kernel_flops  # noqa: E402
from hase.ort_analysis.ort_graph_parser import DEFAULTS, optimize, parse_graph  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args, save_resolved  # noqa: E402
from hase.utils.errors import HaseError, batch_failed, log_failed, run_main  # noqa: E402
from hase.utils.kernel_registry import canonical_type, instance_id, is_known, spec  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import load_model, nbytes  # noqa: E402
from hase.utils.ort_session import provenance, resolve_device  # noqa: E402

NCHWC_SUFFIX = "_nchwc"  # ORT's NchwcTransformer names a node '<original output>_nchwc'
BN_SUFFIX = "_bn"        # ... and a BatchNormalization it turns into a conv '<BN output>_bn_nchwc'


def original_index(model):
    g = model.graph
    producer, consumers = {}, {}
    for n in g.node:
        for o in n.output:
            if o:
                producer[o] = n
        for i in n.input:
            if i:
                consumers.setdefault(i, []).append(n)
    # constants: initializers, Constant nodes, and nodes fed only by constants (ORT folds them)
    consts = {i.name for i in g.initializer}
    for n in g.node:
        if n.op_type == "Constant" or (n.input and all((not i) or i in consts for i in n.input)):
            consts.update(o for o in n.output if o)
    inputs = {i.name for i in g.input}
    outputs = {o.name for o in g.output}
    return producer, consumers, consts, inputs, outputs


LAYOUT_OPS = {"ReorderInput", "ReorderOutput", "MemcpyFromHost", "MemcpyToHost"}  # inserted, never fused


def expected_epilogue(n: dict) -> list:
    """Original ops a conv/gemm kernel absorbed after its main op, from its own attributes."""
    ops = []
    if has_sum_input(n):
        ops.append("Add")
    act = n["attributes"].get("activation")
    if act:
        ops.append(act)
    return ops


def map_sources(opt_nodes: list, orig_model) -> list:
    """For each optimized node, the original nodes it replaced.

    Anchor: the node's output tensor as named in the original graph (ORT keeps the name of the
    last fused node's output). A node whose output ORT renamed gets its anchor from its own name:
    NCHWc nodes are named '<original tensor>_nchwc' ('<BN output>_bn_nchwc' for a BatchNorm run as
    an NCHWc conv). The anchor is extended forward over the epilogue (Add, activation) the node
    declares. Walking back from the anchor to the node's inputs collects the fused original nodes.
    A node with a new output name and no such anchor (e.g. QuickGelu) takes the original nodes
    between its inputs and the next tensor another kernel produces, or, if there are none, the
    original node whose name it kept. Last, the original nodes of a
    rewrite ORT spread over several nodes joined by new tensors (Reshape -> Gemm -> Reshape of
    MatMulAddFusion, Split -> Squeeze of GatherSliceToSplitFusion) go to its one working node.
    """
    producer, consumers, consts, g_inputs, g_outputs = original_index(orig_model)
    by_name = {x.name: x for x in orig_model.graph.node if x.name}

    def derived_anchor(n):
        name = n["name"]
        if name.endswith(NCHWC_SUFFIX):
            base = name[: -len(NCHWC_SUFFIX)]
            for cand in (base, base[: -len(BN_SUFFIX)] if base.endswith(BN_SUFFIX) else None):
                if cand in producer:
                    return cand
        return None

    derived = [derived_anchor(n) for n in opt_nodes]
    visible, copied = set(), set()  # original tensors the optimized graph still makes; ... by a copy
    reserved = set()  # main op + epilogue of every anchored node: never part of another's region
    for n, d in zip(opt_nodes, derived):
        made = [o["name"] for o in n["outputs"] if o["name"] in producer]
        visible.update(made)
        if n["op_type"] in LAYOUT_OPS:  # a copy keeps its producer's name; the producer did the work
            copied.update(made)
        anchor = made[0] if made else d
        if anchor:
            reserved.update(id(x) for x in main_chain(n, anchor, producer, consts))
    anchors = {d for d in derived if d}
    visible |= anchors
    copied -= anchors  # a copy of an NCHWc node's output: that node's name says who made it
    alias, claimed, result = {}, set(), []
    named = set()  # renamed tensors whose original name comes from their node's name
    order = {id(x): i for i, x in enumerate(orig_model.graph.node)}
    for n, d in zip(opt_nodes, derived):
        outs = [o["name"] for o in n["outputs"]]
        ins = [e["name"] for e in n["inputs"] if e]
        if n["op_type"] in LAYOUT_OPS:
            if ins and len(outs) == 1:
                alias[outs[0]] = alias.get(ins[0], ins[0])
            result.append([])
            continue
        frontier = set(ins) | {alias.get(i, i) for i in ins}
        anc = [o for o in outs if o in producer]
        found = []
        if not anc and d and len(outs) == 1:
            t, todo = d, expected_epilogue(n)
            back_from = t
            while todo:
                cons = [c for c in consumers.get(t, []) if id(c) not in claimed]
                if len(cons) != 1 or cons[0].op_type not in todo or len(cons[0].output) != 1:
                    break
                c = cons[0]
                if not all(i in consts or i in frontier or i == t for i in c.input if i):
                    break
                todo.remove(c.op_type)
                found.append(c)
                claimed.add(id(c))
                t = c.output[0]
            alias[outs[0]] = t
            named.add(outs[0])
            anc = [back_from]
        elif not anc:
            # new output name: forward closure from the inputs up to tensors other kernels produce
            region_out = set()
            changed = True
            while changed:
                changed = False
                for t in list(frontier | region_out):
                    for c in consumers.get(t, []):
                        if id(c) in claimed or id(c) in reserved or \
                                any(o in visible and o not in copied for o in c.output):
                            continue
                        if all((not o) or o in consts for o in c.output):
                            continue  # a constant ORT folds at load (an Identity of a weight): no kernel's work
                        if all((not i) or i in consts or i in frontier or i in region_out for i in c.input):
                            claimed.add(id(c))
                            found.append(c)
                            if not any(o in copied for o in c.output):  # copied out: the region ends here
                                region_out.update(o for o in c.output if o)
                            changed = True
            same = by_name.get(n["name"])
            if not found and same is not None and same.op_type == n["op_type"] and id(same) not in claimed:
                # ORT rewired the node's inputs (e.g. pushed a Transpose through it) but kept its name
                claimed.add(id(same))
                found.append(same)
            if found and len(outs) == 1:
                found.sort(key=lambda x: order[id(x)])
                alias[outs[0]] = found[-1].output[0]
        for o in anc:
            alias[o] = alias.get(o, o)
        stack, seen = list(anc), set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            if t in frontier or t in consts or t in g_inputs or (t in visible and t not in anc):
                continue
            p = producer.get(t)
            if p is None or id(p) in claimed:
                continue
            claimed.add(id(p))
            found.append(p)
            stack.extend(i for i in p.input if i)
        result.append(found)  # put in graph order on return, after the regrouping
    result = regroup_rewrites(opt_nodes, result, set(producer) | g_inputs | named)
    return [[{"name": p.name, "op_type": p.op_type} for p in sorted(f, key=lambda x: order[id(x)])] for f in result]


def main_chain(n: dict, anchor: str, producer: dict, consts: set) -> list:
    """Original nodes from a node's anchor back to its main op, through its declared epilogue
    (and a BatchNorm folded into a conv); [] when the chain is not that plain."""
    main = {n["op_type"], spec(n["op_type"]).base}
    allowed = main | set(expected_epilogue(n)) | ({"BatchNormalization"} if spec(n["op_type"]).epilogue else set())
    chain, t = [], anchor
    while t in producer:
        p = producer[t]
        if p.op_type not in allowed:
            return []
        chain.append(p)
        if p.op_type in main:
            return chain
        nxt = [i for i in p.input if i and i not in consts and i in producer and producer[i].op_type in allowed]
        if len(nxt) != 1:
            return []
        t = nxt[0]
    return []


def regroup_rewrites(opt_nodes: list, sources: list, named: set) -> list:
    """Give the original nodes of a multi-node rewrite to its one working node.

    Optimized nodes joined by tensors that have no original name (and no alias from a node name)
    are one rewrite of ORT's. If exactly one of them is not a reshape-like or layout node, it is
    the kernel that does the work: it gets all the rewrite's original nodes; the others were
    inserted by ORT. Otherwise each original node goes to the one member of its op type.
    """
    parent = list(range(len(opt_nodes)))

    def root(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    made_by = {}
    for i, n in enumerate(opt_nodes):
        for o in n["outputs"]:
            made_by[o["name"]] = i
    for i, n in enumerate(opt_nodes):
        for e in n["inputs"]:
            if e and e["name"] in made_by and e["name"] not in named:
                parent[root(i)] = root(made_by[e["name"]])
    groups = {}
    for i in range(len(opt_nodes)):
        groups.setdefault(root(i), []).append(i)
    out = [list(f) for f in sources]
    for members in groups.values():
        if len(members) < 2:
            continue
        workers = [i for i in members if spec(opt_nodes[i]["op_type"]).category != "shape"
                   and opt_nodes[i]["op_type"] not in LAYOUT_OPS]
        pooled = [(i, p) for i in members for p in sources[i]]
        if len(workers) == 1:
            for i in members:
                out[i] = [p for _, p in pooled] if i == workers[0] else []
            continue
        # several working nodes (e.g. a Transpose moved past a Mul): an original node goes to the
        # one member of its own op type, if there is exactly one; otherwise it stays where it is
        for i in members:
            out[i] = []
        for owner, p in pooled:
            same = [i for i in members if spec(opt_nodes[i]["op_type"]).base == spec(p.op_type).base]
            out[same[0] if len(same) == 1 else owner].append(p)
    return out


def has_sum_input(node) -> bool:
    """Residual add fused into the kernel: FusedConv's Z (4th input), nchwc Conv's Sum (4th)."""
    ins = node["inputs"]
    if spec(node["op_type"]).epilogue == "conv":
        return len(ins) >= 4 and ins[3] is not None
    return False


def signature(k: dict) -> str:
    """'<first activation shape>_<hash>': same kernel (type, op, shapes, dtypes, attributes) -> same file."""
    acts = [e for e in k["inputs"] if e and e["role"] == "activation"]
    shape = "x".join(map(str, acts[0]["shape"])) if acts and acts[0]["shape"] else "scalar"
    key = json.dumps({"t": k["type"], "op": k["op_type"], "d": k["domain"], "a": k["attributes"],
                      "i": [(e["shape"], e["dtype"], e["role"], e.get("value")) if e else None for e in k["inputs"]],
                      "o": [(o["shape"], o["dtype"]) for o in k["outputs"]]}, sort_keys=True)
    return f"{shape}_{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def build_record(model_path, device: str, cfg: dict, log=None, optimizer=None, ep_of_node=None) -> dict:
    """optimizer(model_path, cfg) -> (optimized path, per-node runtime info): ORT's session for `device` by
    default (offline_cuda passes its CPU-build rewrite); ep_of_node(parsed node) -> the EP to record."""
    model_path = Path(model_path)
    orig = load_model(model_path, load_weights=False)
    if optimizer is None:
        opt_path, info = optimize(model_path, device, cfg["pin_dims"], cfg["seed"])
    else:
        opt_path, info = optimizer(model_path, cfg)
    parsed = parse_graph(opt_path, info, cfg["keep_small_values"])
    sources = map_sources(parsed["nodes"], orig)
    counters, kernels, producer_of = Counter(), [], {}
    default_ep = "CUDAExecutionProvider" if device == "cuda" else "CPUExecutionProvider"
    for n, src in zip(parsed["nodes"], sources):
        ktype = canonical_type(n["op_type"], n["attributes"], has_sum=has_sum_input(n))
        if not is_known(n["op_type"]) and log:
            log.warning("%s: op %s is not in the kernel registry; type '%s'", model_path.name, n["op_type"], ktype)
        kid = instance_id(ktype, counters[ktype])
        counters[ktype] += 1
        parts = set(ktype.split("_"))
        read, written = kernel_bytes(n["inputs"], n["outputs"])
        ep = (ep_of_node(n) if ep_of_node else n["ep"]) or default_ep
        k = {"id": kid, "type": ktype, "category": spec(n["op_type"]).category, "op_type": n["op_type"],
             "domain": n["domain"], "node_name": n["name"], "ep": ep,
             "attributes": n["attributes"], "inputs": n["inputs"], "outputs": n["outputs"],
             "weight_shapes": [e["shape"] for e in n["inputs"] if e and e["role"] == "weight"],
             "flops": kernel_flops(n["op_type"], ktype, n["attributes"], n["inputs"], n["outputs"]),
             "bytes_read": read, "bytes_written": written,
             "source_nodes": src, "inserted_by_ort": not src,
             "folded_ops": [s["op_type"] for s in src if s["op_type"] not in parts]}
        k["signature"] = signature(k)
        kernels.append(k)
        for o in n["outputs"]:
            producer_of[o["name"]] = kid
    edges = []
    for k in kernels:
        for e in k["inputs"]:
            if e and e["role"] == "activation" and e["name"] in producer_of:
                edges.append({"src": producer_of[e["name"]], "dst": k["id"], "tensor": e["name"],
                              "bytes": nbytes(e["shape"] or [], e["dtype"] or "float32")})
    n_orig = len([n for n in orig.graph.node if n.op_type != "Constant"])
    return {
        "model": model_path.stem, "source_model": str(model_path), "optimized_model": str(opt_path),
        "device": device, "graph_optimization_level": "ORT_ENABLE_ALL",
        "provenance": provenance(device),
        "graph_inputs": parsed["graph_inputs"], "graph_outputs": parsed["graph_outputs"],
        "opsets": {(o.domain or "ai.onnx"): o.version for o in load_model(opt_path, load_weights=False).opset_import},
        "original_node_count": n_orig, "kernel_count": len(kernels),
        "type_counts": dict(sorted(Counter(k["type"] for k in kernels).items())),
        "fusions": [{"kernel": k["id"], "sources": [s["op_type"] for s in k["source_nodes"]]}
                    for k in kernels if len(k["source_nodes"]) > 1],
        "kernels": kernels, "edges": edges,
    }


def model_summary(rec: dict, exported: dict) -> dict:
    """Kernel-type counts of one record, which original op chains became each type, and phase 1's
    ORT-vs-PyTorch error for the model on this EP (exported: phase 1's manifest 'files')."""
    chains = {}
    for k in rec["kernels"]:
        chain = "+".join(s["op_type"] for s in k["source_nodes"]) or "(inserted by ORT)"
        chains.setdefault(k["type"], Counter())[chain] += 1
    entry = exported.get(Path(rec["source_model"]).name, {})
    return {"original_nodes": rec["original_node_count"], "kernels": rec["kernel_count"],
            "multi_source_kernels": len(rec["fusions"]), "type_counts": rec["type_counts"],
            "source_chains": {t: dict(c.most_common()) for t, c in sorted(chains.items())},
            "ort_vs_torch_relative_error": entry.get("validated", {}).get(rec["device"], {}).get("relative_error")}


def exported_models() -> dict:
    """Phase 1's manifest entries by file name ({} when phase 1 did not make the models)."""
    mp = paths.models_dir() / "manifest.json"
    return paths.read_json(mp, "model manifest").get("files", {}) if mp.exists() else {}


def record_path(model_stem: str, device: str) -> Path:
    return paths.kernel_record_dir() / f"{model_stem}.{device}.json"


def list_models(cfg_models: list) -> list:
    if not cfg_models:
        d = paths.models_dir()
        if not d.is_dir():
            raise HaseError("no models folder (run phase 1 first)", d)
        return sorted(p for p in d.glob("*.onnx") if ".opt." not in p.name)
    return paths.expand_globs(cfg_models)


def main() -> int:
    p = base_parser("Phase 2.2: detect ORT fusions and write kernel records", "ort_analysis")
    p.add_argument("--model", action="append", type=Path, help="model file (repeatable; default: config models)")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("ort_analysis", args.log_level)
    device = resolve_device(cfg["device"])
    models = list_models([str(m) for m in args.model] if args.model else cfg["models"])
    out_dir = paths.kernel_record_dir()
    exported = exported_models()
    summary, failed = {}, []
    for mp in progress(models, desc="analyse", unit="model"):
        try:
            rec = build_record(mp, device, cfg, log)
        except HaseError as e:
            if len(models) == 1:   # nothing to go on to: its own error is the one line
                raise
            log_failed(log, mp, e, failed)
            continue
        paths.atomic_write_text(record_path(rec["model"], device), json.dumps(rec, indent=1) + "\n")
        summary[rec["model"]] = model_summary(rec, exported)
        log.info("%s: %d original nodes -> %d kernels, %d fused", rec["model"], rec["original_node_count"],
                 rec["kernel_count"], len(rec["fusions"]))
    sp = out_dir / f"summary_{device}.json"
    old = json.loads(sp.read_text())["models"] if sp.exists() else {}
    old.update(summary)
    data = {"what": f"kernel types ORT runs on {device} EP (ORT_ENABLE_ALL) per model, and the original op chains "
                    "each type replaced", "provenance": provenance(device), "models": dict(sorted(old.items()))}
    paths.atomic_write_text(sp, json.dumps(data, indent=1) + "\n")
    save_resolved(cfg, out_dir, f"resolved_config_{device}.json")
    batch_failed(failed, len(models))
    return 0


if __name__ == "__main__":
    run_main(main)
