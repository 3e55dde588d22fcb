"""The single registry of kernel type names.

A kernel is one node of ORT's optimized graph: what the executor dispatches. Its canonical
type is the executed op's base name plus the epilogue ORT fused into it, read from the node
itself, so the same fusion gets the same name in every model and at every shape:

    FusedConv(activation=Relu) with a Z (sum) input  ->  Conv_Add_Relu
    nchwc Conv(activation=Relu)                      ->  Conv_Relu
    Conv with a BatchNormalization folded into it    ->  Conv        (the BN is only in folded_ops)

Instances are named '<type>#<i>' (nn-Meter style). Folding constants (BN into the conv weights)
does not change the kernel that runs, so it does not change the type.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class OpSpec:
    base: str            # canonical base name
    category: str        # drives FLOPs estimation and the generic fallback predictor
    epilogue: str = ""   # how fused work shows on the node: "conv", "gemm" or ""


_A = "activation"
OPS = {
    # convolutions: plain, ORT-fused (contrib), NHWC and NCHWc variants run the same math
    "Conv": OpSpec("Conv", "conv", "conv"),
    "FusedConv": OpSpec("Conv", "conv", "conv"),
    "NhwcConv": OpSpec("Conv", "conv", "conv"),
    "NhwcFusedConv": OpSpec("Conv", "conv", "conv"),
    "ConvTranspose": OpSpec("ConvTranspose", "conv"),
    # matrix products
    "MatMul": OpSpec("MatMul", "gemm"),
    "FusedMatMul": OpSpec("MatMul", "gemm"),
    "Gemm": OpSpec("Gemm", "gemm", "gemm"),
    "FusedGemm": OpSpec("Gemm", "gemm", "gemm"),
    # pooling
    "MaxPool": OpSpec("MaxPool", "pool"),
    "AveragePool": OpSpec("AveragePool", "pool"),
    "GlobalAveragePool": OpSpec("GlobalAveragePool", "reduce"),
    "GlobalMaxPool": OpSpec("GlobalMaxPool", "reduce"),
    "ReduceMean": OpSpec("ReduceMean", "reduce"),
    "ReduceSum": OpSpec("ReduceSum", "reduce"),
    # elementwise
    "Relu": OpSpec("Relu", "elementwise"),
    "Clip": OpSpec("Clip", "elementwise"),
    "Sigmoid": OpSpec("Sigmoid", "elementwise"),
    "HardSigmoid": OpSpec("HardSigmoid", "elementwise"),
    "HardSwish": OpSpec("HardSwish", "elementwise"),
    "Tanh": OpSpec("Tanh", "elementwise"),
    "Erf": OpSpec("Erf", "elementwise"),
    "Add": OpSpec("Add", "elementwise"),
    "Sub": OpSpec("Sub", "elementwise"),
    "Mul": OpSpec("Mul", "elementwise"),
    "Div": OpSpec("Div", "elementwise"),
    "Pow": OpSpec("Pow", "elementwise"),
    "Sqrt": OpSpec("Sqrt", "elementwise"),
    "Gelu": OpSpec("Gelu", "elementwise"),
    "FastGelu": OpSpec("FastGelu", "elementwise"),
    "BiasGelu": OpSpec("BiasGelu", "elementwise"),
    "QuickGelu": OpSpec("QuickGelu", "elementwise"),
    "Dropout": OpSpec("Dropout", "elementwise"),
    "Cast": OpSpec("Cast", "elementwise"),
    # normalisation
    "BatchNormalization": OpSpec("BatchNormalization", "norm"),
    "LayerNormalization": OpSpec("LayerNormalization", "norm"),
    "SimplifiedLayerNormalization": OpSpec("SimplifiedLayerNormalization", "norm"),
    "SkipLayerNormalization": OpSpec("SkipLayerNormalization", "norm"),
    "SkipSimplifiedLayerNormalization": OpSpec("SkipSimplifiedLayerNormalization", "norm"),
    "Softmax": OpSpec("Softmax", "norm"),
    # attention (transformer contrib ops)
    "Attention": OpSpec("Attention", "attention"),
    "MultiHeadAttention": OpSpec("MultiHeadAttention", "attention"),
    # data movement / shape
    "Reshape": OpSpec("Reshape", "shape"),
    "Flatten": OpSpec("Flatten", "shape"),
    "Squeeze": OpSpec("Squeeze", "shape"),
    "Unsqueeze": OpSpec("Unsqueeze", "shape"),
    "Identity": OpSpec("Identity", "shape"),
    "Shape": OpSpec("Shape", "shape"),
    "Transpose": OpSpec("Transpose", "copy"),
    "Concat": OpSpec("Concat", "copy"),
    "Split": OpSpec("Split", "copy"),
    "Slice": OpSpec("Slice", "copy"),
    "Gather": OpSpec("Gather", "copy"),
    "Expand": OpSpec("Expand", "copy"),
    "Pad": OpSpec("Pad", "copy"),
    "Resize": OpSpec("Resize", "copy"),
    "ReorderInput": OpSpec("ReorderInput", "copy"),
    "ReorderOutput": OpSpec("ReorderOutput", "copy"),
    "GatherND": OpSpec("GatherND", "copy"),
    "ScatterND": OpSpec("ScatterND", "copy"),
    "Tile": OpSpec("Tile", "copy"),
    "Where": OpSpec("Where", "elementwise"),
    "Equal": OpSpec("Equal", "elementwise"),
    "Less": OpSpec("Less", "elementwise"),
    "Greater": OpSpec("Greater", "elementwise"),
    "Neg": OpSpec("Neg", "elementwise"),
    "Exp": OpSpec("Exp", "elementwise"),
    "ConstantOfShape": OpSpec("ConstantOfShape", "shape"),
    "Range": OpSpec("Range", "shape"),
    "MemcpyFromHost": OpSpec("MemcpyFromHost", "transfer"),
    "MemcpyToHost": OpSpec("MemcpyToHost", "transfer"),
}

CATEGORIES = sorted({s.category for s in OPS.values()} | {"other"})

# FusedConv / nchwc Conv activation attribute -> name used in the type
ACTIVATIONS = {"Relu": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh", "LeakyRelu": "LeakyRelu",
               "Clip": "Clip", "HardSigmoid": "HardSigmoid", "HardSwish": "HardSwish"}


def spec(op_type: str) -> OpSpec:
    """Spec of an ORT op type; an op not in the registry keeps its own name, category 'other'."""
    return OPS.get(op_type, OpSpec(op_type, "other"))


def is_known(op_type: str) -> bool:
    return op_type in OPS


def canonical_type(op_type: str, attrs: dict, has_sum: bool = False) -> str:
    """Canonical kernel type of one optimized node.

    has_sum: the node adds a residual tensor in its epilogue (FusedConv's Z input, nchwc Conv's
    4th input, Gemm/FusedGemm's C when it is an activation rather than a bias).
    """
    s = spec(op_type)
    parts = [s.base]
    if s.epilogue in ("conv", "gemm"):
        if has_sum:
            parts.append("Add")
        act = attrs.get("activation")
        if isinstance(act, bytes):
            act = act.decode()
        if act:
            parts.append(ACTIVATIONS.get(act, act))
    return "_".join(parts)


def base_of(kernel_type: str) -> str:
    """Base op of a canonical type: 'Conv_Add_Relu' -> 'Conv'."""
    return kernel_type.split("_", 1)[0]


def category_of(kernel_type: str) -> str:
    base = base_of(kernel_type)
    for s in OPS.values():
        if s.base == base:
            return s.category
    return "other"


def instance_id(kernel_type: str, i: int) -> str:
    return f"{kernel_type}#{i}"
