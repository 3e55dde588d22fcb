"""Phase 4: device metrics over a time window, from one of three sources behind one interface.

  src = make_source(cfg["metrics"], device); src.start()
  src.window(start_ts, end_ts) -> {field: mean over [start, end]}    (time.time() seconds)
  snapshot(src, 0.1)          -> the same over the next 0.1 s      (background sampling)
  src.stop()

NvmlSampler (default on CUDA): a thread reads NVML every ~20 ms and, on GPUs with GPM (Hopper
and later), takes a GPM sample every ~100 ms for the profiling metrics. Columns carry DCGM field
names in DCGM units, so NVML-, DCGM- and Prometheus(dcgm-exporter)-collected data share a schema:
  DCGM_FI_DEV_GPU_UTIL %, DCGM_FI_DEV_MEM_COPY_UTIL %, DCGM_FI_DEV_SM_CLOCK MHz,
  DCGM_FI_DEV_MEM_CLOCK MHz, DCGM_FI_DEV_POWER_USAGE W, DCGM_FI_DEV_FB_USED MiB,
  DCGM_FI_PROF_* ratios 0-1 (GPM percentages / 100); NaN where the GPU has no GPM.
NVML's GPU_UTIL/MEM_COPY_UTIL are themselves averages over the driver's last 1/6-1 s.

PrometheusSource: /api/v1/query_range over [start, end] for each {field: promql}; resolution is
the scrape interval, so windows shorter than it read the last scraped value.

PsutilSampler (CPU targets): CPU_UTIL_PCT (all cores, %), CPU_FREQ_MHZ, MEM_USED_MB (1e6 bytes),
LOAD_AVG_1M. Honest names: these are not GPU metrics.

Each sample is stored as an interval (t0, t1, values); window() averages the samples that
overlap [start, end], weighted by the overlap, so windows shorter than the period still read.
"""
import math
import os
import threading
import time
from collections import deque, namedtuple

import numpy as np

from hase.utils.errors import HaseError

NVML_FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_SM_CLOCK",
               "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_FB_USED")
# DCGM profiling field -> NVML GPM metric id name (percent; stored as ratio)
GPM_OF = {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": "NVML_GPM_METRIC_GRAPHICS_UTIL",
          "DCGM_FI_PROF_SM_ACTIVE": "NVML_GPM_METRIC_SM_UTIL",
          "DCGM_FI_PROF_SM_OCCUPANCY": "NVML_GPM_METRIC_SM_OCCUPANCY",
          "DCGM_FI_PROF_DRAM_ACTIVE": "NVML_GPM_METRIC_DRAM_BW_UTIL",
          "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "NVML_GPM_METRIC_ANY_TENSOR_UTIL"}
DCGM_FIELDS = NVML_FIELDS + tuple(GPM_OF)
PSUTIL_FIELDS = ("CPU_UTIL_PCT", "CPU_FREQ_MHZ", "MEM_USED_MB", "LOAD_AVG_1M")
SELF_CPU = "_SELF_CPU_PCT"   # kept beside each psutil sample (not a field): this process's share of all cores
KEEP_S = 600.0  # samples older than this are dropped (a window is never that long); a source's keep_s overrides it

# What a valid reading of each field is: its unit and range, the one table every reader checks against
# (metrics file, Prometheus, local sampling). NaN means "not measured", never "idle", so it is invalid
# too. lo_open: the bound itself is impossible (a 0 MHz clock is a failed read). One line per field.
Spec = namedtuple("Spec", "unit lo hi lo_open", defaults=(False,))
INF = math.inf
FIELD_SPECS = {
    "DCGM_FI_DEV_GPU_UTIL": Spec("%", 0, 100),
    "DCGM_FI_DEV_MEM_COPY_UTIL": Spec("%", 0, 100),
    "DCGM_FI_DEV_SM_CLOCK": Spec("MHz", 0, INF, lo_open=True),
    "DCGM_FI_DEV_MEM_CLOCK": Spec("MHz", 0, INF, lo_open=True),
    "DCGM_FI_DEV_POWER_USAGE": Spec("W", 0, INF),
    "DCGM_FI_DEV_FB_USED": Spec("MiB", 0, INF),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Spec("ratio", 0, 1),   # DCGM_FI_PROF_*: ratios, not percent
    "DCGM_FI_PROF_SM_ACTIVE": Spec("ratio", 0, 1),
    "DCGM_FI_PROF_SM_OCCUPANCY": Spec("ratio", 0, 1),
    "DCGM_FI_PROF_DRAM_ACTIVE": Spec("ratio", 0, 1),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Spec("ratio", 0, 1),
    "CPU_UTIL_PCT": Spec("%", 0, 100),
    "CPU_FREQ_MHZ": Spec("MHz", 0, INF, lo_open=True),
    "MEM_USED_MB": Spec("MB", 0, INF),
    "LOAD_AVG_1M": Spec("runnable tasks", 0, INF),
    "HASE_LAUNCH_WAIT_US": Spec("us", 0, INF),          # node agent's launch-wait probe
    "HASE_LAUNCH_WAIT_AGE_S": Spec("s", 0, INF),
    "HASE_LAUNCH_WAIT_TIMESTAMP_S": Spec("s since epoch", 0, INF),
}


def describe(spec: Spec) -> str:
    """'ratio in [0, 1]', 'MHz > 0', 'W >= 0'."""
    if spec.hi == INF:
        return f"{spec.unit} {'>' if spec.lo_open else '>='} {spec.lo:g}"
    return f"{spec.unit} in {'(' if spec.lo_open else '['}{spec.lo:g}, {spec.hi:g}]"


def check_value(field: str, value, where=None) -> float:
    """The value as a float if it is a valid reading of `field`; else HaseError naming field, value and range.
    Fields without a spec only have to be finite numbers."""
    spec = FIELD_SPECS.get(field)
    expected = f"expected {describe(spec)}" if spec else "expected a finite number"
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise HaseError(f"field '{field}' = {str(value)[:40]!r} is not a number ({expected})", where)
    if math.isnan(v):  # NaN is a reading that did not happen, not a value outside the range
        raise HaseError(f"field '{field}' is NaN (not measured; {expected})", where)
    low_ok = spec is None or (v > spec.lo if spec.lo_open else v >= spec.lo)
    if not math.isfinite(v) or not low_ok or (spec is not None and v > spec.hi):
        raise HaseError(f"field '{field}' = {v:g} is out of range ({expected})", where)
    return v


def check_values(values: dict, where=None) -> dict:
    """check_value over a {field: value} snapshot."""
    return {f: check_value(f, v, where) for f, v in values.items()}


def check_fields(fields, supported, source: str) -> tuple:
    """The requested fields (all supported ones when empty); an unknown name is a HaseError."""
    fields = tuple(fields) if fields else tuple(supported)
    for f in fields:
        if f not in supported:
            raise HaseError(f"metric '{f}' is not available from source '{source}' "
                            f"(available: {', '.join(supported)})")
    return fields


def overlap_mean(samples, field: str, start: float, end: float) -> float:
    """Mean of `field` over samples (t0, t1, values) overlapping [start, end], overlap-weighted."""
    num = den = 0.0
    for t0, t1, vals in samples:
        v = vals.get(field)
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        if end <= start:  # a point window: the sample that contains it
            w = 1.0 if t0 <= start <= t1 else 0.0
        else:
            w = max(0.0, min(t1, end) - max(t0, start))
        if w > 0:
            num += w * v
            den += w
    return num / den if den > 0 else math.nan


class Source:
    """Interface: fields, start(), stop(), window(start, end) -> {field: value}; context manager."""
    name = "source"
    fields: tuple = ()

    def start(self):
        return self

    def stop(self):
        pass

    def check(self):
        """Raise HaseError now if the source cannot deliver (called before any measurement)."""

    def window(self, start: float, end: float) -> dict:
        raise NotImplementedError

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class Sampler(Source):
    """Background thread calling read() every period; read() returns {group: values} readings."""

    def __init__(self, fields, supported, period_ms: float = 20.0, keep_s: float = KEEP_S):
        self.fields = check_fields(fields, supported, self.name)
        self.period_s = float(period_ms) / 1e3
        self.keep_s = float(keep_s)  # a long-running reader of short windows (the node agent) keeps less
        self.max_wait_s = 5 * self.period_s + 2.0  # window() gives up on a sample after this (a dead source)
        self._samples = deque()     # (t0, t1, values), in the order of t1
        self._last_t = {}           # group -> time of its latest sample
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        self._error = None

    def read(self, now: float) -> dict:
        """{group: (t0, values)}: readings taken now, each valid over [t0, now]."""
        raise NotImplementedError

    def groups(self) -> tuple:
        """Groups read() delivers: window() waits for each, also one that has not reported yet."""
        return ()

    def _loop(self):
        while not self._stop.is_set():
            now = time.time()
            try:
                got = self.read(now)
            except Exception as e:  # a driver error must not kill the thread silently: reported by window()
                self._error = f"{type(e).__name__}: {e}"
                got = {}
            with self._lock:
                for group, (t0, vals) in got.items():
                    self._samples.append((t0, now, vals))
                    self._last_t[group] = now
                cut = now - self.keep_s
                while self._samples and self._samples[0][1] < cut:  # oldest first: drop from the left
                    self._samples.popleft()
            self._stop.wait(self.period_s)

    def start(self):
        if self._thread is None:
            self._stop.clear()
            self.read(time.time())  # primes interval counters (cpu_percent, GPM sample)
            self._thread = threading.Thread(target=self._loop, name=f"hase-{self.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None

    def window(self, start: float, end: float) -> dict:
        if self._thread is None:
            raise HaseError(f"metrics source '{self.name}' is not started")
        # wait (bounded) until every group has a sample ending after the window; a slow group (GPM) that
        # has not reported yet right after start() is waited for, not read as NaN
        deadline = time.time() + self.max_wait_s
        while time.time() < deadline:
            with self._lock:
                want = self.groups() or tuple(self._last_t)
                ready = bool(want) and all(self._last_t.get(g, -math.inf) >= end for g in want)
            if ready:
                break
            time.sleep(self.period_s / 4)
        if self._error and not self._samples:
            raise HaseError(f"metrics source '{self.name}' failed: {self._error}")
        samples = self._overlapping(start, end)
        return {f: overlap_mean(samples, f, start, end) for f in self.fields}

    def _overlapping(self, start: float, end: float) -> list:
        with self._lock:
            return [s for s in self._samples if s[1] >= start and s[0] <= end]


class PsutilSampler(Sampler):
    name = "psutil"

    def __init__(self, fields=(), period_ms: float = 20.0, keep_s: float = KEEP_S):
        import psutil
        self._ps = psutil
        self._me = psutil.Process()
        self._me.cpu_percent(interval=None)
        self._ncpu = psutil.cpu_count() or 1
        self._prev_t = None
        super().__init__(fields, PSUTIL_FIELDS, period_ms, keep_s)

    def read(self, now: float) -> dict:
        ps = self._ps
        util = ps.cpu_percent(interval=None)  # since the previous call: the interval [prev, now]
        own = self._me.cpu_percent(interval=None) / self._ncpu   # this process's share, for background windows
        freq = ps.cpu_freq()
        vals = {"CPU_UTIL_PCT": float(util), SELF_CPU: float(own),
                "CPU_FREQ_MHZ": float(freq.current) if freq else math.nan,
                "MEM_USED_MB": ps.virtual_memory().used / 1e6,
                "LOAD_AVG_1M": os.getloadavg()[0]}
        t0, self._prev_t = (self._prev_t if self._prev_t is not None else now), now
        return {"cpu": (t0, vals)}

    def groups(self) -> tuple:
        return ("cpu",)

    def background(self, w: dict, start: float, end: float) -> dict:
        """A window of the background (snapshot: this process idle): CPU_UTIL_PCT less this process's own share.
        ORT's intra-op threads spin for a while after each session.run (80% of a core, 40% of a 2-core machine),
        and the main job's idle check on an idle machine refused on its own spin."""
        if "CPU_UTIL_PCT" in w:
            own = overlap_mean(self._overlapping(start, end), SELF_CPU, start, end)
            if math.isfinite(own):
                w = dict(w, CPU_UTIL_PCT=min(max(w["CPU_UTIL_PCT"] - own, 0.0), 100.0))
        return w


class NvmlSampler(Sampler):
    name = "nvml"

    def __init__(self, fields=(), period_ms: float = 20.0, gpm_interval_ms: float = 100.0, device_id: int = 0,
                 keep_s: float = KEEP_S):
        try:
            import pynvml
            pynvml.nvmlInit()
            self._h = pynvml.nvmlDeviceGetHandleByIndex(int(device_id))
        except Exception as e:  # ImportError, NVMLError_*: no usable NVML here
            raise HaseError(f"NVML is not available ({type(e).__name__}: {str(e)[:120]}); "
                            f"use --set metrics.source=psutil or prometheus")
        self._nv = pynvml
        self._prev_t = None
        self.gpm_interval_s = float(gpm_interval_ms) / 1e3
        super().__init__(fields, DCGM_FIELDS, period_ms, keep_s)
        self._gpm_fields = [f for f in self.fields if f in GPM_OF]
        self._gpm_ok = bool(self._gpm_fields) and self._gpm_supported()
        self._gpm_prev = None       # (time, sample)
        self._gpm_spare = None
        self.max_wait_s = 5 * max(self.period_s, self.gpm_interval_s) + 2.0

    def groups(self) -> tuple:
        return ("fast", "gpm") if self._gpm_ok else ("fast",)  # never wait for a group that cannot come

    def _gpm_supported(self) -> bool:
        try:
            return bool(self._nv.nvmlGpmQueryDeviceSupport(self._h).isSupportedDevice)
        except Exception:  # old driver / not Hopper: GPM fields read NaN
            return False

    def _nvml(self, fn, *args, scale=1.0) -> float:
        try:
            return float(fn(*args)) * scale
        except Exception:  # one unsupported query (e.g. power on some boards) -> NaN, not a crash
            return math.nan

    def _fast(self) -> dict:
        nv, h = self._nv, self._h
        try:
            u = nv.nvmlDeviceGetUtilizationRates(h)
            gpu, mem = float(u.gpu), float(u.memory)
        except Exception:  # see _nvml
            gpu = mem = math.nan
        return {"DCGM_FI_DEV_GPU_UTIL": gpu, "DCGM_FI_DEV_MEM_COPY_UTIL": mem,
                "DCGM_FI_DEV_SM_CLOCK": self._nvml(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
                "DCGM_FI_DEV_MEM_CLOCK": self._nvml(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
                "DCGM_FI_DEV_POWER_USAGE": self._nvml(nv.nvmlDeviceGetPowerUsage, h, scale=1e-3),
                "DCGM_FI_DEV_FB_USED": self._nvml(lambda: nv.nvmlDeviceGetMemoryInfo(h).used, scale=1 / 2**20)}

    def _gpm_metrics(self, s1, s2) -> dict:
        nv = self._nv
        mg = nv.c_nvmlGpmMetricsGet_t()
        mg.version = nv.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(self._gpm_fields)
        mg.sample1, mg.sample2 = s1, s2
        for i, f in enumerate(self._gpm_fields):
            mg.metrics[i].metricId = getattr(nv, GPM_OF[f])
        nv.nvmlGpmMetricsGet(mg)
        return {f: (mg.metrics[i].value / 100.0 if mg.metrics[i].nvmlReturn == 0 else math.nan)
                for i, f in enumerate(self._gpm_fields)}

    def _gpm(self, now: float):
        """GPM metrics between the previous GPM sample and one taken now; None if not due."""
        if not self._gpm_ok:
            return None
        if self._gpm_prev is not None and now - self._gpm_prev[0] < self.gpm_interval_s:
            return None
        nv = self._nv
        try:
            if self._gpm_prev is None:
                s = nv.nvmlGpmSampleAlloc()
                self._gpm_spare = nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(self._h, s)
                self._gpm_prev = (now, s)
                return None
            t_prev, s_prev = self._gpm_prev
            s_new = self._gpm_spare
            nv.nvmlGpmSampleGet(self._h, s_new)
            vals = self._gpm_metrics(s_prev, s_new)
            self._gpm_prev, self._gpm_spare = (now, s_new), s_prev  # reuse the two buffers
            return t_prev, vals
        except Exception:  # GPM not usable after all (permissions, MIG): NaN from now on
            self._gpm_ok = False
            return None

    def read(self, now: float) -> dict:
        t0, self._prev_t = (self._prev_t if self._prev_t is not None else now), now
        fast = self._fast()
        if not self._gpm_ok:  # GPM fields requested but unsupported: NaN in the fast group
            fast.update({f: math.nan for f in self._gpm_fields})
        out = {"fast": (t0, fast)}
        g = self._gpm(now)
        if g is not None:
            out["gpm"] = g
        return out

    def stop(self):
        super().stop()
        for s in ((self._gpm_prev or (None, None))[1], self._gpm_spare):
            if s is not None:
                try:
                    self._nv.nvmlGpmSampleFree(s)
                except Exception:  # freeing at exit: nothing to do on failure
                    pass
        self._gpm_prev = self._gpm_spare = None


class PrometheusSource(Source):
    """Averages of PromQL queries over [start, end] from a Prometheus server's HTTP API."""
    name = "prometheus"

    def __init__(self, url: str, queries: dict, step_s: float = 1.0, fields=(), timeout_s: float = 5.0,
                 lag_s: float = 0.0):
        import requests
        self._rq = requests
        if not queries:
            raise HaseError("metrics.prometheus.queries is empty: map each metric field to a PromQL query")
        self.url = str(url).rstrip("/")
        self.queries = dict(queries)
        self.fields = check_fields(fields, tuple(self.queries), self.name)
        self.step_s, self.timeout_s, self.lag_s = float(step_s), float(timeout_s), float(lag_s)

    def _get(self, query: str, start: float, end: float) -> dict:
        try:
            r = self._rq.get(f"{self.url}/api/v1/query_range", timeout=self.timeout_s,
                             params={"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                     "step": f"{self.step_s:g}s"})
        except self._rq.RequestException as e:
            raise HaseError(f"Prometheus unreachable at {self.url} ({type(e).__name__})")
        try:
            body = r.json()
        except ValueError:
            raise HaseError(f"Prometheus at {self.url} answered HTTP {r.status_code} without JSON")
        if r.status_code != 200 or body.get("status") != "success":
            raise HaseError(f"Prometheus query '{query}' failed: {body.get('error', r.status_code)}")
        return body

    def query_mean(self, query: str, start: float, end: float) -> float:
        """Mean of every value of every series the query returns over the window."""
        body = self._get(query, start, max(end, start))
        vals = [float(v) for series in body["data"]["result"] for _, v in series.get("values", [])]
        vals = [v for v in vals if not math.isnan(v)]
        if not body["data"]["result"]:
            raise HaseError(f"Prometheus query '{query}' returned no series")
        if not vals:
            raise HaseError(f"Prometheus query '{query}' returned only NaN (not measured)")
        return float(np.mean(vals))

    def check(self):
        now = time.time()
        for f in self.fields:
            self.query_mean(self.queries[f], now - 5 * self.step_s, now)

    def window(self, start: float, end: float) -> dict:
        wait = end + self.lag_s - time.time()
        if wait > 0:  # let the scrape after the window land first
            time.sleep(wait)
        return {f: self.query_mean(self.queries[f], start, end) for f in self.fields}


def snapshot(source: Source, seconds: float) -> dict:
    """Metrics of the next `seconds` (the caller is idle meanwhile): background load level (a source that can tell
    this process's own share apart, the psutil sampler, leaves it out)."""
    t0 = time.time()
    time.sleep(max(0.0, float(seconds)))
    t1 = time.time()
    w = source.window(t0, t1)
    return source.background(w, t0, t1) if hasattr(source, "background") else w


# ---- idle references ------------------------------------------------------------------------------
# The busy field of a metrics window, as a fraction 0-1: the GR engine on a GPU (else GPU util), CPU util on
# CPU EP. Every idle reference (the collector's level 0, the evaluator's timeline fit, calibrate_loads' idle
# row, trace_run's sessions, the node agent's start) requires it at or below a threshold (`idle_busy_max`)
# over a window: a baseline taken next to a busy neighbour made idle predictions 3x the loaded ones.
BUSY_FIELDS = (("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 1.0), ("DCGM_FI_DEV_GPU_UTIL", 0.01), ("CPU_UTIL_PCT", 0.01))


def busy_reading(values: dict, prefix: str = "") -> tuple:
    """(field, value as read, busy fraction 0-1) of the first busy field with a number in `values` (keys
    `prefix` + field); (None, None, None) when there is none."""
    for field, scale in BUSY_FIELDS:
        v = values.get(prefix + field)
        try:
            v = float(v)
        except (TypeError, ValueError):
            continue
        if not math.isnan(v):
            return field, v, v * scale
    return None, None, None


def not_idle(field: str, value: float, busy_max: float, key: str, over: str) -> str:
    """'CPU_UTIL_PCT = 96.8 % over <over> > 10 % (idle_busy_max 0.1)': the field, its value and the threshold."""
    spec = FIELD_SPECS[field]
    scale = dict(BUSY_FIELDS)[field]
    return (f"{field} = {value:.3g} {spec.unit} {over} > {busy_max / scale:.3g} {spec.unit} "
            f"({key} {busy_max:g})")


def wait_idle(source: Source, busy_max: float, window_s: float, wait_s: float, key: str = "idle_busy_max",
              what: str = "idle reference") -> dict:
    """The first metrics window (window_s long, the caller idle meanwhile) whose busy field is <= busy_max,
    taking windows for at most wait_s; then HaseError naming the field, its value and the threshold.
    busy_max >= 1 never refuses (one window, returned); a source without a busy field is not checked."""
    deadline = time.monotonic() + max(float(wait_s), 0.0)
    n = 0
    while True:
        w = snapshot(source, window_s)
        n += 1
        field, value, frac = busy_reading(w)
        if frac is None or frac <= busy_max or busy_max >= 1:
            return w
        if time.monotonic() >= deadline:
            raise HaseError(f"not idle for the {what}: " + not_idle(field, value, busy_max, key,
                            f"in each of {n} windows of {window_s:g} s over {wait_s:.3g} s")
                            + f"; stop the neighbour, or raise {key} to accept a loaded baseline")


# nvml.h clocksEventReasons bits: why the SM clock is below its maximum now
CLOCK_EVENTS = {0x1: "gpu_idle", 0x2: "app_clocks", 0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x10: "sync_boost",
                0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake", 0x100: "display_clock"}


def clock_event_names(mask: int) -> str:
    """The clock-event bitmask as names joined by '+' ('' for none; unknown bits as hex)."""
    mask, names = int(mask), []
    for bit, name in CLOCK_EVENTS.items():
        if mask & bit:
            names.append(name)
            mask &= ~bit
    return "+".join(names + ([hex(mask)] if mask else []))


class GpuState:
    """The GPU's SM clock, power, power limit, temperature and clock-event reasons, read once when asked (no thread):
    clean_labels reads it right after each model's timed loop, while the clock is still the loop's. H100 machine m
    (exam v12) ran large-batch anchors 1.15-1.37x slower than two other H100s (its copy rate, it turned out: its
    job's calibration.json) with nothing in the labels to say whether the GPU too was slower; a lower clock or a
    power/thermal event now shows in the row. No NVML (CPU EP, no driver): read() is {}."""

    def __init__(self, device_id: int = 0):
        self._nv = self._h = None
        try:
            import pynvml
            pynvml.nvmlInit()
            self._h, self._nv = pynvml.nvmlDeviceGetHandleByIndex(int(device_id)), pynvml
        except Exception:  # ImportError, NVMLError_*: nothing to read here
            pass

    def _get(self, fn, *args, scale=1.0):
        try:
            return float(fn(self._h, *args)) * scale
        except Exception:  # one unsupported query -> NaN, never a failed label
            return math.nan

    def read(self) -> dict:
        if self._h is None:
            return {}
        nv = self._nv
        reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = self._get(reasons) if reasons else math.nan
        return {"sm_clock_mhz": self._get(nv.nvmlDeviceGetClockInfo, nv.NVML_CLOCK_SM),
                "power_w": self._get(nv.nvmlDeviceGetPowerUsage, scale=1e-3),
                "power_limit_w": self._get(nv.nvmlDeviceGetEnforcedPowerLimit, scale=1e-3),
                "temp_c": self._get(nv.nvmlDeviceGetTemperature, nv.NVML_TEMPERATURE_GPU),
                "clock_events": "" if math.isnan(mask) else clock_event_names(int(mask))}


class IdleGuard:
    """The idle check of a measurement job (trace_run's and clean_labels' sessions are the timeline fits' idle
    reference): before a model, at most every `every_s`, a `window_s` window of the busy field with this process
    idle (GR engine on a GPU, system CPU util on the CPU EP, so the reading is the neighbours' load), through
    wait_idle (waits up to `wait_s`, then one line naming the field, its value and the threshold). `columns()` is
    the last reading as session-row columns: the fits drop sessions whose bg_busy_frac is above their own
    idle_busy_max. busy_max >= 1 records but never refuses; a machine without a metrics source records nothing."""

    def __init__(self, device: str, device_id: int, busy_max: float, window_s: float = 0.5, wait_s: float = 60.0,
                 every_s: float = 60.0, what: str = "measurement"):
        self.device, self.device_id, self.busy_max = device, int(device_id), float(busy_max)
        self.window_s, self.wait_s, self.every_s, self.what = float(window_s), float(wait_s), float(every_s), what
        self._last, self._t = None, None

    def check(self) -> dict:
        now = time.monotonic()
        if self._t is None or now - self._t >= self.every_s:
            try:
                src = make_source({"source": "auto", "sample_ms": 50}, self.device, self.device_id)
            except HaseError:  # no NVML: nothing to read, nothing recorded
                self._last, self._t = {}, now
                return self.columns()
            src.start()
            try:
                w = wait_idle(src, self.busy_max, self.window_s, self.wait_s, "idle_busy_max",
                              f"{self.what} (its sessions are an idle reference)")
            finally:
                src.stop()
            field, value, frac = busy_reading(w)
            self._last = {"bg_busy_field": field, "bg_busy_value": value, "bg_busy_frac": frac} if field else {}
            self._t = time.monotonic()
        return self.columns()

    def columns(self) -> dict:
        return dict(self._last or {})


def drop_busy_sessions(df, busy_max: float, what: str, log=None, prefix: str = "", nodes=None):
    """Sessions whose recorded background busy fraction (`prefix`bg_busy_frac, IdleGuard) is above busy_max are
    not an idle reference: dropped with a warning (and their rows in `nodes`, matched on the key columns both
    share); all of them -> one-line HaseError naming the field. Sessions measured before the column existed (NaN)
    are kept. Returns df, or (df, nodes) when nodes is given."""
    col = prefix + "bg_busy_frac"
    if col not in df.columns or busy_max >= 1:
        return df if nodes is None else (df, nodes)
    frac = df[col].astype(float)
    bad = frac > float(busy_max)
    if not bad.any():
        return df if nodes is None else (df, nodes)
    worst = df.loc[frac.idxmax()]
    msg = not_idle(str(worst.get(prefix + "bg_busy_field") or "CPU_UTIL_PCT"), float(worst[prefix + "bg_busy_value"]),
                   float(busy_max), "idle_busy_max", f"before {int(bad.sum())} of {len(df)} sessions (worst)")
    if bad.all():
        raise HaseError(f"{what}: no idle session: {msg}; measure again on an idle machine, or raise idle_busy_max")
    if log is not None:
        log.warning("%s: dropped %d sessions measured next to a busy neighbour: %s", what, int(bad.sum()), msg)
    if nodes is None:
        return df[~bad]
    keys = [k for k in ("machine", "model", "cudnn_conv_algo_search", "session") if k in df.columns and k in nodes]
    gone = df.loc[bad, keys].astype(str).apply(tuple, axis=1)
    return df[~bad], nodes[~nodes[keys].astype(str).apply(tuple, axis=1).isin(set(gone))]


def make_source(mcfg: dict, device: str, device_id: int = 0) -> Source:
    """Source from the collector's `metrics` config: source auto = nvml on cuda, psutil on cpu."""
    kind = mcfg.get("source", "auto")
    if kind == "auto":
        kind = "nvml" if device == "cuda" else "psutil"
    fields = mcfg.get("fields") or ()
    keep_s = float(mcfg.get("keep_s", KEEP_S))
    if kind == "nvml":
        return NvmlSampler(fields, mcfg.get("sample_ms", 20), mcfg.get("gpm_interval_ms", 100), device_id, keep_s)
    if kind == "psutil":
        return PsutilSampler(fields, mcfg.get("sample_ms", 20), keep_s)
    if kind == "prometheus":
        pc = mcfg.get("prometheus", {})
        return PrometheusSource(pc.get("url", ""), pc.get("queries", {}), pc.get("step_s", 1.0), fields,
                                pc.get("timeout_s", 5.0), pc.get("lag_s", 0.0))
    raise HaseError(f"unknown metrics source '{kind}' (auto, nvml, psutil or prometheus)")
