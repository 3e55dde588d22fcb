"""GPU time and host dispatch per node, learned from the corpus's in-model measurements (issue 22).

The kernel-space predictor (phase 5) learns standalone kernels; a node inside a model runs after other
kernels (warm caches, no launch of its own inputs) and ORT dispatches it among others. Here both terms are
learned where they happen: on the CUPTI GPU time and the launch-interval host time of every node of the
corpus's training architectures (benchmark/results/<gpu>/corpus/, medians over sessions and machines).

  gpu_us(node)  = expm1(trees(features))     CUPTI time of the node's kernels (0 for nodes that launch none)
  host_us(node) = expm1(trees'(features))    plain dispatch: launch interval less CUPTI's own cost per launch

Features (training/features.py's kernel features + the shape of every activation input): the op type (its code
in the training vocabulary; -1 = unseen), FLOPs, bytes, elements, the conv geometry and the second operand of a
MatMul (attention's q @ k^T is two activations). An op type absent from training is predicted from the generic
features alone and counted (`unseen_types`, fallback share of predicted time), unless it has a kin in the
training vocabulary (KIN below): an op ORT's CUDA EP runs through the same kernel template and dispatch path as a
trained type (LessOrEqual and Greater: one binary-elementwise template with a bool output; GatherElements and
Gather: an index read per output element) is priced with that type's code and named in `kin_types`.

Recurrent nodes (LSTM, GRU, RNN: one ONNX node for the whole sequence) run one step after the other: ORT launches
a few kernels per time step and direction (4,106 launches for a 2-layer bidirectional LSTM over 512 steps), so both
their GPU time and their dispatch grow with the number of steps, not with any size the trees see on other ops. The
trees learn them per step (`recurrent_steps`: time steps x directions; the node's shapes and FLOPs as one step), and
the prediction is the step's time x the steps. Exam v5, where no recurrent node was in training, priced them as one
small op: 10-50x under.

Library: NodeModel.fit(kernels, gpu_us, host_us) / .predict(kernels) / .save(dir) / NodeModel.load(dir); the
predictor interface of training/train_kernel_model.KernelPredictor (predict_kernels, unseen_types,
load_fields, device, manifest) so the timeline takes it where it takes a kernel predictor.
"""
import json
import math
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.ort_analysis.flops import recurrent_step  # noqa: E402
from hase.training.kernel_predictor import CompactForest, forest_arrays  # noqa: E402
from hase.training.features import category_of, feature_frame, type_vocabulary, UNSEEN_CODE, META_TYPE  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

FORMAT = "hase.node_model/1"
EXTRA = ["n_act_inputs", "in_rank", "out_rank", "log_act2_elems", "act2_last", "act2_prev", "out_last",
         "log_out_lead", "on_cpu", "inserted", "prev_launchless", "next_launchless", "axis_len_log", "axis_inner_log"]
PARAMS = {"n_estimators": 500, "max_depth": 8, "learning_rate": 0.05, "subsample": 0.8, "colsample_bytree": 0.8,
          "min_child_weight": 2.0, "tree_method": "hist", "n_jobs": 2, "random_state": 0}


def _shape(e) -> list:
    s = (e or {}).get("shape") or []
    return [int(x) if isinstance(x, (int, float)) and x > 0 else 1 for x in s]


def extra_features(k: dict) -> dict:
    acts = [e for e in (k.get("inputs") or []) if e and e.get("role") == "activation"]
    a2 = _shape(acts[1]) if len(acts) > 1 else []
    a1 = _shape(acts[0]) if acts else []
    out = _shape((k.get("outputs") or [None])[0]) if k.get("outputs") else []
    return {"n_act_inputs": float(len(acts)), "in_rank": float(len(a1)), "out_rank": float(len(out)),
            "log_act2_elems": math.log1p(float(np.prod(a2))) if a2 else 0.0,
            "act2_last": float(a2[-1]) if a2 else 0.0, "act2_prev": float(a2[-2]) if len(a2) > 1 else 0.0,
            "out_last": float(out[-1]) if out else 0.0,
            "log_out_lead": math.log1p(float(np.prod(out[:-1]))) if len(out) > 1 else 0.0,
            "on_cpu": float(k.get("ep") == "CPUExecutionProvider"), "inserted": float(bool(k.get("inserted_by_ort"))),
            "prev_launchless": float(k.get("ctx_prev_launchless", 0.0)),
            "next_launchless": float(k.get("ctx_next_launchless", 0.0)), **axis_features(k)}


# An op that works along an axis (Softmax, LayerNormalization, Reduce*, Concat, Split, Gather, TopK, ...) reads
# its input with the stride of the dims after that axis. ORT's CUDA Softmax over a non-last axis transposes around
# its kernel: over the H200 corpus it ran 0.014-0.063 ns per element against 0.002-0.013 over the last axis (rednet's
# Softmax over the k x k taps was priced x0.34 without this). Two features say where the axis lies: the log of its
# length (the product of the reduced dims for Reduce*) and the log of the product of the dims after it (0: last axis).
AXIS_DEFAULT = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "BiasSoftmax": -1, "LayerNormalization": -1,
                "SimplifiedLayerNormalization": -1, "SkipLayerNormalization": -1,
                "SkipSimplifiedLayerNormalization": -1, "TopK": -1, "Gather": 0, "GatherElements": 0, "Split": 0,
                "ArgMax": 0, "ArgMin": 0, "ScatterElements": 0}


def _axes(k: dict, rank: int):
    """The axes (0..rank-1) an op works along, or None if it has none."""
    a, op = k.get("attributes") or {}, k.get("op_type") or k.get("type")
    if "axis" in a or op in AXIS_DEFAULT:
        ax = a.get("axis", AXIS_DEFAULT.get(op, 0))
        return [int(ax) % rank] if isinstance(ax, (int, float)) else None
    if not str(op).startswith("Reduce"):
        return None
    axes = a.get("axes")
    if axes is None:   # opset 13+ ReduceSum (18+: all Reduce*): axes as a const input; none: all dims
        ins = k.get("inputs") or []
        v = ins[1].get("value") if len(ins) > 1 and ins[1] else None
        axes = v if isinstance(v, list) else ([v] if isinstance(v, (int, float)) else None)
    if not axes:
        return None if a.get("noop_with_empty_axes") else list(range(rank))
    return sorted({int(x) % rank for x in axes if isinstance(x, (int, float))}) or None


def axis_features(k: dict) -> dict:
    ins = k.get("inputs") or []
    shape = _shape(ins[0]) if ins else []
    axes = _axes(k, len(shape)) if shape else None
    if not axes:
        return {"axis_len_log": 0.0, "axis_inner_log": 0.0}
    return {"axis_len_log": math.log(float(np.prod([shape[i] for i in axes]))),
            "axis_inner_log": math.log(float(np.prod(shape[axes[-1] + 1:])))}


# A node's dispatch interval depends on its neighbours. Over exam v8's traces (machine t, 294 models), a view op
# (Reshape, Squeeze, Unsqueeze, Flatten: ORT launches no kernel for them) took 4.5 us between two launching nodes and
# 2.7-2.9 us next to another launchless node (dlrm: 2.0 us in runs of them; transformers' views sit between GEMMs).
# Part of a kernel launch's cost lands after cudaLaunchKernel returns, in the next node's interval. The record's
# kernel order is ORT's execution order (98.7% of adjacent pairs agree with the traces), so the neighbours are known
# before any run.
def launchless(k: dict) -> bool:
    """ORT launches no GPU kernel for this node: a view op (category 'shape') or a node placed on the CPU EP."""
    return k.get("category") == "shape" or k.get("ep") == "CPUExecutionProvider"


def with_context(kernels: list) -> list:
    """Copies of a record's kernels (in execution order) with whether the previous and the next node launch nothing
    (a run's first node has no launch before it, its last none after)."""
    flags = [launchless(k) for k in kernels]
    n = len(kernels)
    return [dict(k, ctx_prev_launchless=float(flags[i - 1] if i > 0 else True),
                 ctx_next_launchless=float(flags[i + 1] if i + 1 < n else True)) for i, k in enumerate(kernels)]


# A grouped or depthwise Conv1d with a long kernel: cuDNN runs it either as one kernel or as 1-6 kernels per channel
# group. Over the H200 corpus traces the choice is made per shape (every node of the shape, every session and
# machine agree): grouped (not depthwise) with K 96-128 ran per group in all 19 models (wav2vec's positional conv);
# depthwise with K >= 28 in 16 of 24 models (K >= 128 always; K 29-64 mostly at batch 1-4); K <= 27 never. Per-group
# kernels may overlap in time (wav2vec, ssm: 2-7x more summed kernel time than busy time) or not (conformer: 34 ms at
# batch 8, truly slow). The trees do not learn the boundary (exam v7: wav2vec 120%, ssm 208%; v6: ssm 102%), so a
# prediction names the risk instead of hiding it. The length is the effective one, (K - 1) * dilation + 1 (session
# 28, 1,423 grouped Conv1d nodes of 252 H200 corpus models): tasnet's K=3 convs at dilation 16-128 ran one kernel per
# group (launches = groups + 1) in 34 nodes; by K alone 39 of the 190 per-group nodes went unnamed, by the effective
# length 5 (and 52% of the named nodes ran per group, 65% by K: the boundary is cuDNN's per shape).
# The H100 grid (session 29, benchmark/results/nvidia-h100/conv1d_lazy/: 219 single-node convs moved one factor at a
# time) says the same: this rule 71% right, a classifier on the corpus 74%; per group at K=32 batch 4-8 but not 1-2
# or 16-64. A wrong guess costs ~100x either way, so the rule warns and prices nothing.
PER_GROUP_MIN_KERNEL = 28
POOL_FEATURE = "pooled_other_gpu"   # NodeModel.fit gpu_pool: 1 on another GPU's rows, 0 on this GPU's


def effective_kernel(k: int, dilation: int = 1) -> int:
    """The span a dilated kernel covers: (k - 1) * dilation + 1."""
    return (int(k) - 1) * int(dilation) + 1


def grouped_conv1d(k: dict):
    """{K, dilation, span, B, C, L, groups} of a CUDA-EP grouped or depthwise Conv1d (input [B, C, L]); None for
    any other kernel."""
    a = k.get("attributes") or {}
    ks, x, g = a.get("kernel_shape") or [], _shape((k.get("inputs") or [None])[0]), int(a.get("group") or 1)
    if k.get("op_type") != "Conv" or k.get("ep") != "CUDAExecutionProvider" or len(ks) != 1 or len(x) != 3 or g < 2:
        return None
    d = int((a.get("dilations") or [1])[0])
    return {"K": int(ks[0]), "dilation": d, "span": effective_kernel(ks[0], d), "B": x[0], "C": x[1], "L": x[2],
            "groups": g}


def per_group_candidate(k: dict) -> bool:
    """A CUDA-EP grouped or depthwise Conv1d whose kernel spans PER_GROUP_MIN_KERNEL or more, dilation included."""
    c = grouped_conv1d(k)
    return c is not None and c["span"] >= PER_GROUP_MIN_KERNEL


def per_group_risk(kernels: list) -> str:
    """One line naming the CUDA-EP grouped or depthwise Conv1d nodes whose kernel is long enough that cuDNN may run
    them one channel group at a time; '' when the model has none."""
    hit = [(c["span"], c["groups"], k.get("node_name") or k.get("id"))
           for k in kernels if (c := grouped_conv1d(k)) and c["span"] >= PER_GROUP_MIN_KERNEL]
    if not hit:
        return ""
    kmax, g, name = max(hit)
    return (f"{len(hit)} grouped or depthwise Conv1d node(s) with a kernel spanning {PER_GROUP_MIN_KERNEL} or more "
            f"(longest {kmax} with its dilation, {g} groups, '{name}'): cuDNN may run such a conv one channel group "
            f"at a time, 20-50x slower per multiply-add; whether it does is cuDNN's choice for the exact shape, the "
            f"same on the H100 and the H200 but no simple boundary (the same conv ran per group at batch 4 and 8, as "
            f"one kernel at batch 1, 2 and 16-64; exams v12-v16: ssm, tasnet, conformer 30-160% off), so this "
            f"prediction may be far off. The CUDA EP option cudnn_conv1d_pad_to_nc1d=1 ran 74 of the 102 per-group "
            f"convs of the H200 grid as one kernel (their GPU time 2,050 -> 25 us median; "
            f"benchmark/results/nvidia-h200/conv1d_nc1d/): consider it for this model; Hase predicts the default "
            f"layout")


# Every model the node models were fitted on computes in float32 (2,594 H200 corpus records: 1.35 M float32 tensors,
# no float16 or bfloat16). A reduced-precision model runs other kernels (tensor-core float16 convs and GEMMs, half
# the bytes for the memory-bound ops), and the trees price its nodes from FLOPs and bytes as if they were float32
# nodes of those sizes: nothing measured says how far off that is, so a prediction names it.
FLOAT_DTYPES = {"float16", "bfloat16", "float32", "float64"}
TRAINED_FLOAT_DTYPES = ("float32",)   # what a fit records in its manifest (float_dtypes); older fits: these


def float_dtypes(kernels: list) -> set:
    """The floating-point dtypes the kernels compute in (their activation inputs and outputs)."""
    return {e["dtype"] for k in kernels for e in list(k.get("inputs") or []) + list(k.get("outputs") or [])
            if e and e.get("role", "activation") == "activation" and e.get("dtype") in FLOAT_DTYPES}


def precision_risk(kernels: list, trained=TRAINED_FLOAT_DTYPES, term=None) -> str:
    """One line naming the float dtypes the model computes in that the predictor never trained on; '' if none.
    term: the float16 term (inference/precision.py) that priced the float16 nodes, named with its measured error."""
    other = sorted(float_dtypes(kernels) - set(trained))
    if not other:
        return ""
    n = sum(1 for k in kernels if float_dtypes([k]) & set(other))
    if term and other == ["float16"]:
        j, f = term.get("leave_one_arch_out") or {}, term.get("fitted_on") or {}
        n = sum(1 for k in kernels if float_dtypes([k]) == {"float16"})   # the nodes the term prices (no Casts)
        return (f"{n} of {len(kernels)} kernels compute in float16: priced as float32 nodes of the same shapes times "
                f"the float16 term ({term.get('path', 'precision/float16_term.json')}), measured on "
                f"{f.get('models', '?')} float16 twins of {len(f.get('architectures') or [])} architectures on one "
                f"H100 (leave one architecture out: {j.get('mape_pct', float('nan')):.1f}% on the GPU sum); "
                f"not yet checked on another GPU (H200 included)")
    return (f"{n} of {len(kernels)} kernels compute in {', '.join(other)}; the predictor was trained on "
            f"{', '.join(trained)} models only: reduced-precision kernels (tensor cores, half the bytes) are priced "
            f"by their FLOPs and bytes as {trained[0]} kernels of those sizes, and how far off that is has not been "
            f"measured")


def recurrent_steps(k: dict) -> int:
    """Sequential steps of a recurrent node (time steps x directions); 1 for every other node."""
    return recurrent_step(k.get("op_type"), k.get("attributes") or {}, _shape((k.get("inputs") or [None])[0]))[0]


# InstanceNormalization on the CUDA EP (and GroupNormalization, priced as its kin): ORT takes the statistics with
# cuDNN's batch norm over the input viewed as [1, N*C, L] (6 launches), then normalizes elementwise. With many short
# instances the kernel runs at a fixed throughput: 8.0-8.6 ns per instance over retnet's GroupNorm per head (exam v15
# on the H100: 32,768-196,608 instances of L = 32-64), 8.9-9.4 ns over gan's (16,384 instances of L = 144), more
# per instance for longer L. The trees, trained up to 16,384 instances, flatten past them (retnet: x0.07), so a node
# is priced at least at that throughput: INSTANCE_FLOOR_QUANTILE of the time per instance over this GPU's training
# nodes with INSTANCE_FLOOR_MIN or more instances, times its own N*C. Few long instances (mixer, diffusion: <= 1,024)
# sit far above the floor and keep the trees' price (inference/results/nvidia-h100/compare_instance_norm/).
INSTANCE_OPS = ("InstanceNormalization", "GroupNormalization")
INSTANCE_FLOOR_MIN = 4096
INSTANCE_FLOOR_QUANTILE = 0.05
INSTANCE_FLOOR_NODES = 10      # fewer such training nodes: no floor


def instances(k: dict) -> float:
    """N*C of an instance-norm node (its input's first two dims); 0 for every other node."""
    if k.get("op_type") not in INSTANCE_OPS:
        return 0.0
    x = _shape((k.get("inputs") or [None])[0])
    return float(np.prod(x[:2])) if len(x) >= 2 else 0.0


def instance_floor(kernels: list, gpu_us) -> dict:
    """The throughput floor of instance-norm nodes from training nodes: {us_per_instance, nodes, ...}; {} when
    fewer than INSTANCE_FLOOR_NODES nodes have INSTANCE_FLOOR_MIN instances or more."""
    n = np.array([instances(k) for k in kernels], float)
    g = np.asarray(gpu_us, float)
    keep = (n >= INSTANCE_FLOOR_MIN) & (g > 0)
    if keep.sum() < INSTANCE_FLOOR_NODES:
        return {}
    return {"us_per_instance": float(np.quantile(g[keep] / n[keep], INSTANCE_FLOOR_QUANTILE)),
            "nodes": int(keep.sum()), "min_instances": INSTANCE_FLOOR_MIN, "quantile": INSTANCE_FLOOR_QUANTILE}


# BatchNormalization over a 2-D input [rows, C] on the CUDA EP (LeViT's and timm's BN after a Linear): a fixed cost
# per element, 0.601-0.602 ns (std < 0.001) over every H200 corpus node of 1e6 elements or more (machines a-af, 261
# nodes up to 20,736 rows), 0.60-0.62 above 1e5; about 13.3 GB/s, far below the memory's bandwidth. The trees know it
# up to the largest training node and flatten past it (a refit with exam v20 joined priced 4x LeViT's 20,736 rows at
# 2.36x, inference/results/nvidia-h200/compare_join_v20/), so such a node is priced at least at that rate:
# ROWS_BN_FLOOR_QUANTILE of the time per element over this GPU's training nodes with ROWS_BN_FLOOR_MIN elements or more.
ROWS_BN_FLOOR_MIN = 100_000
ROWS_BN_FLOOR_QUANTILE = 0.05
ROWS_BN_FLOOR_NODES = 10      # fewer such training nodes: no floor


def rows_bn_elements(k: dict) -> float:
    """rows x C of a BatchNormalization over a 2-D input; 0 for every other node."""
    if k.get("op_type") != "BatchNormalization":
        return 0.0
    x = _shape((k.get("inputs") or [None])[0])
    return float(np.prod(x)) if len(x) == 2 else 0.0


def rows_bn_floor(kernels: list, gpu_us) -> dict:
    """The per-element floor of 2-D BatchNormalization nodes from training nodes: {us_per_element, nodes, ...}; {}
    when fewer than ROWS_BN_FLOOR_NODES nodes have ROWS_BN_FLOOR_MIN elements or more."""
    n = np.array([rows_bn_elements(k) for k in kernels], float)
    g = np.asarray(gpu_us, float)
    keep = (n >= ROWS_BN_FLOOR_MIN) & (g > 0)
    if keep.sum() < ROWS_BN_FLOOR_NODES:
        return {}
    return {"us_per_element": float(np.quantile(g[keep] / n[keep], ROWS_BN_FLOOR_QUANTILE)),
            "nodes": int(keep.sum()), "min_elements": ROWS_BN_FLOOR_MIN, "quantile": ROWS_BN_FLOOR_QUANTILE}


# Pad on the CUDA EP has two kernels (onnxruntime/core/providers/cuda/tensor/pad.cc): NCHW padding along H and W
# (rank 2; rank 3 with the first dim unpadded; rank 4 with the first two unpadded) runs at 0.002-0.013 ns per output
# element, the generic one (any other padded dim, rank 5+) at a fixed 0.094-0.103 ns (5-95%) over every H200 corpus
# node of 1e5 elements or more (188 nodes: swin_v2's NHWC window padding, timm, bigbird's 5-D block padding), far
# below the memory's bandwidth. Only swin_v2's 4-D shapes trained it, so a 5-D node was priced at the fast rate
# (bigbird, exam v21: x0.04). A generic-path Pad is priced at least at PAD_FLOOR_QUANTILE of the time per output
# element over this GPU's training nodes of that path with PAD_FLOOR_MIN elements or more.
PAD_FLOOR_MIN = 100_000
PAD_FLOOR_QUANTILE = 0.05
PAD_FLOOR_NODES = 10      # fewer such training nodes: no floor


def pad_generic_elements(k: dict) -> float:
    """Output elements of a Pad that ORT's CUDA EP runs with its generic kernel (padded dims read from the input
    and output shapes); 0 for the NCHW H/W kernel, an unpadded copy and every other node."""
    if k.get("op_type") != "Pad":
        return 0.0
    x, y = _shape((k.get("inputs") or [None])[0]), _shape((k.get("outputs") or [None])[0])
    if len(x) != len(y) or not x:
        return 0.0
    padded = [a != b for a, b in zip(x, y)]
    if not any(padded) or len(x) == 2 or (len(x) == 3 and not padded[0]) or (len(x) == 4 and not any(padded[:2])):
        return 0.0
    return float(np.prod(y))


def pad_generic_floor(kernels: list, gpu_us) -> dict:
    """The per-element floor of generic-path Pad nodes from training nodes: {us_per_element, nodes, ...}; {} when
    fewer than PAD_FLOOR_NODES nodes have PAD_FLOOR_MIN output elements or more."""
    n = np.array([pad_generic_elements(k) for k in kernels], float)
    g = np.asarray(gpu_us, float)
    keep = (n >= PAD_FLOOR_MIN) & (g > 0)
    if keep.sum() < PAD_FLOOR_NODES:
        return {}
    return {"us_per_element": float(np.quantile(g[keep] / n[keep], PAD_FLOOR_QUANTILE)),
            "nodes": int(keep.sum()), "min_elements": PAD_FLOOR_MIN, "quantile": PAD_FLOOR_QUANTILE}


def one_step(k: dict) -> dict:
    """A recurrent node as one step of one direction: T -> 1 in its activation shapes, the step's FLOPs
    (ort_analysis.flops.recurrent_step), the weights read once per step."""
    a = k.get("attributes") or {}
    steps, per_step = recurrent_step(k.get("op_type"), a, _shape((k.get("inputs") or [None])[0]))
    if not per_step:
        return k
    lay = int(a.get("layout") or 0)
    wbytes = 4.0 * sum(float(np.prod(w)) for w in (k.get("weight_shapes") or []) if w)

    def step_shape(e):
        if not e or not e.get("shape"):
            return e
        sh = list(e["shape"])
        i = 1 if lay == 1 else 0
        return dict(e, shape=sh[:i] + [1] + sh[i + 1:]) if len(sh) >= 3 else e
    t = steps // (2 if a.get("direction") == "bidirectional" else 1)
    return dict(k, inputs=[step_shape(e) if j == 0 else e for j, e in enumerate(k.get("inputs") or [])],
                outputs=[step_shape(e) if j == 0 else e for j, e in enumerate(k.get("outputs") or [])],
                flops=float(per_step),
                bytes_read=wbytes + max(float(k.get("bytes_read") or 0) - wbytes, 0.0) / t,
                bytes_written=float(k.get("bytes_written") or 0) / t)


# An op type absent from training -> trained types of the same CUDA kernel family, in order of preference: the
# first one in the model's vocabulary lends its code. Only ops whose cost follows the same features (elementwise
# bytes, reduced elements, gathered elements, a matmul's FLOPs) are listed; anything else stays unseen.
_CMP = ("Greater", "Equal", "Sub")                  # binary elementwise (ORT's BinaryElementwise), bool out
_UNARY = ("Abs", "Neg", "Relu", "Sqrt")             # unary elementwise, memory-bound
KIN = {**{t: _CMP for t in ("Less", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd",
                            "BitwiseOr", "BitwiseXor")},
       **{t: _UNARY for t in ("Floor", "Ceil", "Round", "Sign", "Not", "IsNaN", "IsInf", "BitwiseNot")},
       **{t: ("Exp", "Erf", "Sin") + _UNARY for t in ("Log", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh")},
       "Equal": ("Greater", "Sub"), "Greater": ("Equal", "Sub"), "Neg": ("Abs", "Relu", "Sqrt"),
       "Abs": ("Neg", "Relu", "Sqrt"), "Tile": ("Expand", "Concat"), "Expand": ("Tile", "Concat"),
       # cuDNN's recurrent kernels, priced per time step (recurrent_steps) from the step's shapes and FLOPs
       "LSTM": ("GRU",), "GRU": ("LSTM",), "RNN": ("GRU", "LSTM"),
       "Min": ("Max", "Add"), "Sum": ("Add",), "Mean": ("Add",),
       "ReduceMin": ("ReduceMax", "ReduceSum"), "ArgMax": ("ReduceMax", "ReduceSum"),
       "ArgMin": ("ReduceMax", "ReduceSum"), "ReduceProd": ("ReduceSum",), "ReduceSumSquare": ("ReduceSum",),
       "ReduceL1": ("ReduceL2", "ReduceSum"), "ReduceLogSumExp": ("ReduceSum",), "LpNormalization": ("ReduceL2",),
       "GatherElements": ("Gather", "ScatterElements"), "GatherND": ("Gather", "ScatterND"),
       "ScatterND": ("ScatterElements",), "ScatterElements": ("ScatterND",),
       "GlobalMaxPool": ("GlobalAveragePool",), "LogSoftmax": ("Softmax",),
       "Selu": ("Elu", "LeakyRelu"), "Celu": ("Elu",), "ThresholdedRelu": ("Relu",), "Softsign": ("Softplus",),
       "FastGelu": ("Gelu", "QuickGelu"), "BiasGelu": ("Gelu", "QuickGelu"), "BiasAdd": ("Add",),
       "SkipSimplifiedLayerNormalization": ("SkipLayerNormalization", "SimplifiedLayerNormalization"),
       "FusedMatMul": ("MatMul",), "FusedGemm": ("Gemm",), "FusedConv": ("Conv",),
       "GroupNormalization": ("InstanceNormalization",), "SpaceToDepth": ("DepthToSpace",)}


def kin_of(type_codes: dict) -> dict:
    """{op type: its kin}: every KIN op absent from the vocabulary whose kin is in it (the first one listed)."""
    out = {}
    for t, kin in KIN.items():
        k = next((k for k in kin if k in type_codes), None)
        if t not in type_codes and k is not None:
            out[t] = k
    return out


def kin_codes(type_codes: dict, kin: dict = None) -> dict:
    """{op type: code}: the vocabulary plus every kin-priced op with its kin's code (kin: kin_of's, if known)."""
    kin = kin_of(type_codes) if kin is None else kin
    return dict(type_codes, **{t: type_codes[k] for t, k in kin.items()})


def features(kernels: list, type_codes: dict) -> pd.DataFrame:
    f = feature_frame(kernels, [], type_codes)
    x = pd.DataFrame([extra_features(k) for k in kernels], index=f.index)
    return pd.concat([f.drop(columns=[META_TYPE]), x], axis=1), list(f[META_TYPE])


def kernel_ms(record_kernels, gpu_us) -> dict:
    """{kernel id: GPU ms} from one GPU time (us) per kernel."""
    return {k.get("id", str(i)): float(v) / 1e3 for i, (k, v) in enumerate(zip(record_kernels, gpu_us))}


def step_target(us, steps) -> np.ndarray:
    """What the trees learn: log1p of a node's time (us) per recurrent step."""
    return np.log1p(np.maximum(np.asarray(us, float), 0.0) / steps)


# GPU target "roofline_ratio": the GPU trees learn a node's time over its roofline time instead of its time. A tree
# predicts a constant per leaf, so on log time it prices every node larger than the largest it trained on as that
# largest one: exam v18's LeViT BatchNormalization on 2-D inputs (rows x channels) runs at a flat ~13 GB/s whatever
# its size, and the trees, trained up to 6,272 rows (timm's levit at batch 32), priced 12,800-20,736 rows at 0.08x.
# On the ratio a leaf is a throughput, so a larger node of a known kind costs in proportion to its bytes or FLOPs,
# which is how memory- and compute-bound kernels scale once they fill the GPU. The roofline is nominal (one
# bandwidth and one FLOP rate for every GPU: the trees learn each GPU's efficiency against it); ROOFLINE_FLOOR_US keeps
# the ratio finite for tiny and launchless nodes (their time is launch latency, not size).
ROOFLINE_GBPS = 3000.0
ROOFLINE_TFLOPS = 50.0
ROOFLINE_FLOOR_US = 2.0
GPU_TARGETS = ("log_time", "roofline_ratio")


def roofline_us(kernels: list) -> np.ndarray:
    """max(bytes / ROOFLINE_GBPS, FLOPs / ROOFLINE_TFLOPS) in us per (one-step) kernel."""
    b = np.array([float(k.get("bytes_read") or 0) + float(k.get("bytes_written") or 0) for k in kernels], float)
    f = np.array([float(k.get("flops") or 0) for k in kernels], float)
    return np.maximum(b / (ROOFLINE_GBPS * 1e3), f / (ROOFLINE_TFLOPS * 1e6))


def gpu_target(us, steps, base_us, kind: str) -> np.ndarray:
    """The GPU trees' target: step_target (log_time) or log((us/step + floor) / (roofline + floor))."""
    if kind == "log_time":
        return step_target(us, steps)
    return np.log((np.maximum(np.asarray(us, float), 0.0) / steps + ROOFLINE_FLOOR_US) / (base_us + ROOFLINE_FLOOR_US))


def gpu_from_target(y, base_us, kind: str) -> np.ndarray:
    """us per step from the GPU trees' output (gpu_target's inverse), never below 0."""
    if kind == "log_time":
        return np.maximum(np.expm1(y), 0.0)
    return np.maximum(np.exp(y) * (base_us + ROOFLINE_FLOOR_US) - ROOFLINE_FLOOR_US, 0.0)


class NodeModel:
    """Per-node GPU and host time (us) from two tree ensembles on log1p(us)."""

    def __init__(self, type_codes=None, boosters=None, manifest=None):
        self.type_codes = type_codes or {}
        self.boosters = boosters or {}
        self.manifest = manifest or {"format": FORMAT, "metadata": {"device": "cuda"}}
        self.load_fields = []          # no load features: the timeline applies the load
        self.device = self.manifest.get("metadata", {}).get("device", "cuda")
        self.dir = None

    # ---- training
    def fit(self, kernels: list, gpu_us, host_us, params=None, gpu_pool=None, target="log_time"):
        """gpu_pool: (kernels, gpu_us) of another GPU of the same architecture (the H200 for the H100: the same SMs
        and clock, HBM at 4.8 against 3.35 TB/s): the GPU-time trees also learn from them, told apart by a feature
        (POOL_FEATURE, 1 on the pooled rows, 0 on this GPU's and at prediction); the host trees never see them.
        target: what the GPU trees learn (GPU_TARGETS: log_time, or roofline_ratio: see roofline_us)."""
        import xgboost as xgb
        if target not in GPU_TARGETS:
            raise HaseError(f"gpu target '{target}' is not one of {', '.join(GPU_TARGETS)}", "gpu_target")
        pk, pg = gpu_pool if gpu_pool is not None else ([], [])
        self.type_codes = type_vocabulary([k["type"] for k in kernels])
        # the pool adds rows to the types this GPU has; a type only the other GPU ran stays unseen here (priced by
        # its kin or the fallback, with its warning), as the host trees never saw it either
        known = np.array([k["type"] in self.type_codes for k in pk], bool)
        pk, pg = [k for k, t in zip(pk, known) if t], np.asarray(pg, float)[known] if len(known) else np.zeros(0)
        steps = np.array([recurrent_steps(k) for k in kernels], float)
        one = [one_step(k) for k in kernels]
        X, _ = features(one, self.type_codes)
        Xg, yg = X, gpu_target(gpu_us, steps, roofline_us(one), target)
        if len(pk):
            pone = [one_step(k) for k in pk]
            Xp, _ = features(pone, self.type_codes)
            Xg = pd.concat([X.assign(**{POOL_FEATURE: 0.0}),
                            Xp.reindex(columns=X.columns, fill_value=0.0).assign(**{POOL_FEATURE: 1.0})],
                           ignore_index=True)
            yg = np.concatenate([yg, gpu_target(pg, np.array([recurrent_steps(k) for k in pk], float),
                                                roofline_us(pone), target)])
        for name, XX, y in (("gpu", Xg, yg), ("host", X, step_target(host_us, steps))):
            m = xgb.XGBRegressor(**{**PARAMS, **(params or {})})
            m.fit(XX.to_numpy(np.float32), y)
            self.boosters[name] = m.get_booster()
        self.manifest["instance_floor"] = instance_floor(kernels, gpu_us)   # this GPU's nodes only
        self.manifest["rows_bn_floor"] = rows_bn_floor(kernels, gpu_us)
        self.manifest["pad_generic_floor"] = pad_generic_floor(kernels, gpu_us)
        if target != "log_time":   # models fitted before the key: log_time
            self.manifest["gpu_target"] = target
        self.manifest.update({"features": list(X.columns), "type_codes": self.type_codes, "nodes": len(kernels),
                              "recurrent_per_step": True, "recurrent_nodes": int((steps > 1).sum()),
                              "float_dtypes": sorted(float_dtypes(kernels))})
        if len(pk):
            self.manifest["gpu_pool"] = {"feature": POOL_FEATURE, "nodes": len(pk),
                                         "nodes_of_types_this_gpu_lacks": int((~known).sum())}
        return self

    # ---- prediction
    def predict(self, kernels: list) -> tuple:
        """(gpu_us, host_us) arrays, one value per kernel."""
        if not kernels:
            return np.zeros(0), np.zeros(0)
        per_step = bool(self.manifest.get("recurrent_per_step"))   # models fitted before the term: as they were
        kernels = with_context(kernels)   # the whole record in execution order (models fitted before: unused)
        steps = np.array([recurrent_steps(k) if per_step else 1 for k in kernels], float)
        # a kin-priced kernel takes its kin's code and category (the record files LessOrEqual under 'other',
        # Greater under 'elementwise'), so the trees see the kin in every type-derived feature
        kin = kin_of(self.type_codes)
        kernels = [dict(k, category=category_of(kin[k["type"]])) if k["type"] in kin else k for k in kernels]
        one = [one_step(k) for k in kernels] if per_step else kernels
        X, _ = features(one, kin_codes(self.type_codes, kin))
        x = X[self.manifest["features"]].to_numpy(np.float32)
        target = self.manifest.get("gpu_target", "log_time")
        base = roofline_us(one) if target != "log_time" else None
        out = []
        for n in ("gpu", "host"):
            b = self.boosters[n]
            xx = x
            if n == "gpu" and self.manifest.get("gpu_pool"):   # this GPU's rows: the pool feature at 0
                xx = np.concatenate([x, np.zeros((len(x), 1), np.float32)], axis=1)
            if isinstance(b, CompactForest):   # a loaded model: numpy over the trees' arrays, no xgboost import
                y = b.predict(xx)
            else:                              # a fitted one: its booster
                import xgboost as xgb
                y = b.predict(xgb.DMatrix(xx))
            out.append(gpu_from_target(y, base, target if n == "gpu" else "log_time") * steps)   # host: log time
        floor = (self.manifest.get("instance_floor") or {}).get("us_per_instance")
        if floor:   # models fitted before the floor (none in their manifest): as they were
            out[0] = np.maximum(out[0], floor * np.array([instances(k) for k in kernels], float))
        floor = (self.manifest.get("rows_bn_floor") or {}).get("us_per_element")
        if floor:   # models fitted before this floor: as they were
            out[0] = np.maximum(out[0], floor * np.array([rows_bn_elements(k) for k in kernels], float))
        floor = (self.manifest.get("pad_generic_floor") or {}).get("us_per_element")
        if floor:   # models fitted before this floor: as they were
            out[0] = np.maximum(out[0], floor * np.array([pad_generic_elements(k) for k in kernels], float))
        per_node = self.manifest.get("host_per_node_us")
        if per_node is not None:   # CPU EP (fit_cpu_timeline node_source trees): one dispatch term a node, no trees
            out[1] = np.full(len(kernels), float(per_node))
        return out[0], out[1]

    def unseen(self, kernels: list) -> np.ndarray:
        """Kernels of a type neither trained nor with a trained kin (KIN): priced by the generic features alone."""
        codes = kin_codes(self.type_codes)
        return np.array([codes.get(k["type"], UNSEEN_CODE) == UNSEEN_CODE for k in kernels])

    def fallback_share(self, kernels: list, gpu_us) -> float:
        """Share of the predicted GPU time (gpu_us, one value per kernel) from kernels of unseen types."""
        gpu_us = np.asarray(gpu_us, float)
        total = gpu_us.sum()
        return float(gpu_us[self.unseen(kernels)].sum() / total) if total > 0 else 0.0

    def unseen_types(self, kernels) -> list:
        codes = kin_codes(self.type_codes)
        return sorted({k["type"] for k in kernels if k["type"] not in codes})

    def kin_types(self, kernels) -> dict:
        """{op type: the trained type whose code prices it} for the model's ops that are priced by a kin."""
        kin = kin_of(self.type_codes)
        return {k["type"]: kin[k["type"]] for k in kernels if k["type"] in kin}

    def predict_kernels(self, record_kernels, load=None) -> dict:
        """{kernel id: in-model GPU ms} (the KernelPredictor interface)."""
        g, _ = self.predict(list(record_kernels))
        return kernel_ms(record_kernels, g)

    # ---- persistence: two xgboost models (binary JSON, xz) + manifest.json
    def save(self, out_dir) -> Path:
        """manifest.json + <name>.ubj.xz per ensemble (xgboost's binary JSON, xz-compressed: 9.2 -> ~4 MB)."""
        import lzma
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for n, b in self.boosters.items():
            paths.atomic_write_bytes(out / f"{n}.ubj.xz", lzma.compress(bytes(b.save_raw("ubj")), preset=6))
        paths.atomic_write_text(out / "manifest.json", json.dumps(self.manifest, indent=1) + "\n")
        return out

    @classmethod
    def load(cls, model_dir) -> "NodeModel":
        """The saved model, its trees as numpy arrays (training.kernel_predictor.CompactForest: XGBoost's float32
        splits, the same predictions to ~1e-5 in log time). Importing xgboost (and the scikit-learn it pulls in)
        takes ~0.6 s of a 1.5 s `hase predict`, so the arrays are cached under HASE_HOME, keyed by the tree files'
        size and mtime; the first load reads the trees with xgboost and writes the cache."""
        d = Path(model_dir)
        man = paths.read_json(d / "manifest.json", "node model manifest")
        if man.get("format") != FORMAT:
            raise HaseError(f"not a node model (format {FORMAT})", d / "manifest.json")
        files = {n: d / f"{n}.ubj.xz" for n in ("gpu", "host")}
        for n, p in files.items():
            if not p.exists():
                raise HaseError(f"node model lacks {p.name}", d)
        key = ";".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files.values())
        cache = paths.home() / "cache" / "node_model" / f"{paths.slug(str(d.resolve()))}.npz"
        arrays = _read_cached_arrays(cache, key)
        if arrays is None:
            arrays = {n: forest_arrays(_read_booster(p)) for n, p in files.items()}
            _write_cached_arrays(cache, key, arrays)
        m = cls(man["type_codes"], {n: CompactForest(a) for n, a in arrays.items()}, man)
        m.dir = d
        return m


def _read_booster(p: Path):
    import lzma
    import xgboost as xgb
    b = xgb.Booster()
    try:
        b.load_model(bytearray(lzma.decompress(p.read_bytes())))
    except (lzma.LZMAError, xgb.core.XGBoostError) as e:
        raise HaseError(f"unreadable tree model ({' '.join(str(e).split())[:120]})", p)
    return b


def _read_cached_arrays(cache: Path, key: str):
    """{name: forest arrays} from the cache when it was made from the same tree files; None otherwise."""
    try:
        with np.load(cache) as z:
            if str(z["key"]) != key:
                return None
            out = {}
            for name in z.files:
                if "|" in name:
                    n, a = name.split("|", 1)
                    out.setdefault(n, {})[a] = z[name]
            return out if set(out) == {"gpu", "host"} else None
    except (OSError, ValueError, KeyError):   # absent or damaged: rebuilt from the tree files
        return None


def _write_cached_arrays(cache: Path, key: str, arrays: dict) -> None:
    import io
    buf = io.BytesIO()
    np.savez(buf, key=np.array(key), **{f"{n}|{a}": v for n, arrs in arrays.items() for a, v in arrs.items()})
    try:
        paths.atomic_write_bytes(cache, buf.getvalue())
    except OSError:   # a read-only HASE_HOME: predict without the cache
        pass


def is_node_model(model_dir) -> bool:
    p = Path(model_dir) / "manifest.json"
    if not p.exists():
        return False
    try:
        return json.loads(p.read_text()).get("format") == FORMAT
    except (OSError, json.JSONDecodeError):
        return False
