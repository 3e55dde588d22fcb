"""Hase: predict ONNX Runtime session.run latency on NVIDIA GPUs (and the CPU EP) under the current load.

    import hase
    p = hase.load_predictor("nvidia-h200")
    print(p.predict("model.onnx").total_ms)

The API is hase/api.py (Predictor, Prediction, load_predictor); the `hase` command hase/cli.py; the service
hase/service.py. The phase folders (utils, model_zoo, ort_analysis, kernel_model, benchmark, training, graph_model,
inference) are installed beside this package.
"""
__version__ = "0.1.0"
__all__ = ["load_predictor", "Predictor", "Prediction", "__version__"]


def __getattr__(name):   # lazy: `hase --help` and `import hase` stay light
    if name in ("load_predictor", "Predictor", "Prediction"):
        from hase import api
        return getattr(api, name)
    raise AttributeError(f"module 'hase' has no attribute {name!r}")
