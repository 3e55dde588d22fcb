"""Measured tables that come one folder per GPU machine (benchmark/results/<gpu>/<dataset>/machine_*):
one reader, so every phase that pools machines checks them the same way."""
from pathlib import Path

import pandas as pd

from utils import paths
from utils.errors import HaseError


def read_machine_csv(folder, name: str, required, what: str = "table") -> pd.DataFrame:
    """<folder>/<name> (CSV, gzipped or not) with a `machine` column (the folder's name). A missing,
    unreadable or empty file, or a missing required column -> one-line HaseError naming the file."""
    folder = Path(folder)
    path = paths.csv_or_gz(folder / name)
    if not path.exists():
        raise HaseError(f"{name} missing (not a machine folder of {what}s)", folder)
    try:
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    except (OSError, EOFError, ValueError, pd.errors.ParserError) as e:
        raise HaseError(f"not a readable {what} table ({type(e).__name__})", path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise HaseError(f"missing column '{missing[0]}'", path)
    if df.empty:
        raise HaseError(f"no {what}s", path)
    return df.assign(machine=folder.name)


def read_machines(folders, name: str, required, what: str = "table") -> pd.DataFrame:
    """The same table of every machine folder, concatenated; no folder -> HaseError."""
    folders = [Path(f) for f in folders]
    if not folders:
        raise HaseError(f"no machine folders with {name}")
    return pd.concat([read_machine_csv(f, name, required, what) for f in folders], ignore_index=True)
