"""ONNX loading with clear errors, dtype tables, static-shape checks, the memory a run needs and dummy inputs."""
import json
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from hase.utils.errors import HaseError

# ONNX tensor type <-> numpy <-> the names ORT's profiler uses
NP_OF_ONNX = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64,
              TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.INT8: np.int8,
              TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_}
NAME_OF_ONNX = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16", TensorProto.DOUBLE: "float64",
                TensorProto.INT64: "int64", TensorProto.INT32: "int32", TensorProto.INT8: "int8",
                TensorProto.UINT8: "uint8", TensorProto.BOOL: "bool"}
ONNX_OF_NAME = {v: k for k, v in NAME_OF_ONNX.items()}
# ORT profiler's input_type_shape keys and session.get_inputs() type strings
NAME_OF_ORT = {"float": "float32", "float16": "float16", "double": "float64", "int64_t": "int64",
               "int32_t": "int32", "int8_t": "int8", "uint8_t": "uint8", "bool": "bool",
               "tensor(float)": "float32", "tensor(float16)": "float16", "tensor(double)": "float64",
               "tensor(int64)": "int64", "tensor(int32)": "int32", "tensor(int8)": "int8",
               "tensor(uint8)": "uint8", "tensor(bool)": "bool"}
ITEMSIZE = {"float32": 4, "float16": 2, "float64": 8, "int64": 8, "int32": 4, "int8": 1, "uint8": 1, "bool": 1}


def load_model(path, load_weights: bool = True) -> onnx.ModelProto:
    path = Path(path)
    if not path.exists():
        raise HaseError("file not found", path)
    try:
        model = onnx.load(str(path), load_external_data=load_weights)
    except Exception as e:  # DecodeError, OSError...: the bytes are not an ONNX model
        raise HaseError(f"not a readable ONNX model ({type(e).__name__})", path)
    if not model.graph.node:
        raise HaseError("not an ONNX model (empty graph)", path)
    return model


def graph_input_dims(model: onnx.ModelProto) -> dict:
    """{input name: [dim value or dim_param string or None]} for the real (non-initializer) inputs; None for an
    input whose shape the model does not declare (not a scalar: its rank is unknown)."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.tensor_type.HasField("shape"):
            out[vi.name] = None
            continue
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
        out[vi.name] = dims
    return out


def _and(items: list) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


class UnpinnedDims(HaseError):
    """Dynamic input dims that pin_dims does not pin: all of them in one line, with how to pin them in the words of
    the entry point (worded): `--set pin_dims.D=SIZE` ('cli', the default: hase and the phase scripts),
    `pin_dims={'D': SIZE}` ('api', the Predictor; the dims already pinned kept in it), the form field pin_dims
    ('service', hase serve's upload)."""

    def __init__(self, dims, pins=None, path=None, style: str = "cli"):
        self.dims = [(str(inp), int(axis), str(name)) for inp, axis, name in dims]   # (input, axis, dim name)
        self.pins = dict(pins or {})   # every named dim of the model's inputs: its size, None where unpinned
        self.style = style
        names = list(dict.fromkeys(name for _, _, name in self.dims))
        for n in names:
            self.pins.setdefault(n, None)
        per_input = {}
        for inp, axis, name in self.dims:
            per_input.setdefault(inp, []).append((axis, name))
        groups = {}   # inputs with the same unpinned axes are named together
        for inp, axes in per_input.items():
            groups.setdefault(tuple(axes), []).append(f"'{inp}'")
        if len(self.dims) == 1:
            inp, axis, name = self.dims[0]
            what = f"input '{inp}' dim {axis} is dynamic ({name})"
        else:
            what = ", ".join(f"{'input' if len(ins) == 1 else 'inputs'} {_and(ins)} "
                             f"{'dim' if len(axes) == 1 else 'dims'} {_and([f'{a} ({n})' for a, n in axes])}"
                             for axes, ins in groups.items()) + " are dynamic"
        size = lambda k: "SIZE" if self.pins[k] is None else str(self.pins[k])  # noqa: E731
        if style == "api":
            how = "pin_dims={" + ", ".join(f"{k!r}: {size(k)}" for k in self.pins) + "}"
        elif style == "service":
            how = "the form field pin_dims={" + ", ".join(f"{json.dumps(k)}: {size(k)}" for k in self.pins) + "}"
        else:
            how = " ".join(f"--set pin_dims.{k}=SIZE" for k in names)
        them = "it" if len(names) == 1 else "them"
        super().__init__(f"{what}; pin {them} with {how} "
                         f"({'a whole number' if len(names) == 1 else 'whole numbers'} > 0)", path)

    def worded(self, style: str) -> "UnpinnedDims":
        return self if style == self.style else UnpinnedDims(self.dims, self.pins, self.path, style)

    def __reduce__(self):
        return UnpinnedDims, (self.dims, self.pins, self.path, self.style)


def check_static(model: onnx.ModelProto, pin_dims: dict, path) -> dict:
    """Every input dim must be a number or a dim_param pinned by config (pin_dims). The dims left unpinned are
    named together (UnpinnedDims), not the first alone."""
    for k, v in pin_dims.items():   # all of them: the session gets every one as a free-dimension override
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise HaseError(f"pin_dims.{k} must be a whole number > 0, got {str(v)[:40]!r}", path)
    resolved, unpinned, named = {}, [], {}
    for name, dims in graph_input_dims(model).items():
        if dims is None:
            raise HaseError(f"input '{name}' has no shape in the model (its rank is unknown): export it with "
                            f"input shapes", path)
        shape = []
        for i, d in enumerate(dims):
            if isinstance(d, str) and d:
                named.setdefault(d, pin_dims.get(d))
            if isinstance(d, int) and d > 0:
                shape.append(d)
            elif isinstance(d, str) and d in pin_dims:
                shape.append(pin_dims[d])
            elif isinstance(d, int):
                raise HaseError(f"input '{name}' dim {i} is {d}, not a size > 0", path)
            elif not d:   # neither a size nor a name: nothing pin_dims could name
                raise HaseError(f"input '{name}' dim {i} has neither a size nor a name: export the model with "
                                f"static input shapes (or named dynamic dims, then pin them with pin_dims)", path)
            else:
                unpinned.append((name, i, d))
        resolved[name] = shape
    if unpinned:
        raise UnpinnedDims(unpinned, named, path)
    return resolved


def pins_text(model: onnx.ModelProto, pin_dims: dict) -> str:
    """'at pin_dims {...}' with the pins the model's inputs use, or 'at its input shapes' (a static model)."""
    used = {d for dims in graph_input_dims(model).values() for d in (dims or []) if isinstance(d, str)}
    pins = {k: v for k, v in (pin_dims or {}).items() if k in used}
    return f"at pin_dims {pins}" if pins else "at its input shapes"


RUN_MEMORY_FRACTION = 0.5   # the most of this machine's available memory a run's lower bound may take
LIGHT_INIT_ELEMS = 1024     # run_memory_bytes keeps initializers up to this size (shape tensors shape inference reads)


def _itemsize(elem_type: int) -> int:
    if elem_type == TensorProto.STRING:
        return 0
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except Exception:   # UNDEFINED, a type numpy does not know: not counted (a lower bound)
        return 0


def run_memory_bytes(model: onnx.ModelProto, shapes: dict) -> tuple:
    """(bytes of the graph inputs at `shapes`, a lower bound of the largest activation's bytes): what one run at
    those shapes needs at least. The activation comes from ONNX shape inference of the graph with its inputs fixed
    at `shapes`, on a light copy (the weights as typed inputs: a few ms for a ResNet-50); 0 where it cannot tell.
    Python ints throughout: a size pinned far too big must not wrap around in int64."""
    dtypes = {vi.name: vi.type.tensor_type.elem_type for vi in model.graph.input}
    inputs = sum(math.prod(s) * _itemsize(dtypes.get(n, TensorProto.FLOAT)) for n, s in shapes.items())
    largest = 0
    try:
        light = onnx.ModelProto()
        light.ir_version = max(model.ir_version, 4)   # initializers need not be graph inputs
        light.opset_import.extend(model.opset_import)
        light.functions.extend(model.functions)
        g = light.graph
        g.node.extend(model.graph.node)
        g.output.extend(model.graph.output)
        inits = {i.name for i in model.graph.initializer}
        for vi in model.graph.input:
            if vi.name in inits:
                continue
            x = g.input.add()
            x.CopyFrom(vi)
            if vi.name in shapes:
                x.type.tensor_type.shape.Clear()
                for d in shapes[vi.name]:
                    x.type.tensor_type.shape.dim.add().dim_value = int(d)
        for t in model.graph.initializer:
            if math.prod(t.dims) <= LIGHT_INIT_ELEMS:
                g.initializer.append(t)
            else:
                g.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        inferred = onnx.shape_inference.infer_shapes(light, strict_mode=False, data_prop=True)
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
                continue
            largest = max(largest, math.prod(d.dim_value for d in tt.shape.dim) * _itemsize(tt.elem_type))
    except Exception:   # a graph shape inference cannot read: the inputs alone
        largest = 0
    return inputs, largest


def check_run_memory(model: onnx.ModelProto, shapes: dict, pin_dims: dict, path) -> None:
    """Before an analysis runs the model once on this machine's CPU: refuse, in one line, a run whose lower bound
    (run_memory_bytes) is over RUN_MEMORY_FRACTION of the memory available here (it would fail after minutes with
    'Unable to allocate', or swap)."""
    import psutil
    inputs, largest = run_memory_bytes(model, shapes)
    avail = psutil.virtual_memory().available
    if inputs + largest <= RUN_MEMORY_FRACTION * avail:
        return
    gib = lambda b: f"{b / 2 ** 30:.1f} GiB"  # noqa: E731
    at = pins_text(model, pin_dims)
    raise HaseError(f"the analysis runs the model once on this machine's CPU {at}, which needs at least "
                    f"{gib(inputs + largest)} (inputs {gib(inputs)}, largest activation {gib(largest)}): more than "
                    f"{RUN_MEMORY_FRACTION:.0%} of the {gib(avail)} available here; "
                    + ("pin a smaller size" if at.startswith("at pin_dims") else "analyse it on a larger machine"),
                    path)


TILE_ELEMS = 1 << 20   # a larger float array repeats one random block of this many values


def dummy_array(shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    if dtype.startswith("float"):
        # uniform in [-1, 1), drawn in the target width, in place (standard_normal + astype of a 400 MB
        # input took seconds). Above TILE_ELEMS one random block is repeated: a GPU kernel's time does not
        # depend on its values, and drawing a GB of inputs per packed model was a fifth of the kernel
        # space's collection time
        wide = np.float64 if dtype == "float64" else np.float32
        n = int(np.prod(shape)) if len(shape) else 1
        a = rng.random(min(n, TILE_ELEMS), dtype=wide)
        a *= 2.0
        a -= 1.0
        if n > TILE_ELEMS:
            rows = -(-n // TILE_ELEMS)
            big = np.empty((rows, TILE_ELEMS), dtype=wide)
            big[:] = a                    # a broadcast copy: memory speed
            a = big.reshape(-1)[:n]
        a = a.reshape(shape)
        return a if a.dtype == np.dtype(dtype) else a.astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return np.zeros(shape, dtype=dtype)  # integer data (indices): zeros are always in range


def dummy_feed(session, shapes: dict = None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feed = {}
    for i in session.get_inputs():
        shape = (shapes or {}).get(i.name) or i.shape
        if any(not isinstance(d, int) for d in shape):
            raise HaseError(f"input '{i.name}' has dynamic shape {shape}")
        feed[i.name] = dummy_array(shape, NAME_OF_ORT.get(i.type, "float32"), rng)
    return feed


def numel(shape) -> int:
    return int(np.prod(shape)) if shape else 1


def nbytes(shape, dtype: str) -> int:
    return numel(shape) * ITEMSIZE.get(dtype, 4)
