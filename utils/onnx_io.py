"""ONNX loading with clear errors, dtype tables, static-shape checks and dummy inputs."""
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


def check_static(model: onnx.ModelProto, pin_dims: dict, path) -> dict:
    """Every input dim must be a number or a dim_param pinned by config (pin_dims)."""
    for k, v in pin_dims.items():   # all of them: the session gets every one as a free-dimension override
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise HaseError(f"pin_dims.{k} must be a whole number > 0, got {str(v)[:40]!r}", path)
    resolved = {}
    for name, dims in graph_input_dims(model).items():
        if dims is None:
            raise HaseError(f"input '{name}' has no shape in the model (its rank is unknown): export it with "
                            f"input shapes", path)
        shape = []
        for i, d in enumerate(dims):
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
                raise HaseError(f"input '{name}' dim {i} is dynamic ({d}); pin it with --set pin_dims.{d}=SIZE "
                                f"(a whole number > 0)", path)
        resolved[name] = shape
    return resolved


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
