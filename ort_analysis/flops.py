"""FLOPs and bytes of one kernel, from its category and recorded shapes (estimates, per kernel call)."""
from hase.utils.kernel_registry import spec
from hase.utils.onnx_io import nbytes, numel


def _shape(e):
    return e["shape"] if e and e.get("shape") is not None else []


RECURRENT_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}   # GEMM blocks per step: input, forget, cell, output for an LSTM


def recurrent_step(op_type: str, attrs: dict, x_shape: list) -> tuple:
    """(sequential steps, FLOPs of one step) of an ONNX LSTM/GRU/RNN node; (1, 0) for any other node. One node runs
    the whole sequence, one step after the other: steps = time steps x directions; a step multiplies the input and
    the hidden state by every gate's weights, 2 x B x gates*H x (C + H) (the gates' elementwise math is small)."""
    if op_type not in RECURRENT_GATES or len(x_shape or []) < 3:
        return 1, 0
    x = [int(d) if isinstance(d, (int, float)) and d > 0 else 1 for d in x_shape]
    t, b, c = (x[1], x[0], x[2]) if int((attrs or {}).get("layout") or 0) == 1 else (x[0], x[1], x[2])
    h = int((attrs or {}).get("hidden_size") or 1)
    dirs = 2 if (attrs or {}).get("direction") == "bidirectional" else 1
    return t * dirs, 2 * b * RECURRENT_GATES[op_type] * h * (c + h)


def kernel_flops(op_type: str, ktype: str, attrs: dict, inputs: list, outputs: list) -> int:
    steps, per_step = recurrent_step(op_type, attrs, _shape(inputs[0]) if inputs and inputs[0] else [])
    if per_step:
        return steps * per_step
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
