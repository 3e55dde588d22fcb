"""Phase 2 for the CUDA EP on a machine without a GPU: the kernel record ORT's CUDA EP would make of a
model (ORT_ENABLE_ALL), made with the CPU build of onnxruntime.

  python ort_analysis/offline_cuda.py --model m.onnx [--out rec.json]

How: ORT registers its graph transformers per EP (onnxruntime/core/optimizer/graph_transformer_utils.cc).
The level-1 ones run before the nodes are given to an EP, so they do the same on both; at levels 2-3 each
transformer names the EPs whose nodes it may rewrite. So a CPU-EP session in which the transformers that
the CPU EP has and the CUDA EP has not are switched off (`disabled_optimizers`) rewrites the graph as a
CUDA session does, as long as

  - every node would run on the CUDA EP (ORT puts a node the CUDA EP has no kernel for on the CPU EP and
    inserts MemcpyFromHost/MemcpyToHost around it), and
  - no transformer that the CUDA EP has and the CPU EP has not would fire (GroupQueryAttentionFusion,
    BiasDropoutFusion: they need contrib attention ops or a Dropout that survives level 1).

Neither is reproduced here; instead a record says whether the model is `claimed`: the installed
onnxruntime is the version the GPU records were made with, every op of the rewritten graph is one the
CUDA EP ran in a committed GPU record (CUDA_VERIFIED_OPS_FROM), no quantize/dequantize nodes (their
fusions differ per EP), none of the ops the CUDA-only transformers start from, no float16/bfloat16 (the
CPU EP casts nodes it has no kernel for) and no shape computed in the graph (the CUDA EP reads shapes,
axes and sizes from host memory and puts the nodes computing them on the CPU EP with Memcpy nodes). An
unclaimed record lists why (`offline.unclaimed_because`); it is still the best offline guess, and
`predict_model_latency.py --gpu` says so.

Two differences are reproduced: a function op the CPU EP has no kernel for (HardSwish) is inlined by the
CPU EP and run as one kernel by the CUDA EP; it goes through a stand-in (STAND_IN) and is put back. And a
fusion ORT registers for the CPU EP as well but whose pattern match takes only CUDA/ROCm nodes
(BiasSoftmaxFusion: Add + Softmax -> BiasSoftmax, e.g. attention with a relative-position bias) never fires
in a CPU session; it is applied to the rewritten graph afterwards with ORT's conditions (fuse_bias_softmax).

Shapes come, as in fusion_detector, from one profiled run of the rewritten graph (on the CPU EP here).
The record has fusion_detector's CUDA format (device 'cuda', every kernel on CUDAExecutionProvider) plus
`offline` (how it was made, the transformers switched off, the claim) and `provenance.offline: true`.
`ort_analysis/compare_offline_cuda.py` checks it against the records made on the GPU.
"""
import functools
import json
import math
from collections import Counter
import sys
import tempfile
from pathlib import Path


import onnxruntime as ort  # noqa: E402

from hase.ort_analysis.ort_graph_parser import DEFAULTS, _profile_nodes, parse_graph  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.config import base_parser, from_args  # noqa: E402
from hase.utils.errors import HaseError, batch_failed, log_failed, run_main  # noqa: E402
from hase.utils.logger import get_logger  # noqa: E402
from hase.utils.onnx_io import check_run_memory, check_static, dummy_feed, load_model  # noqa: E402
from hase.utils.ort_session import open_session, provenance, run_failure, session_options  # noqa: E402

CUDA_EP, CPU_EP = "CUDAExecutionProvider", "CPUExecutionProvider"
METHOD = "cpu-build session, CPU-only transformers off, stand-ins for ops the CPU EP inlines"
VERSION = 9   # of the analysis: a cached offline record of another version is made again (9: mixed float16 as float32)

# Transformers ORT registers for the CPU EP but not for the CUDA EP (graph_transformer_utils.cc; the names are
# those the pinned build logs at verbose level: `python ort_analysis/offline_cuda.py --list-transformers --model m`).
# Level 2: the second transpose optimizer pass is bound to the CPU EP; Gemm/Conv activation fusions, the
# integer MatMul ones and the quantized-weight ones are CPU-only. Level 3: the NCHWc and NHWC layouts and
# Conv+Add+activation are MLAS's. Level 4: fp16 initializers folded into fp32 CPU nodes.
CPU_ONLY_TRANSFORMERS = (
    "TransposeOptimizer_CPUExecutionProvider",
    "QDQS8ToU8Transformer", "QDQSelectorActionTransformer", "Avx2WeightS8ToU8Transformer",
    "GemmActivationFusion", "MatMulIntegerToFloatFusion", "DynamicQuantizeMatMulFusion",
    "ConvActivationFusion", "MatMulNBitsFusion",
    "NchwcTransformer", "NhwcTransformer", "ConvAddActivationFusion",
    "FuseFp16InitializerToFp32NodeTransformer",
)
# Transformers the CUDA EP has and the CPU EP has not: they never fire in a CPU session, so a model they
# would rewrite is not claimed. The ops they start from (after level 1):
CUDA_ONLY_TRANSFORMERS = {
    "GroupQueryAttentionFusion": {"GroupQueryAttention", "MultiHeadAttention", "RotaryEmbedding", "MatMulNBits"},
    "GroupQueryAttentionPreNormFusion": {"GroupQueryAttention"},
    "BiasDropoutFusion": {"Dropout", "BitmaskDropout"},
}
LOW_PRECISION = {"float16", "bfloat16"}
# inputs the CUDA EP's kernels read from host memory (shapes, axes, sizes, pads, scales)
HOST_INPUTS = {"Reshape": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4), "Squeeze": (1,), "Unsqueeze": (1,),
               "Pad": (1, 2, 3), "Resize": (1, 2, 3), "Upsample": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
               "TopK": (1,), "Split": (1,), "OneHot": (1,), "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,),
               "ReduceMin": (1,), "ReduceProd": (1,), "ReduceL2": (1,), "CenterCropPad": (1,)}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger",
           "DynamicQuantizeLinear", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "MatMulNBits"}
# GPU records whose ops count as 'the CUDA EP runs them' (globs under the repository: every {model: record} xz file
# of a GPU folder, so records a GPU job adds there count at once)
CUDA_VERIFIED_OPS_FROM = ["ort_analysis/ort_kernel_record/*/*.json.xz"]


def cuda_verified_ops(sources: tuple = tuple(CUDA_VERIFIED_OPS_FROM)) -> frozenset:
    """{(domain, op_type)} the CUDA EP ran in committed GPU records (device 'cuda', node on CUDA EP)."""
    return gpu_record_facts(sources)[0]


@functools.lru_cache(maxsize=None)
def gpu_record_facts(sources: tuple = tuple(CUDA_VERIFIED_OPS_FROM)) -> tuple:
    """({(domain, op_type)} on the CUDA EP, {onnxruntime versions}) of the committed GPU records. The corpus's
    records are 400 MB of JSON (2,283 models, ~9 s to parse on 2 cores): the facts are kept per records file in a
    small cache under HASE_HOME, keyed by the file's size and mtime, so only a changed file is read again."""
    ops, versions = set(), set()
    for pat in sources:
        for f in sorted(paths.REPO.glob(pat)) if not Path(pat).is_absolute() else [Path(pat)]:
            o, v = _record_file_facts(f)
            ops |= o
            versions |= v
    return frozenset(ops), frozenset(versions - {None})


def facts_digest() -> str:
    """A short digest of gpu_record_facts(): a cached offline record is made again when the GPU records it was
    claimed against change (a new record can verify an op)."""
    import hashlib
    ops, versions = gpu_record_facts()
    return hashlib.sha1(json.dumps([sorted(ops), sorted(versions)]).encode()).hexdigest()[:12]


def _record_file_facts(f: Path) -> tuple:
    """(ops, versions) of one records file, from the cache when the file has not changed."""
    st = f.stat()
    key = f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}:{METHOD}"
    cache = paths.home() / "cache" / "offline_cuda_facts" / f"{paths.slug(str(f.resolve()))}.json"
    if cache.exists():
        try:
            c = json.loads(cache.read_text())
            if c.get("key") == key:
                return {tuple(x) for x in c["ops"]}, set(c["versions"])
        except (OSError, ValueError, KeyError, TypeError):
            pass   # a damaged cache is rebuilt
    ops, versions = set(), set()
    data = paths.read_json(f, "records file")
    for rec in data.values() if isinstance(data, dict) else []:
        if not isinstance(rec, dict) or rec.get("device") != "cuda" or rec.get("offline") \
                or rec.get("source") == "sampled":
            continue
        versions.add((rec.get("provenance") or {}).get("ort_version"))
        for k in rec.get("kernels", []):
            if k.get("ep") == CUDA_EP:
                ops.add((k.get("domain") or "ai.onnx", k["op_type"]))
    paths.atomic_write_text(cache, json.dumps({"key": key, "ops": sorted(ops),
                                               "versions": sorted(x for x in versions if x)}))
    return ops, versions


# A function op the CPU EP has no kernel for is inlined (HardSwish -> HardSigmoid + Mul) when the graph is partitioned,
# after level 1; the CUDA EP runs it as one kernel. Offline, such a unary op is swapped for a stand-in the CPU EP has
# a kernel for and that ORT's transformers treat alike (an elementwise unary op the transpose optimizer pushes
# through and no fusion starts from), and swapped back in the rewritten graph.
STAND_IN = ("ai.onnx", "Softsign")


@functools.lru_cache(maxsize=None)
def cpu_inlines(domain: str, op_type: str, opset: int, elem_type: int = 1) -> bool:
    """True when the CPU EP runs a one-input, one-output op as its function body (no kernel of its own) for tensors
    of ONNX element type elem_type (1: float32, 10: float16)."""
    import onnx
    from onnx import helper
    dom = "" if domain == "ai.onnx" else domain
    g = helper.make_graph([helper.make_node(op_type, ["x"], ["y"], name="n", domain=dom)],
                          "probe", [helper.make_tensor_value_info("x", elem_type, [1, 4])],
                          [helper.make_tensor_value_info("y", elem_type, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(dom, opset)])
    m.ir_version = 8
    with tempfile.TemporaryDirectory() as td:
        so = session_options("disable", optimized_path=Path(td) / "o.onnx")
        try:
            ort.InferenceSession(m.SerializeToString(), so, providers=[CPU_EP])
        except Exception:  # not a unary op at this opset, or unknown: nothing to say
            return False
        ops = [n.op_type for n in onnx.load(str(Path(td) / "o.onnx")).graph.node if n.op_type != "Cast"]
    return ops != [op_type]


def function_ops(model, elem_type: int = 1) -> list:
    """[(domain, op_type)] of the graph's one-input, one-output ops that ONNX defines as functions and the CPU EP
    inlines (for tensors of ONNX element type elem_type)."""
    import onnx
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    out = []
    for dom, op in sorted({((n.domain or "ai.onnx"), n.op_type) for n in model.graph.node}):
        try:
            sch = onnx.defs.get_schema(op, opsets.get(dom, 1), "" if dom == "ai.onnx" else dom)
        except onnx.defs.SchemaError:
            continue
        if (sch.has_function or sch.has_context_dependent_function) and cpu_inlines(dom, op, opsets.get(dom, 1),
                                                                                      elem_type):
            out.append((dom, op))
    return out


def with_stand_ins(model, ops) -> dict:
    """Swap the nodes of `ops` (one input, one output) for STAND_IN in place; {output tensor: original node}."""
    import copy
    swapped = {}
    for n in model.graph.node:
        if ((n.domain or "ai.onnx"), n.op_type) in ops and len(n.input) == 1 and len(n.output) == 1:
            swapped[n.output[0]] = copy.deepcopy(n)
            n.op_type, n.domain = STAND_IN[1], ""
            del n.attribute[:]
    return swapped


def restore_stand_ins(opt_path: Path, swapped: dict) -> int:
    """Put the original ops back in the rewritten graph (matched by output tensor); how many."""
    import onnx
    m = onnx.load(str(opt_path), load_external_data=False)   # a graph over 2 GB keeps its weights in the .data file
    k = 0
    for n in m.graph.node:
        orig = swapped.get(n.output[0] if n.output else None)
        if orig is not None and n.op_type == STAND_IN[1]:
            n.op_type, n.domain = orig.op_type, orig.domain
            del n.attribute[:]
            n.attribute.extend(orig.attribute)
            k += 1
    onnx.save(m, str(opt_path))
    return k


# Level-2 fusions ORT registers for the CPU EP too but whose pattern match only takes nodes assigned to the CUDA (or
# ROCm) EP, so they never fire in a CPU session: applied here to the rewritten graph, with ORT's conditions.
# BiasSoftmaxFusion (bias_softmax_fusion.cc): Add (its one consumer a Softmax on the same EP) + Softmax ->
# com.microsoft BiasSoftmax(input, bias; axis, is_inner_broadcast).
CUDA_ONLY_MATCHES = ("BiasSoftmaxFusion",)
BIAS_SOFTMAX_TYPES = {"float32", "float16", "float64"}


def _bias_softmax_alignment(s1: list, s2: list, axis: int):
    """ORT's input/bias choice for Add(s1, s2) + Softmax(axis): (0 or 1: which Add input is the input, the
    normalised axis, is_inner_broadcast), or None when the bias cannot be broadcast the way BiasSoftmax does."""
    n1, n2 = len(s1), len(s2)
    rank = max(n1, n2)
    k = axis + rank if axis < 0 else axis
    if not 0 <= k < rank:
        return None
    single = rank - k
    if single > n1 or single > n2 or s1[n1 - single:] != s2[n2 - single:]:
        return None
    if n1 == n2:   # inner broadcast: the bias is 1 on the axes from the first mismatch to the softmax axis
        pos = 0
        while pos < k and s1[pos] == s2[pos]:
            pos += 1
        lhs = pos == k or s1[pos] != 1
        mask = s2 if lhs else s1
        if all(mask[i] == 1 for i in range(pos, k)):
            return (0 if lhs else 1), k, True
    # outer broadcast: the bias is 1 (or missing) on the leading axes before the last mismatch
    p1, p2 = n1 - single - 1, n2 - single - 1
    while p1 >= 0 and p2 >= 0 and s1[p1] == s2[p2]:
        p1, p2 = p1 - 1, p2 - 1
    lhs = p1 > p2 or (p1 == p2 and (p1 < 0 or s1[p1] != 1))
    mask = s2 if lhs else s1
    if any(mask[i] != 1 for i in range((p2 if lhs else p1), -1, -1)):
        return None
    return (0 if lhs else 1), k, False


def ort_order(nodes, index) -> list:
    """The order ORT saves (and records) a graph in: GraphViewer's default topological order, a reverse DFS from the
    nodes no other node consumes, each node's producers visited highest node index first, a node listed when left.
    nodes: NodeProtos; index[i]: node i's index in ORT's graph. Returns the positions in that order."""
    prod = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    ins = [sorted({prod[x] for x in n.input if x in prod}, key=lambda j: index[j]) for n in nodes]
    consumed = {j for s in ins for j in s}
    stack = [(i, False) for i in sorted((i for i in range(len(nodes)) if i not in consumed), key=lambda i: index[i])]
    seen, out = set(), []
    while stack:
        i, leave = stack.pop()
        if leave:
            out.append(i)
        elif i not in seen:
            seen.add(i)
            stack.append((i, True))
            stack.extend((j, False) for j in ins[i])
    return out


def fuse_bias_softmax(opt_path: Path, info: dict) -> int:
    """BiasSoftmaxFusion on the rewritten graph as the CUDA EP's session does it (the fused node where the Add was,
    named as ORT names it); `info` (the profiled run's per-node shapes) gets the fused node's. How many fused."""
    import onnx
    from onnx import helper
    m = onnx.load(str(opt_path), load_external_data=False)   # saved back with its external references as they are
    g = m.graph
    opset = {(o.domain or "ai.onnx"): o.version for o in m.opset_import}.get("ai.onnx", 1)

    def since(op):
        try:
            return onnx.defs.get_schema(op, opset).since_version
        except onnx.defs.SchemaError:
            return None
    if since("Add") not in (7, 13, 14) or since("Softmax") not in (1, 11, 13):
        return 0
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in g.output}
    fused, drop, k = {}, set(), 0
    for n in g.node:
        if n.op_type != "Add" or n.domain not in ("", "ai.onnx") or len(n.input) != 2 or n.output[0] in outputs:
            continue
        cons = consumers.get(n.output[0], [])
        if len(cons) != 1 or cons[0].op_type != "Softmax" or cons[0].domain not in ("", "ai.onnx") \
                or list(cons[0].input).count(n.output[0]) != 1:
            continue
        sm, ia, isn = cons[0], info.get(n.name), info.get(cons[0].name)
        if not ia or not isn or len(ia["inputs"]) != 2:
            continue
        (d1, s1), (d2, s2) = ia["inputs"]
        if not s1 or not s2 or d1 not in BIAS_SOFTMAX_TYPES or d2 not in BIAS_SOFTMAX_TYPES:
            continue
        axis = next((a.i for a in sm.attribute if a.name == "axis"), -1 if since("Softmax") >= 13 else 1)
        al = _bias_softmax_alignment(list(s1), list(s2), axis)
        if al is None or (since("Softmax") >= 13 and al[1] != max(len(s1), len(s2)) - 1):
            continue
        first, new_axis, inner = al
        name = "BiasSoftmax" if k == 0 else f"BiasSoftmax_token_{k}"
        k += 1
        order = [first, 1 - first]
        fused[n.name] = helper.make_node("BiasSoftmax", [n.input[i] for i in order], [sm.output[0]], name=name,
                                         domain="com.microsoft", axis=new_axis, is_inner_broadcast=int(inner))
        info[name] = {"inputs": [ia["inputs"][i] for i in order], "outputs": isn["outputs"], "ep": isn.get("ep"),
                      "op_name": "BiasSoftmax"}
        drop.add(sm.name)
    if not fused:
        return 0
    # a fused node is created after the nodes it replaces: it has the highest node index, which decides where ORT's
    # topological order puts it (ort_order). The CPU session's other nodes keep their order (its reversed positions
    # rank them as their indices did: ort_order of the unfused graph gives that graph back).
    nodes = [fused.get(n.name, n) for n in g.node if n.name not in drop]
    new = {id(f): len(g.node) + 1 + k for k, f in enumerate(fused.values())}   # created in topological order
    index = [new.get(id(n), len(g.node) - i) for i, n in enumerate(nodes)]
    nodes = [nodes[i] for i in ort_order(nodes, index)]
    del g.node[:]
    g.node.extend(nodes)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    onnx.save(m, str(opt_path))
    return len(fused)


def _session(model_path: Path, opt_path: Path, profile_prefix, pin_dims: dict, disabled) -> ort.InferenceSession:
    options = dict(opt_level="all", optimized_path=opt_path, profile_prefix=profile_prefix, free_dims=pin_dims,
                   log_severity=4)   # ORT's errors come back as one HaseError line, not also its colour-coded log
    try:
        return open_session(str(model_path), [CPU_EP], options, disabled_optimizers=list(disabled))
    except Exception as e:  # InvalidGraph, NotImplemented...: ORT cannot load it
        raise HaseError(f"ORT cannot load it: {' '.join(str(e).split())[:300]}", model_path)


def optimize_offline(model_path, pin_dims=None, seed=0, out_dir=None, disabled=CPU_ONLY_TRANSFORMERS,
                     stand_ins=True, stand_in_log=None, fused_log=None, log=None):
    """Write the graph ORT's CUDA EP would run (as the CPU build rewrites it with the CPU-only transformers
    off) as <model>.opt.cuda-offline.onnx; return (its path, per-node runtime info of one profiled CPU run).
    Function ops the CPU EP would inline and the CUDA EP runs as one kernel go through a stand-in (STAND_IN);
    stand_in_log (a list) gets one entry per op swapped; fused_log (a dict) how many nodes each of CUDA_ONLY_MATCHES
    fused here."""
    from hase.ort_analysis.ort_graph_parser import optimized_dir
    model_path = Path(model_path)
    model = load_model(model_path, load_weights=False)
    shapes = check_static(model, pin_dims or {}, model_path)
    check_run_memory(model, shapes, pin_dims or {}, model_path)   # the run below is on this machine's CPU
    out_dir = Path(out_dir or optimized_dir())
    out_dir.mkdir(parents=True, exist_ok=True)
    opt_path = paths.optimized_file(out_dir / model_path.name, "cuda-offline")
    tmp = opt_path.with_name(opt_path.name + ".tmp.onnx")
    inlined = [op for op in function_ops(model) if op in cuda_verified_ops()] if stand_ins else []
    with tempfile.TemporaryDirectory() as td:
        src, swapped = model_path, {}
        if inlined:
            full = load_model(model_path)
            swapped = with_stand_ins(full, set(inlined))
            src = Path(td) / model_path.name
            import onnx
            onnx.save(full, str(src), save_as_external_data=full.ByteSize() > 1_800_000_000)
        sess = _session(src, tmp, Path(td) / "p", pin_dims or {}, disabled)
        try:
            sess.run(None, dummy_feed(sess, shapes, seed))
        except Exception as e:  # ORT runtime failure: the rewritten graph's, or the model's own at these pins
            raise run_failure(model_path, model, shapes, pin_dims or {}, seed, e,
                              "ORT cannot run the rewritten graph on the CPU EP")
        info = _profile_nodes(sess.end_profiling())
    if swapped:
        restored = restore_stand_ins(tmp, swapped)
        if restored != len(swapped) and log:
            log.warning("%s: %d of %d stand-in nodes were rewritten by ORT", model_path.name,
                        len(swapped) - restored, len(swapped))
    n_fused = fuse_bias_softmax(tmp, info)
    if fused_log is not None and n_fused:
        fused_log["BiasSoftmaxFusion"] = n_fused
    tmp.replace(opt_path)
    if stand_in_log is not None:
        kinds = [((n.domain or "ai.onnx"), n.op_type) for n in swapped.values()]
        stand_in_log.extend([{"op": f"{d}:{o}", "stand_in": ":".join(STAND_IN), "nodes": kinds.count((d, o))}
                             for d, o in inlined])
    return opt_path, info


def claim(parsed: dict, orig_model) -> list:
    """Reasons the offline graph may differ from the CUDA EP's ([] = claimed)."""
    why = []
    verified, versions = gpu_record_facts()
    if ort.__version__ not in versions:
        why.append(f"onnxruntime {ort.__version__} here, the GPU records were made with "
                   f"{', '.join(sorted(versions)) or 'none'}: transformers change between versions")
    unverified = sorted({f"{n['domain']}:{n['op_type']}" for n in parsed["nodes"]
                         if (n["domain"], n["op_type"]) not in verified})
    if unverified:
        why.append("ops no committed GPU record shows on the CUDA EP (a CPU fallback with Memcpy nodes is not "
                   "modelled): " + ", ".join(unverified))
    # reduced-precision floats: the CPU EP casts the nodes it has no float16 kernel for, the CUDA EP does not.
    # analyse() takes those Casts out again (undo_cpu_casts); what it cannot know is whether the CUDA EP has a
    # float16 kernel for every op (where it has none, it inserts Casts of its own)
    low = {e["dtype"] for n in parsed["nodes"] for e in list(n["inputs"]) + n["outputs"]
           if e and e.get("dtype") in LOW_PRECISION}
    if low:
        why.append("float tensors other than float32 (" + ", ".join(sorted(low)) + ") beside float32 ones: the "
                   "Casts the CPU EP inserted are taken out, assuming the CUDA EP has a kernel of that precision for "
                   "every op; the CPU EP also fuses less in float16 (Gelu, SkipLayerNormalization, QuickGelu stay "
                   "apart), so the kernel list can be longer than the CUDA EP's")
    # a shape the graph computes: the CUDA EP reads it from host memory, so it puts the nodes computing it on the
    # CPU EP (its CPU-preferred nodes) with Memcpy nodes around them
    made = {o["name"] for n in parsed["nodes"] for o in n["outputs"]}
    host = sorted({f"{n['op_type']} input {i}" for n in parsed["nodes"] if n["domain"] == "ai.onnx"
                   for i in HOST_INPUTS.get(n["op_type"], ()) if i < len(n["inputs"]) and n["inputs"][i]
                   and n["inputs"][i]["name"] in made} |
                  {n["op_type"] for n in parsed["nodes"] if n["op_type"] in ("Shape", "Size")})
    if host:
        why.append("shapes computed in the graph (" + ", ".join(host) + "): the CUDA EP runs their producers on the "
                   "CPU EP with Memcpy nodes, which is not modelled")
    orig_ops = {n.op_type for n in orig_model.graph.node}
    opt_ops = {n["op_type"] for n in parsed["nodes"]}
    if (orig_ops | opt_ops) & QDQ_OPS:
        why.append("quantized ops (" + ", ".join(sorted((orig_ops | opt_ops) & QDQ_OPS)) +
                   "): their fusions differ per EP")
    unknown = [f"{d}:{o}" for d, o in function_ops(orig_model) if (d, o) not in verified]
    if unknown:
        why.append("function ops the CPU EP inlines and no committed GPU record shows on the CUDA EP: " +
                   ", ".join(unknown))
    for t, starts in CUDA_ONLY_TRANSFORMERS.items():
        if opt_ops & starts:
            why.append(f"{t} (CUDA EP only) may rewrite {', '.join(sorted(opt_ops & starts))}")
    return why


# A model in float16 throughout, or mixed (float16 with float32 islands and Casts of its own), takes another road
# (pure_float16, mixed_float16, float32_copy): the CPU EP's float16 rewrite also fuses less. This one is left for the
# rest (bfloat16, subgraphs), whose fusions stay the CPU EP's. A CUDA-EP record of float16 twins
# (run_gpu_corpus.sh FP16_TWINS) says what the CUDA EP makes of them.
# ORT's InsertCastTransformer gives a CPU-EP node that has no float16 kernel float32 copies of its inputs and
# outputs: a Cast node named CPU_CAST_PREFIX + the tensor's name on each side. The CUDA EP has float16 kernels for
# the ops a float16 model uses (Conv, MatMul/Gemm, the elementwise and normalization ops), so it runs none of these
# Casts. Left in, a float16 ResNet-18 at batch 8 had 28 Casts (77 kernels against the float32 model's 49) and every
# kernel between them priced at float32 bytes.
CPU_CAST_PREFIX = "InsertedPrecisionFreeCast_"


def model_dtypes(model) -> dict:
    """{tensor name: dtype name} of an ONNX model's inputs, outputs, initializers and (by ONNX shape inference)
    intermediate tensors; {} for what inference cannot type."""
    import onnx
    from hase.utils.onnx_io import NAME_OF_ONNX
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # custom domains, > 2 GB: the graph's own value_info is all there is
        pass
    g = model.graph
    out = {t.name: NAME_OF_ONNX.get(t.data_type) for t in g.initializer}
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        if vi.type.HasField("tensor_type"):
            out[vi.name] = NAME_OF_ONNX.get(vi.type.tensor_type.elem_type)
    return {k: v for k, v in out.items() if v}


def undo_cpu_casts(rec: dict, model) -> int:
    """Take the Casts the CPU EP inserted out of a record made offline for the CUDA EP (in place; `model`: the
    original ONNX model, no weights needed): every kernel reads and writes the model's own tensors again (their
    name, dtype and, for a weight behind a Cast, role), with its bytes, signature and edges made anew. The CPU EP's
    float32 copies flow between its float32 kernels under CPU_CAST_PREFIX + the model tensor's name. Returns the
    number of Casts removed."""
    own = {n.name for n in model.graph.node}
    casts = [k for k in rec["kernels"] if k.get("op_type") == "Cast" and k.get("inputs") and k.get("outputs")
             and str(k.get("node_name", "")).startswith(CPU_CAST_PREFIX) and k.get("node_name") not in own]
    if not casts:
        return 0
    dtypes = model_dtypes(model)
    role = {c["inputs"][0]["name"]: c["inputs"][0].get("role") for c in casts if c["inputs"][0]}

    def restored(e):
        if not e or not str(e.get("name", "")).startswith(CPU_CAST_PREFIX):
            return e
        name = e["name"][len(CPU_CAST_PREFIX):]
        e = {**e, "name": name, "dtype": dtypes.get(name, e.get("dtype"))}
        if role.get(name) and "role" in e:   # a float16 weight the CPU EP read through a Cast is a weight again
            e["role"] = role[name]
        return e

    dropped = {c["id"] for c in casts}
    kernels = []
    for k in rec["kernels"]:
        if k["id"] in dropped:
            continue
        k["inputs"] = [restored(e) for e in k["inputs"]]
        k["outputs"] = [restored(e) for e in k["outputs"]]
        kernels.append(k)
    rec["graph_outputs"] = [restored(e) for e in rec.get("graph_outputs", [])]
    rec["fusions"] = [f for f in rec.get("fusions", []) if f["kernel"] not in dropped]
    _remake(rec, kernels)
    return len(casts)


# A model that computes in float16 throughout (no float32 tensor, no subgraph): the CPU EP fuses it unlike the CUDA
# EP (float16 Gelu, SkipLayerNormalization, QuickGelu stay apart; Softmax, a function op the CPU EP has no float16
# kernel for, is inlined: encoder-s1 298 kernels against its float32 twin's 209). Its float32 copy goes through the
# CPU-build rewrite as a float32 model does (the CUDA EP's fusions, claimed kernel for kernel on the corpus), and
# every float tensor of the record is then float16 again, assuming the CUDA EP fuses float16 as it fuses float32.
def pure_float16(model) -> bool:
    """Every float tensor float16 and no subgraph (If/Loop/Scan bodies are not converted)."""
    from onnx import TensorProto
    g = model.graph   # a float32 weight or graph input settles it without shape inference (most models)
    if (any(t.data_type == TensorProto.FLOAT for t in g.initializer)
            or any(v.type.tensor_type.elem_type == TensorProto.FLOAT for v in list(g.input) + list(g.output))):
        return False
    kinds = set(model_dtypes(model).values())
    has_sub = any(a.type in (a.GRAPH, a.GRAPHS) for n in model.graph.node for a in n.attribute)
    return "float16" in kinds and not kinds & {"float32", "float64", "bfloat16"} and not has_sub


# ORT's fusions test a scalar constant against the value they expect (optimizer_utils::IsInitializerWithExpectedValue,
# rtol 1e-5); a float16 constant is compared with the expected value rounded to float16. In the float32 copy the
# float16 value (sqrt 2 is 1.4140625) would fail the float32 test, and Gelu would stay apart (encoder-s1: 8 Gelu).
# So a scalar that is the float16 rounding of a constant ORT's fusions look for becomes that constant.
FUSION_CONSTANTS = (math.sqrt(2.0), 1.0 / math.sqrt(2.0), math.sqrt(2.0 / math.pi), 0.044715, 0.0356774081, 1.702,
                    0.5, 1.0, 2.0, 3.0, 6.0)


def float32_copy(onnx_path: Path, out_dir: Path) -> Path:
    """The model with every float16 initializer, Constant, ConstantOfShape value, Cast target and typed value made
    float32, written as out_dir/<same name> (its record keeps the model's name)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, numpy_helper
    m = load_model(onnx_path)

    def f32(t):
        a = numpy_helper.to_array(t).astype(np.float32)
        if a.size == 1:
            hit = [c for c in FUSION_CONSTANTS if np.float16(c) == np.float16(a.flat[0])]
            if hit:
                a = np.full(a.shape, hit[0], np.float32)
        t.CopyFrom(numpy_helper.from_array(a, t.name))
    for t in m.graph.initializer:
        if t.data_type == TensorProto.FLOAT16:
            f32(t)
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        if vi.type.tensor_type.elem_type == TensorProto.FLOAT16:
            vi.type.tensor_type.elem_type = TensorProto.FLOAT
    for n in m.graph.node:
        for a in n.attribute:
            if a.type == a.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                f32(a.t)
            elif n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
    out = Path(out_dir) / onnx_path.name
    onnx.save(m, str(out), save_as_external_data=m.ByteSize() > 1_800_000_000)
    return out


def as_float16(rec: dict) -> None:
    """Every float32 tensor of a record made from a float32 copy float16 again (in place), bytes, signatures and
    edges made anew: as_model_dtypes with no tensor of the model in float32."""
    as_model_dtypes(rec, {})


def _remake(rec: dict, kernels: list) -> None:
    """A record's kernel-derived fields (bytes, signatures, edges, counts) made anew from `kernels`."""
    from hase.ort_analysis.flops import kernel_bytes
    from hase.ort_analysis.fusion_detector import signature
    from hase.utils.onnx_io import nbytes
    for k in kernels:
        k["weight_shapes"] = [e["shape"] for e in k["inputs"] if e and e.get("role") == "weight"]
        k["bytes_read"], k["bytes_written"] = kernel_bytes(k["inputs"], k["outputs"])
        k["signature"] = signature(k)
    producer_of = {o["name"]: k["id"] for k in kernels for o in k["outputs"]}
    rec["edges"] = [{"src": producer_of[e["name"]], "dst": k["id"], "tensor": e["name"],
                     "bytes": nbytes(e["shape"] or [], e["dtype"] or "float32")}
                    for k in kernels for e in k["inputs"]
                    if e and e.get("role") == "activation" and e["name"] in producer_of]
    rec["kernels"] = kernels
    rec["kernel_count"] = len(kernels)
    rec["type_counts"] = dict(sorted(Counter(k["type"] for k in kernels).items()))


# A mixed float16 model (float16 compute with float32 islands and Casts of its own) takes the float32-copy road too,
# in two passes. Its float32 copy alone would differ from the CUDA EP's graph at level 1: ConstantFolding folds a node
# only with a CPU kernel (on every EP), so a float16 node the CPU EP has no kernel for (Sqrt of a shape in vit_b_16's
# attention scale) stays on the CUDA EP and folds in the copy; and CastElimination drops the model's own Casts once
# float16 is float32. So pass 1 runs the level-1 transformers (EP-independent) on the float16 model itself (function
# ops the CPU EP inlines in float16, Softmax, through stand-ins; the Casts the CPU EP inserts taken out again), and
# pass 2 rewrites the float32 copy of that graph with the level-2/3 transformers, the level-1 ones whose outcome
# depends on the element type switched off (LEVEL1_DONE). Every tensor then gets the original model's dtype again.
LEVEL1_DONE = ("ConstantFolding", "ConstantSharing", "CommonSubexpressionElimination", "CastElimination")


def mixed_float16(model) -> bool:
    """float16 and float32 tensors (no bfloat16, no subgraph): float16 compute with float32 islands."""
    kinds = set(model_dtypes(model).values())
    has_sub = any(a.type in (a.GRAPH, a.GRAPHS) for n in model.graph.node for a in n.attribute)
    return {"float16", "float32"} <= kinds and "bfloat16" not in kinds and not has_sub


def float16_level1(onnx_path: Path, out_dir: Path, pin_dims=None, log=None) -> tuple:
    """The model as ORT's level-1 transformers leave it (a CPU-EP session at ORT_ENABLE_BASIC on the float16 model),
    without the Casts the CPU EP inserted, written as out_dir/<same name>; (its path, the Casts taken out)."""
    import onnx
    from onnx import TensorProto
    out_dir.mkdir(parents=True, exist_ok=True)
    model = load_model(onnx_path)
    inlined = function_ops(model, TensorProto.FLOAT16)
    swapped = with_stand_ins(model, set(inlined)) if inlined else {}
    big = model.ByteSize() > 1_800_000_000
    src, opt = out_dir / ("src_" + onnx_path.name), out_dir / onnx_path.name
    onnx.save(model, str(src), save_as_external_data=big)
    options = dict(opt_level="basic", optimized_path=opt, free_dims=pin_dims or {}, log_severity=4)
    try:
        open_session(str(src), [CPU_EP], options)
    except Exception as e:  # InvalidGraph, NotImplemented...: ORT cannot load it
        raise HaseError(f"ORT cannot load it: {' '.join(str(e).split())[:300]}", onnx_path)
    m = load_model(opt)
    g = m.graph
    casts = [n for n in g.node if n.op_type == "Cast" and n.name.startswith(CPU_CAST_PREFIX)]
    if casts:
        def own(x):
            return x[len(CPU_CAST_PREFIX):] if x.startswith(CPU_CAST_PREFIX) else x
        keep = [n for n in g.node if not (n.op_type == "Cast" and n.name.startswith(CPU_CAST_PREFIX))]
        for n in keep:
            n.input[:] = [own(x) for x in n.input]
            n.output[:] = [own(x) for x in n.output]
        del g.node[:]
        g.node.extend(_own_casts_again(keep, model))
        del g.value_info[:]
    onnx.save(m, str(opt), save_as_external_data=m.ByteSize() > 1_800_000_000)
    if swapped:   # after the Casts: the stand-in writes the model's tensor again
        restored = restore_stand_ins(opt, swapped)
        if restored != len(swapped) and log:
            log.warning("%s: %d of %d stand-in nodes were rewritten by ORT's level 1", onnx_path.name,
                        len(swapped) - restored, len(swapped))
    return opt, len(casts)


def _own_casts_again(nodes: list, model) -> list:
    """The model's own Casts that ORT's RemoveDuplicateCastTransformer merged into the ones the CPU EP inserted (a
    float16 -> float32 Cast after a node the CPU EP ran in float32), put back: a node of the rewritten graph that read
    a Cast's output in the model and reads that Cast's input now reads its output again, the Cast placed before it.
    A Cast that ConstantFolding folded (its input is gone) stays out, as on the CUDA EP."""
    import copy
    casts = {n.output[0]: n for n in model.graph.node if n.op_type == "Cast" and n.output}
    was = {n.name: n for n in model.graph.node if n.name}
    there = {n.name for n in nodes}
    out, added = [], set()
    for n in nodes:
        o = was.get(n.name)
        if o is not None and len(o.input) == len(n.input):
            for i, (now, then) in enumerate(zip(n.input, o.input)):
                c = casts.get(then)
                if c is not None and c.name not in there and now != then and now == c.input[0]:
                    n.input[i] = then
                    if c.name not in added:
                        added.add(c.name)
                        out.append(copy.deepcopy(c))
        out.append(n)
    return out


def as_model_dtypes(rec: dict, dtypes: dict) -> None:
    """Every tensor of a record made from a float32 copy gets its dtype in the original model again (`dtypes`,
    model_dtypes()); a float32 tensor the rewrite made (not in the model) becomes float16. In place, bytes,
    signatures and edges made anew."""
    def orig(e):
        if not e or e.get("dtype") != "float32":
            return e
        return {**e, "dtype": dtypes.get(e.get("name"), "float16")}
    for k in rec["kernels"]:
        k["inputs"] = [orig(e) for e in k["inputs"]]
        k["outputs"] = [orig(e) for e in k["outputs"]]
    rec["graph_inputs"] = [orig(e) for e in rec.get("graph_inputs", [])]
    rec["graph_outputs"] = [orig(e) for e in rec.get("graph_outputs", [])]
    _remake(rec, rec["kernels"])


def analyse(onnx_path, pin_dims=None, seed=0, keep_small_values=64, log=None) -> dict:
    """The CUDA-EP kernel record of a model, made without a GPU (fusion_detector's record format)."""
    onnx_path = Path(onnx_path)
    orig = load_model(onnx_path, load_weights=False)
    if pure_float16(orig):
        with tempfile.TemporaryDirectory(prefix="hase_f32_") as td:
            rec = _analyse(float32_copy(onnx_path, Path(td)), orig, pin_dims, seed, keep_small_values, log)
        as_float16(rec)
        rec["source_model"] = str(onnx_path)
        rec["offline"]["analysed_as"] = "its float32 copy (every float tensor float16 again)"
        rec["offline"]["claimed"] = False
        rec["offline"]["unclaimed_because"].append(
            "a float16 model, analysed as its float32 copy: the CUDA EP is assumed to fuse float16 as it fuses "
            "float32 and to have a float16 kernel for every op")
        return rec
    if mixed_float16(orig):
        with tempfile.TemporaryDirectory(prefix="hase_f32_") as td:
            l1, removed = float16_level1(onnx_path, Path(td) / "l1", pin_dims, log)
            (Path(td) / "f32").mkdir()
            rec = _analyse(float32_copy(l1, Path(td) / "f32"), orig, pin_dims, seed, keep_small_values, log,
                           disabled=CPU_ONLY_TRANSFORMERS + LEVEL1_DONE)
        as_model_dtypes(rec, model_dtypes(orig))
        rec["source_model"] = str(onnx_path)
        rec["offline"]["analysed_as"] = ("its level-1 graph (rewritten in float16) as a float32 copy, then the model's "
                                         "own dtypes again (float16 for tensors the rewrite made)")
        rec["offline"]["cpu_casts_removed"] = removed
        rec["offline"]["claimed"] = False
        rec["offline"]["unclaimed_because"].insert(
            0, "a mixed float16 model (float16 with float32 tensors and Casts of its own), analysed as the float32 "
               "copy of its level-1 graph: the CUDA EP is assumed to fuse float16 as it fuses float32, to have a "
               "float16 kernel for every op, and the tensors its fusions make are taken as float16")
        return rec
    return _analyse(onnx_path, orig, pin_dims, seed, keep_small_values, log)


def _analyse(onnx_path: Path, orig, pin_dims, seed, keep_small_values, log, disabled=CPU_ONLY_TRANSFORMERS) -> dict:
    from hase.ort_analysis.fusion_detector import build_record
    cfg = {"pin_dims": pin_dims or {}, "seed": seed, "keep_small_values": keep_small_values}
    swaps, fused = [], {}
    rec = build_record(onnx_path, "cuda", cfg, log,
                       optimizer=lambda mp, c: optimize_offline(mp, c["pin_dims"], c["seed"], disabled=disabled,
                                                                stand_in_log=swaps, fused_log=fused, log=log),
                       ep_of_node=lambda n: CUDA_EP)
    parsed = {"nodes": [{"domain": k["domain"], "op_type": k["op_type"], "inputs": k["inputs"],
                         "outputs": k["outputs"]} for k in rec["kernels"]]}
    why = claim(parsed, orig)
    casts_removed = undo_cpu_casts(rec, orig)
    prov = provenance("cpu")
    prov.update({"ep": CUDA_EP, "device": "cuda", "offline": True,
                 "made_with": f"onnxruntime {ort.__version__} CPU EP ({METHOD})"})
    rec["provenance"] = prov
    rec["offline"] = {"method": METHOD, "ort_version": ort.__version__,
                      "disabled_transformers": list(disabled),
                      "claimed": not why, "unclaimed_because": why, "stand_ins": swaps,
                      "cpu_casts_removed": casts_removed,
                      "fused_here": fused,
                      "shapes_from": "one profiled run of the rewritten graph on the CPU EP"}
    return rec


def record_path(model_stem: str) -> Path:
    return paths.kernel_record_dir() / f"{model_stem}.cuda-offline.json"


def list_transformers(model_path) -> dict:
    """{level: [transformer names]} the installed ORT runs at ORT_ENABLE_ALL on the CPU EP (its verbose log)."""
    import os
    import re
    import subprocess
    code = ("import onnxruntime as o,sys; s=o.SessionOptions(); s.log_severity_level=0; "
            "o.InferenceSession(sys.argv[1], s, providers=['CPUExecutionProvider'])")
    out = subprocess.run([sys.executable, "-c", code, str(model_path)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""})
    levels, cur = {}, None
    for line in (out.stdout + out.stderr).splitlines():
        m = re.search(r"graph transformer\(s\) for level (\d+)", line)
        if m:
            cur = int(m.group(1))
            levels.setdefault(cur, [])
        m = re.search(r"Applying graph transformer (\S+) on step 1\.", line)
        if m and cur is not None and m.group(1) not in levels[cur]:
            levels[cur].append(m.group(1))
    return levels


def main() -> int:
    p = base_parser("Phase 2 for the CUDA EP without a GPU: the kernel record ORT's CUDA EP would make",
                    "ort_analysis")
    p.add_argument("--model", action="append", type=Path, help="ONNX model (repeatable)")
    p.add_argument("--out", type=Path,
                   help="record JSON (one model; default: ort_kernel_record/<model>.cuda-offline.json)")
    p.add_argument("--list-transformers", action="store_true",
                   help="print the transformers this ORT build runs per level (needs --model) and exit")
    args = p.parse_args()
    cfg = from_args(args, DEFAULTS)
    log = get_logger("ort_analysis", args.log_level)
    models = [str(m) for m in args.model] if args.model else cfg["models"]
    if not models:
        raise HaseError("no model: --model m.onnx (repeatable)")
    models = paths.expand_globs(models)
    if args.out and len(models) != 1:
        raise HaseError("--out takes one --model")
    if args.list_transformers:
        for level, names in sorted(list_transformers(models[0]).items()):
            off = [n for n in names if n in CPU_ONLY_TRANSFORMERS]
            print(f"level {level}: {len(names)} transformers; off for the CUDA EP: {', '.join(off) or '-'}")
            print("  " + ", ".join(names))
        return 0
    failed = []
    for mp in models:
        try:
            rec = analyse(mp, cfg["pin_dims"], cfg["seed"], cfg["keep_small_values"], log)
        except HaseError as e:
            if len(models) == 1:   # nothing to go on to: its own error is the one line
                raise
            log_failed(log, mp, e, failed)
            continue
        out = args.out or record_path(rec["model"])
        paths.atomic_write_text(out, json.dumps(rec, indent=1) + "\n")
        o = rec["offline"]
        log.info("%s: %d kernels (%s) -> %s", rec["model"], rec["kernel_count"],
                 "claimed" if o["claimed"] else "NOT claimed: " + "; ".join(o["unclaimed_because"]), out)
    batch_failed(failed, len(models))
    return 0


if __name__ == "__main__":
    run_main(main)
