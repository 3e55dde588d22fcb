"""Hase: predict ONNX Runtime session.run latency on NVIDIA GPUs (and the CPU EP) under the current load.

    import hase
    p = hase.load_predictor("nvidia-h200")
    print(p.predict("model.onnx").total_ms)

The API is hase/api.py (Predictor, Prediction, load_predictor); the `hase` command hase/cli.py; the service
hase/service.py. The phase packages are subpackages of this one: hase.utils, hase.model_zoo, hase.ort_analysis,
hase.kernel_model, hase.benchmark, hase.training, hase.graph_model, hase.inference, hase.debug, and the module
hase.evaluator. An installed wheel holds them under hase/ (hase/utils/, ..., hase/evaluator.py; nothing else at the
top level of site-packages). In a checkout they stay at the repository root (utils/, ..., evaluator.py): there this
package's __path__ also names the root, so `hase.utils` is <repo>/utils (PYTHONPATH=<repo> or `pip install -e .`).
"""
import os as _os

__version__ = "0.1.0"
__all__ = ["load_predictor", "Predictor", "Prediction", "__version__"]


def _checkout_root():
    """The repository root when this package sits in a Hase checkout (the phase folders beside hase/), else None.
    Never site-packages: an installed wheel has hase/utils itself and no pyproject.toml beside hase/."""
    here = _os.path.dirname(_os.path.abspath(__file__))
    root = _os.path.dirname(here)
    if _os.path.isdir(_os.path.join(here, "utils")):          # installed layout: the phases are inside hase/
        return None
    if not (_os.path.isfile(_os.path.join(root, "pyproject.toml"))
            or _os.path.exists(_os.path.join(root, ".git"))):
        return None
    if not all(_os.path.isfile(_os.path.join(root, d, "__init__.py")) for d in ("utils", "model_zoo", "inference")):
        return None
    return root


_root = _checkout_root()
if _root is not None and _root not in __path__:
    __path__.append(_root)   # hase.utils -> <repo>/utils, hase.evaluator -> <repo>/evaluator.py
del _root


def __getattr__(name):   # lazy: `hase --help` and `import hase` stay light
    if name in ("load_predictor", "Predictor", "Prediction"):
        from hase import api
        return getattr(api, name)
    raise AttributeError(f"module 'hase' has no attribute {name!r}")
