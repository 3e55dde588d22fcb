"""Console + file logging, set up with one call: log = get_logger('phase1')."""
import logging
import sys

from hase.utils import paths

_FMT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def get_logger(name: str, level: str = "INFO", log_file=None) -> logging.Logger:
    """Logger writing to stderr and to logs/<name>.log (or log_file). Idempotent."""
    log = logging.getLogger(f"hase.{name}")
    log.setLevel(getattr(logging, str(level).upper(), logging.INFO))
    if getattr(log, "_hase_ready", False):
        return log
    log.propagate = False
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    log.addHandler(console)
    try:
        path = log_file or (paths.logs_dir() / f"{name}.log")
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = logging.FileHandler(path)
        fh.setFormatter(logging.Formatter(_FMT))
        log.addHandler(fh)
    except OSError as e:  # read-only checkout: console logging still works
        log.warning("file logging disabled: %s", e)
    log._hase_ready = True
    return log
