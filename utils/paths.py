"""Every path Hase reads or writes. One place, so phases agree on where things live.

HASE_HOME relocates all generated artifacts (tests point it at a temp dir); code and
committed results stay in the repository.
"""
import glob
import gzip
import json
import lzma
import os
import re
from pathlib import Path

from hase.utils.errors import HaseError

REPO = Path(__file__).resolve().parent.parent   # the phase folders' parent: the checkout, or site-packages/hase


def import_root() -> Path:
    """The folder that holds the `hase` package (the checkout's root; site-packages when installed)."""
    import hase
    return Path(hase.__file__).resolve().parent.parent


def child_env(env=None) -> dict:
    """The environment for a child process that runs one of Hase's scripts by path: the folder holding `hase` first
    on PYTHONPATH, so `python path/to/script.py` imports this copy of the project whether or not it is installed."""
    env = dict(os.environ if env is None else env)
    root = str(import_root())
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                  if p and p != root])
    return env


def home() -> Path:
    """HASE_HOME; else the checkout (scripts, `pip install -e .`); else, installed into site-packages
    (`pip install .`), a cache folder outside it ($XDG_CACHE_HOME/hase, ~/.cache/hase)."""
    if os.environ.get("HASE_HOME"):
        return Path(os.environ["HASE_HOME"]).resolve()
    if (REPO / "pyproject.toml").exists():
        return REPO
    return (Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hase").resolve()


# phase outputs (generated, gitignored unless committed results)
def models_dir() -> Path:            # phase 1
    return home() / "model_zoo" / "models"


def kernel_record_dir() -> Path:     # phase 2
    return home() / "ort_analysis" / "ort_kernel_record"


def kernel_onnx_dir() -> Path:       # phase 3
    return home() / "kernel_model" / "kernel_onnx"


def bench_results_dir() -> Path:     # phase 4
    return home() / "benchmark" / "results"


def portable(path) -> str:
    """A path as recorded in an artifact: relative to the Hase home when inside it (resolved back by from_home)."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(home()))
    except ValueError:
        return str(p)


def in_repo(path) -> str:
    """A committed file as a message names it: relative to the repository when inside it, else as given."""
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(path)


def from_home(text) -> Path:
    """A recorded path: relative ones are under the Hase home."""
    p = Path(text)
    return p if p.is_absolute() else home() / p


def train_models_dir() -> Path:      # phase 5
    return home() / "training" / "models"


def train_results_dir() -> Path:     # phase 5 reports (committed)
    return home() / "training" / "results"


def dag_dir() -> Path:               # phase 6
    return home() / "graph_model" / "model_DAG"


def inference_results_dir() -> Path:  # phase 7
    return home() / "inference" / "results"


def evaluation_dir() -> Path:
    return home() / "evaluation"


def logs_dir() -> Path:
    return home() / "logs"


# phase configs live beside their scripts, always in the repository
def phase_config(phase_dir: str) -> Path:
    return REPO / phase_dir / "config.yaml"


def slug(text: str) -> str:
    """'NVIDIA H200' -> 'nvidia-h200'; used for per-GPU / per-device folders."""
    s = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return s or "unknown"


def gpu_of(path) -> str:
    """The GPU a per-GPU folder belongs to (.../<gpu>/..., e.g. benchmark/results/nvidia-h100/corpus/machine_a or
    inference/results/nvidia-h200/corpus/node_model): its first 'nvidia-' part; ''."""
    return next((p for p in Path(str(path or "")).parts if p.startswith("nvidia-")), "")


def model_file(model: str, batch: int, h: int, w: int) -> str:
    return f"{model}_bs{batch}_{h}x{w}.onnx"


def model_arch(stem: str) -> str:
    """The architecture of a model_file stem: 'resnet18_bs16_224x224' -> 'resnet18'."""
    return stem.split("_bs")[0]


def optimized_file(model_path: Path, ep_tag: str) -> Path:
    """ORT-optimized graph written beside the model, one per EP: x.onnx -> x.opt.cuda.onnx."""
    return model_path.with_name(f"{model_path.stem}.opt.{ep_tag}.onnx")


def atomic_write_text(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


COMPRESSED = (".gz", ".xz")   # how large measured tables are committed (pandas reads both as they are)


def csv_or_gz(path: Path) -> Path:
    """The table at `path`, or, when only that exists, its twin with another compression (name.csv,
    name.csv.gz, name.csv.xz: large measured data is committed compressed)."""
    path = Path(path)
    if path.exists():
        return path
    base = path.name
    for ext in COMPRESSED:
        base = base.removesuffix(ext)
    for cand in (base, *(base + ext for ext in COMPRESSED)):
        if (path.parent / cand).exists():
            return path.parent / cand
    return path


def model_list(path) -> list:
    """The model paths of a `model_list` file (one a line, measured in that order); missing -> one-line HaseError."""
    lp = Path(path)
    if not lp.exists():
        raise HaseError("model_list file not found", lp)
    return lp.read_text().split()


def config_models(cfg: dict) -> list:
    """A measuring tool's models: config `models` then the lines of `model_list`; none, or a file that is not there,
    is a one-line HaseError naming the field or the file."""
    models = list(cfg["models"]) + (model_list(cfg["model_list"]) if cfg.get("model_list") else [])
    if not models:
        raise HaseError("config models: no model given")
    missing = [m for m in models if not Path(m).exists()]
    if missing:
        raise HaseError("model file not found", missing[0])
    return models


def expand_globs(patterns) -> list:
    """Files matching each pattern, in order; a pattern that matches nothing is an error."""
    out = []
    for pat in patterns:
        hits = sorted(Path(h) for h in glob.glob(str(pat)))
        if not hits:
            raise HaseError("file not found", pat)
        out.extend(hits)
    return out


def kernel_records(patterns, device: str) -> list:
    """Phase 2 record files: the given patterns, else every record of `device` ('auto': cpu and cuda)."""
    if patterns:
        return expand_globs(patterns)
    d = kernel_record_dir()
    devices = ["cpu", "cuda"] if device == "auto" else [device]
    hits = sorted(p for dev in devices for p in d.glob(f"*.{dev}.json")) if d.is_dir() else []
    if not hits:
        raise HaseError(f"no kernel records for {device} (run phase 2 first)", d)
    return hits


READ_ERRORS = (OSError, EOFError, lzma.LZMAError, UnicodeDecodeError)


def read_text(path) -> str:
    """A file's text, gunzipped (.gz) or unxz'd (.xz) by its name; READ_ERRORS when it cannot be read."""
    if str(path).endswith(".gz"):  # committed GPU records are gzipped to keep the tree small
        with gzip.open(path, "rt") as f:
            return f.read()
    if str(path).endswith(".xz"):  # ... or all of a device's records in one xz JSON
        return lzma.decompress(Path(path).read_bytes()).decode()
    return Path(path).read_text()


def read_json(path, what: str):
    """Parsed JSON of a file; unreadable or invalid -> HaseError 'not a readable <what>'."""
    try:
        return json.loads(read_text(path))
    except (*READ_ERRORS, json.JSONDecodeError, RecursionError) as e:
        raise HaseError(f"not a readable {what} ({type(e).__name__})", path)
