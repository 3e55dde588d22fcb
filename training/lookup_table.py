"""Lookup-table kernel predictor (seed 003's per-(size, processor, stage) tables, in Hase's terms).

Built by training/train_kernel_model.py from the same phase 4 CSV (lookup_table.json beside the models).

Keyed by (kernel type, shape signature = Kernel_ID, load): one row per phase 4 measurement. A query
  - for a measured kernel interpolates linearly over the load metric (the background neighbour's
    busy fraction, bg DCGM_FI_PROF_GR_ENGINE_ACTIVE on CUDA, bg CPU_UTIL_PCT/100 on CPU) between the
    loads it was measured at: `exact` at a measured load, `load-interp` between, and
    `load-extrapolated` (clamped to the nearest measured load) outside them;
  - for an unmeasured kernel of a measured type interpolates log-log over its FLOPs+bytes size
    between the two measured kernels of that type that bracket it (`shape-interp`), each taken at
    the query load; outside the measured sizes it scales the nearest one (`shape-extrapolated`);
  - for an unmeasured type returns NaN (`missing`).
A point more than 3x slower than all of the same kernel's points under more load is dropped as a
bad run (sane_points). It is the fast path for exactly measured kernels and a baseline beside the regressors: phase 5
prints its test-split accuracy and saves it as lookup_table.json beside the models.
"""
import bisect
import json
import math
from pathlib import Path


import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from hase.kernel_model.kernel_builder import kernel_id  # noqa: E402
from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError  # noqa: E402

FORMAT = "hase.lookup_table/1"
OUTLIER_FACTOR = 3.0
GPU_BUSY, CPU_BUSY = "bg_DCGM_FI_PROF_GR_ENGINE_ACTIVE", "bg_CPU_UTIL_PCT"


def busy_column(df: pd.DataFrame) -> str:
    for c in (GPU_BUSY, CPU_BUSY):
        if c in df.columns and df[c].notna().any():
            return c
    raise HaseError(f"no load column ({GPU_BUSY} or {CPU_BUSY}) in the kernel data")


def busy_value(load: dict, column: str) -> float:
    v = load.get(column, load.get(column[3:], 0.0))
    v = float(v) if v is not None and not (isinstance(v, float) and math.isnan(v)) else 0.0
    return v / 100.0 if column == CPU_BUSY else v


def kernel_size(flops, bytes_read, bytes_written) -> float:
    return max(float(flops or 0) + float(bytes_read or 0) + float(bytes_written or 0), 1.0)


def build(df: pd.DataFrame, target: str) -> dict:
    """Table from phase 4 rows (status ok). Points per kernel are (busy, median latency ms)."""
    col = busy_column(df)
    df = df[df[target].notna() & df[col].notna()]
    kernels = {}
    for kid, g in df.groupby("Kernel_ID"):
        g = g.assign(busy=g[col] / (100.0 if col == CPU_BUSY else 1.0)).sort_values("busy")
        r = g.iloc[0]
        busy, ms = sane_points(g["busy"].tolist(), g[target].tolist())
        kernels[kid] = {"type": str(r["OpType"]), "size": kernel_size(r["flops"], r["bytes_read"], r["bytes_written"]),
                        "busy": busy, "ms": ms}
    return {"format": FORMAT, "target": target, "load_column": col, "kernels": kernels}


def sane_points(busy: list, ms: list, factor: float = OUTLIER_FACTOR) -> tuple:
    """Drop a point more than `factor` x slower than every measurement of the same kernel under MORE
    load: a neighbour cannot make a kernel faster, so such a point is a bad run (e.g. a slow cuDNN
    algorithm picked by that session's search), not physics."""
    keep = [i for i in range(len(ms)) if not (ms[i + 1:] and ms[i] > factor * max(ms[i + 1:]))]
    return [float(busy[i]) for i in keep], [float(ms[i]) for i in keep]


class LookupTable:
    def __init__(self, table: dict, source=None):
        if not isinstance(table, dict) or table.get("format") != FORMAT:
            raise HaseError(f"not a lookup table (format {FORMAT})", source)
        self.t = table
        self.col = table["load_column"]
        self.by_type = {}
        for kid, e in table["kernels"].items():
            self.by_type.setdefault(e["type"], []).append((e["size"], kid))
        for v in self.by_type.values():
            v.sort()

    @classmethod
    def load(cls, path: Path) -> "LookupTable":
        return cls(paths.read_json(path, "lookup table"), path)

    def measured(self, kernel_id: str, load: dict):
        """ms of an exactly measured kernel under the load (interpolated over load), else None."""
        if kernel_id not in self.t["kernels"]:
            return None
        return self._at_load(kernel_id, busy_value(load, self.col))[0]

    def _at_load(self, kid: str, busy: float) -> tuple:
        e = self.t["kernels"][kid]
        xs, ys = e["busy"], e["ms"]
        if busy < xs[0] - 1e-3 or busy > xs[-1] + 1e-3:
            return float(np.interp(busy, xs, ys)), "load-extrapolated"
        if any(abs(busy - x) <= 1e-3 for x in xs):
            return float(np.interp(busy, xs, ys)), "exact"
        return float(np.interp(busy, xs, ys)), "load-interp"

    def predict(self, kernel_id: str, kernel_type: str, size: float, load: dict) -> tuple:
        """(ms, how) for one kernel under a load snapshot (bg_ fields)."""
        busy = busy_value(load, self.col)
        if kernel_id in self.t["kernels"]:
            return self._at_load(kernel_id, busy)
        cands = self.by_type.get(kernel_type)
        if not cands:
            return math.nan, "missing"
        sizes = [s for s, _ in cands]
        i = bisect.bisect_left(sizes, size)
        if 0 < i < len(cands):
            (s0, k0), (s1, k1) = cands[i - 1], cands[i]
            y0, y1 = self._at_load(k0, busy)[0], self._at_load(k1, busy)[0]
            w = (math.log(size) - math.log(s0)) / (math.log(s1) - math.log(s0)) if s1 > s0 else 0.0
            return float(math.exp((1 - w) * math.log(y0) + w * math.log(y1))), "shape-interp"
        s, k = cands[0] if i == 0 else cands[-1]
        y = self._at_load(k, busy)[0]
        # beyond the measured sizes: latency scales with work, but never below the nearest point's floor
        return float(y * size / s) if size > s else y, "shape-extrapolated"

    def predict_kernels(self, record_kernels, load: dict) -> dict:
        """{kernel id: (ms, how)} for phase 2 record kernels (Kernel_ID = type_signature)."""
        out = {}
        for k in record_kernels:
            out[k["id"]] = self.predict(kernel_id(k), k["type"], kernel_size(k.get("flops"), k.get("bytes_read"),
                                                                    k.get("bytes_written")), load)
        return out


def save(table: dict, path: Path) -> None:
    paths.atomic_write_text(path, json.dumps(table, separators=(",", ":")) + "\n")


def evaluate(table: dict, test: pd.DataFrame, target: str) -> tuple:
    """(predictions, how) for phase 4 rows of kernels the table may not hold."""
    lt = LookupTable(table)
    preds, hows = [], []
    for _, r in test.iterrows():
        ms, how = lt.predict(r["Kernel_ID"], str(r["OpType"]), kernel_size(r["flops"], r["bytes_read"],
                                                                           r["bytes_written"]), r.to_dict())
        preds.append(ms)
        hows.append(how)
    return np.array(preds), hows
