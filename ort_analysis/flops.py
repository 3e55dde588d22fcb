"""FLOPs and bytes of one kernel, from its category and recorded shapes (estimates, per kernel call)."""
from hase.utils.kernel_registry import spec
from hase.utils.onnx_io import nbytes, numel


def _shape(e):
    return e["shape"] if e and e.get("shape") is not None else []


def kernel_flops(op_type: str, ktype: str, attrs: dict, inputs: list, outputs: list) -> int:
    cat = spec(op_type).category
    out = _shape(outputs[0]) if outputs else []
    n_out = numel(out) if out else 0
    epilogue = ktype.count("_")  # Add / activation fused after the main op: one op per output element each
    if cat == "conv":
        w = _shape(inputs[1]) if len(inputs) > 1 else []
        per_out = numel(w[1:]) if len(w) > 2 else 1  # (Cin/groups) * kh * kw
        bias = 1 if len(inputs) > 2 and inputs[2] is not None else 0
        return 2 * n_out * per_out + n_out * (bias + epilogue)
    if cat == "gemm":
        a = _shape(inputs[0])
        if not a:
            return 2 * n_out
        trans_a = attrs.get("transA", 0)
        k = a[-2] if trans_a and len(a) >= 2 else a[-1]
        bias = 1 if len(inputs) > 2 and inputs[2] is not None else 0
        return 2 * n_out * k + n_out * (bias + epilogue)
    if cat == "pool":
        return n_out * numel(attrs.get("kernel_shape", [1]))
    if cat == "reduce":
        return numel(_shape(inputs[0])) if inputs and inputs[0] else n_out
    if cat == "norm":
        return 5 * n_out
    if cat == "attention":
        x = _shape(inputs[0])
        if len(x) == 3:
            b, s, h = x
            return 2 * b * s * h * 3 * h + 4 * b * s * s * h
        return 2 * n_out
    if cat == "elementwise":
        n_in = sum(1 for e in inputs if e is not None)
        return n_out * max(1, n_in - 1)
    return 0  # shape / copy / transfer: bytes only


def kernel_bytes(inputs: list, outputs: list):
    read = sum(nbytes(_shape(e), e.get("dtype") or "float32") for e in inputs if e is not None and e.get("shape") is not None)
    written = sum(nbytes(_shape(o), o.get("dtype") or "float32") for o in outputs if o.get("shape") is not None)
    return int(read), int(written)
