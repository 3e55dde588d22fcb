"""Measured tables that come one folder per GPU machine (benchmark/results/<gpu>/<dataset>/machine_*):
one reader, so every phase that pools machines checks them the same way; and the one CSV check
(read_csv_checked) every reader of a user-given CSV uses."""
from pathlib import Path

import pandas as pd

from hase.utils import paths
from hase.utils.errors import HaseError


def read_csv_checked(path, required=(), what: str = "CSV", prefix: str = "", **kw) -> pd.DataFrame:
    """The one CSV check of Hase's readers: a file that is missing, unreadable or lacks a required column is a
    one-line HaseError naming the file (`prefix` names the config field it came from)."""
    path = Path(path)
    if not path.exists():
        raise HaseError(f"{prefix}file not found", path)
    try:
        df = pd.read_csv(path, **kw)
    except (OSError, EOFError, ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise HaseError(f"{prefix}not a readable {what} ({type(e).__name__})", path)
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise HaseError(f"{prefix}missing column '{missing[0]}'", path)
    return df


def read_machine_csv(folder, name: str, required, what: str = "table") -> pd.DataFrame:
    """<folder>/<name> (CSV, gzipped or not) with a `machine` column (the folder's name). A missing,
    unreadable or empty file, or a missing required column -> one-line HaseError naming the file."""
    folder = Path(folder)
    path = paths.csv_or_gz(folder / name)
    if not path.exists():
        raise HaseError(f"{name} missing (not a machine folder of {what}s)", folder)
    df = read_csv_checked(path, required, f"{what} table", keep_default_na=False, na_values=[""])
    if df.empty:
        raise HaseError(f"no {what}s", path)
    return df.assign(machine=folder.name)


def read_machines(folders, name: str, required, what: str = "table") -> pd.DataFrame:
    """The same table of every machine folder, concatenated; no folder -> HaseError."""
    folders = [Path(f) for f in folders]
    if not folders:
        raise HaseError(f"no machine folders with {name}")
    return pd.concat([read_machine_csv(f, name, required, what) for f in folders], ignore_index=True)
