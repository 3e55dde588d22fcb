"""Machine calibration (issue 23): the one place where the target node's host speed enters a prediction.

Host dispatch moves between machines of one kind (the GPU side does not), so the timeline's host-side terms
are scaled by the target's speed relative to the processes its terms were learned in:

  host_scale = (target host_index_us / reference host_index_us) ** elasticity

  reference  the median `calib_host_index_us` of the calibrated training sessions (benchmark/trace_run.py runs
             benchmark/host_calibration.py in its own process before every session); stored in the timeline
             model at fit time as `calibration_ref`
  target     a profile JSON (benchmark/host_calibration.py --set out=...), the node agent's gauges in Prometheus
             (hase_calib_host_index_us and its timestamp: from_prometheus), or a number

The elasticity is learned between machines (machine_elasticity): the slope of each machine's host effect (a model +
machine fit of the clean-label processes' node dispatch) on its median calibration: H200 1.10 over 20 machines
(correlation 0.91), H100 1.06 over 16 (inference/results/nvidia-h200/compare_elasticity/). Over single sessions the
slope is diluted (~0.24). Within one machine a reading from another process says nothing about a given session, but
one taken in the session's own process follows it: between a model's two clean sessions minutes apart, the change of
the in-process reading correlates 0.57-0.74 with the change of its node dispatch (slope 0.76-0.87, H200 machines z,
ab, ac; session 15's back-to-back sessions showed ~0); a machine's median reading calibrates the machine. Where fewer than 3
calibrated machines exist, the session-level slope of the trace sessions is kept; 1 where neither can be fitted.

Scaled: per-node host dispatch (the timeline's `kappa`) and session.run's fixed cost (`c0_us`); and, with the
inference config's calibrate_copies (off: judged on 5 H200 exam machines, exams v16-v20, it never helped: ab
14.2 -> 14.2%, ac 14.8 -> 15.4, ad 12.9 -> 14.4, ae 10.9 -> 11.1, af 10.4 -> 12.5%, where af's probe read 16 GB/s against
the reference's 11.9 and its labels did not run faster), by
copy_scales, session.run's input and output copies by the reference's copy rate over the target's (`run_h2d_16MiB_gbps`,
`run_d2h_16MiB_gbps`: the copy session.run itself makes, read in a process of its own). Why: H100 machine m (exam
v12) copied at 5.2-5.6 GB/s where the other H100s read 10.6-14.2, and its labels ran slower by 0.06-0.08 ms per MB of
input, the most on large-input models that are otherwise GPU-bound (0.099 ms/MB expected from the two rates). GPU
time is not scaled. A missing or stale calibration, or a model without a reference, gives the uncalibrated
prediction and a warning naming the field. The measured effect, per machine, is in
inference/results/<gpu>/exam_v3/machines/ (inference/score_exam.py's by-machine section).
"""
import collections
import math
import time

import numpy as np

from hase.utils.errors import HaseError

SCALE_RANGE = (0.5, 2.0)     # hosts of one GPU kind: within 2x of each other (a wider ratio is a broken reading)
MAX_AGE_S = 7 * 24 * 3600.0  # a profile older than this is not trusted: the host's load or software changed


def reference(sessions) -> dict:
    """The training processes' host speed, from trace_run's calib_* columns; {} when none were calibrated."""
    if "calib_host_index_us" not in sessions:
        return {}
    v = sessions["calib_host_index_us"].dropna()
    v = v[v > 0]
    if v.empty:
        return {}
    ref = float(v.median())
    out = {"host_index_us": ref, "p10_us": float(v.quantile(0.1)), "p90_us": float(v.quantile(0.9)),
           "sessions": int(len(v)), "machines": int(sessions.loc[v.index, "machine"].nunique())
           if "machine" in sessions else 0, "elasticity": 1.0}
    if {"model", "host_sum_us"} <= set(sessions.columns) and len(v) >= 20:
        rh = np.log(sessions["host_sum_us"] / sessions.groupby("model")["host_sum_us"].transform("median"))
        x, y = np.log(v / ref), rh.loc[v.index]
        ok = np.isfinite(y)
        if ok.sum() >= 20 and np.var(x[ok]) > 0:
            slope = float(np.polyfit(x[ok], y[ok], 1)[0])
            out.update(elasticity=float(np.clip(slope, 0.0, 1.0)), elasticity_corr=float(np.corrcoef(x[ok], y[ok])[0, 1]))
    return out


def reading(target) -> tuple:
    """(host_index_us, time_unix or None) of a calibration target: a number of us per node, a dict profile or a
    Calibration; (None, None) for None."""
    if target is None:
        return None, None
    if isinstance(target, (int, float)):
        return float(target), None
    d = target if isinstance(target, dict) else target.to_dict()
    return d.get("host_index_us"), d.get("time_unix")


def host_scale(model: dict, target, now: float = None, max_age_s: float = MAX_AGE_S) -> tuple:
    """(scale, warning or None). target: a Calibration (benchmark/host_calibration), a dict profile, a number of
    us per node, or None."""
    ratio, warn = host_ratio(model, target, now, max_age_s)
    if warn is not None or ratio == 1.0:
        return 1.0, warn
    return float(ratio ** float(model["calibration_ref"].get("elasticity", 1.0))), None


def response_scales(model: dict, target, response: dict, now: float = None, max_age_s: float = MAX_AGE_S) -> tuple:
    """(host scale, {'h2d': s, 'd2h': s}, warning or None) from the end-to-end machine response
    (inference/fit_machine_response.py: {"dispatch": e_d, "copies": e_c}, fitted between the training machines):
    the host terms by ratio ** e_d, session.run's pageable copies (a host memcpy into a staging buffer before each
    DMA chunk) by ratio ** e_c, ratio = the target's host index over the reference. Unscaled where host_scale is."""
    ratio, warn = host_ratio(model, target, now, max_age_s)
    if warn is not None or ratio == 1.0:
        return 1.0, {"h2d": 1.0, "d2h": 1.0}, warn
    c = float(ratio ** float(response["copies"]))
    return float(ratio ** float(response["dispatch"])), {"h2d": c, "d2h": c}, None


def load_response(path) -> tuple:
    """({"dispatch": e_d, "copies": e_c} or None, warning or None) from inference/fit_machine_response.py's
    response.json: None and a warning naming the field where the file or its numbers are missing."""
    from pathlib import Path
    p = Path(path)
    if not p.is_file():
        return None, f"config machine_response: {p} not found"
    import json
    r = json.loads(p.read_text()).get("response") or {}
    if not all(isinstance(r.get(k), (int, float)) for k in ("dispatch", "copies")):
        return None, f"config machine_response: {p} has no response.dispatch/copies"
    return {"dispatch": float(r["dispatch"]), "copies": float(r["copies"])}, None


def host_ratio(model: dict, target, now: float = None, max_age_s: float = MAX_AGE_S) -> tuple:
    """(target host index / the timeline's reference, warning or None); (1.0, warning) where it cannot be read."""
    ref = (model.get("calibration_ref") or {}).get("host_index_us")
    if target is None:
        return 1.0, None
    if not ref:
        return 1.0, "timeline model has no 'calibration_ref' (fitted on uncalibrated sessions): host not scaled"
    us, when = reading(target)
    if not isinstance(us, (int, float)) or not math.isfinite(us) or us <= 0:
        return 1.0, f"calibration field 'host_index_us' is {us!r}, not a positive number: host not scaled"
    if when is not None:
        age = (now if now is not None else time.time()) - float(when)
        if age > max_age_s:
            return 1.0, (f"calibration field 'time_unix' is {age / 3600:.0f} h old (> {max_age_s / 3600:.0f} h): "
                         f"host not scaled")
    s = us / float(ref)
    if not SCALE_RANGE[0] <= s <= SCALE_RANGE[1]:
        return 1.0, (f"calibration field 'host_index_us' {us:.2f} us is {s:.2f}x the reference {ref:.2f} us, outside "
                     f"{SCALE_RANGE}: host not scaled")
    return float(s), None


COPY_KEYS = {"h2d": "run_h2d_16MiB_gbps", "d2h": "run_d2h_16MiB_gbps"}
COPY_NOTE_RANGE = (0.67, 1.5)    # outside it a prediction that does not scale its copies says so (api)
COPY_SCALE_RANGE = (0.33, 3.0)   # pageable copies of one GPU kind read 5-15 GB/s; a wider ratio is a broken reading


def profiles_of(path) -> list:
    """The calibration profiles in one calibration.json: a single profile, or {process key: profile} (a corpus job's
    standalone-start / standalone-end, trace_run's per process)."""
    import json
    from pathlib import Path
    d = json.loads(Path(path).read_text())
    if isinstance(d, dict) and ("host_index_us" in d or "copy_gbps" in d):
        return [d]
    return [v for v in (d.values() if isinstance(d, dict) else d) if isinstance(v, dict)]


def machine_copy_gbps(profiles: list) -> dict:
    """{run_*_16MiB_gbps: the median over a machine's profiles that read it}."""
    out = {}
    for key in COPY_KEYS.values():
        v = [float((p.get("copy_gbps") or {}).get(key)) for p in profiles
             if isinstance((p.get("copy_gbps") or {}).get(key), (int, float)) and (p.get("copy_gbps") or {})[key] > 0]
        if v:
            out[key] = float(np.median(v))
    return out


def copy_reference(machine_dirs) -> dict:
    """The copy rates of a GPU kind's typical machine: per direction, the median over machine folders of each
    machine's median run-copy reading (its calibration.json); {} when no machine read one. Calibration readings
    only, never labels: every machine of the kind that has them counts."""
    from pathlib import Path
    per = {}
    for d in machine_dirs:
        f = Path(d) / "calibration.json"
        if f.exists():
            got = machine_copy_gbps(profiles_of(f))
            if got:
                per[Path(d).name] = got
    out = {}
    for key in COPY_KEYS.values():
        v = [m[key] for m in per.values() if key in m]
        if v:
            out[key] = float(np.median(v))
    if out:
        out.update(machines=len(per), source="median over machines of each machine's run-copy readings")
    return out


def copy_scales(model: dict, target, now: float = None, max_age_s: float = MAX_AGE_S) -> tuple:
    """({'h2d': scale, 'd2h': scale}, warning or None): the factor on session.run's copy time in each direction,
    the reference's rate over the target's. Scale 1 where the target has no run-copy reading (hase calibrate reads
    it; an older profile may not) or the model no reference, with the field named."""
    one = {"h2d": 1.0, "d2h": 1.0}
    if target is None or isinstance(target, (int, float)):
        return one, None
    ref = (model.get("calibration_ref") or {}).get("copy_gbps") or {}
    if not ref:
        return one, "timeline model has no 'calibration_ref.copy_gbps' (no run-copy reference): copies not scaled"
    d = target if isinstance(target, dict) else target.to_dict()
    when = d.get("time_unix")
    if when is not None and (now if now is not None else time.time()) - float(when) > max_age_s:
        return one, None   # host_scale names the stale profile
    cg, out, miss = d.get("copy_gbps") or {}, dict(one), []
    for direction, key in COPY_KEYS.items():
        t, r = cg.get(key), ref.get(key)
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0 and isinstance(r, (int, float))):
            miss.append(key)
            continue
        s = float(r) / float(t)
        if COPY_SCALE_RANGE[0] <= s <= COPY_SCALE_RANGE[1]:
            out[direction] = s
        else:
            miss.append(key)
    if miss:
        return out, (f"calibration field 'copy_gbps.{miss[0]}' missing or outside {COPY_SCALE_RANGE}x the reference "
                     f"(hase calibrate reads it): {'those copies' if len(miss) < 2 else 'copies'} not scaled")
    return out, None


def copy_note(scales: dict, copy_ms: float) -> str:
    """A warning when copies are not scaled (calibrate_copies off) but the target's copy rate is far from its GPU
    kind's (copy_scales outside COPY_NOTE_RANGE): how far, and how long this prediction's copies are; '' otherwise."""
    far = {d: s for d, s in (scales or {}).items() if not COPY_NOTE_RANGE[0] <= s <= COPY_NOTE_RANGE[1]}
    if not far or not copy_ms:
        return ""
    d, s = max(far.items(), key=lambda kv: abs(math.log(kv[1])))
    return (f"calibration copy_gbps: this machine's {d} copies run {s:.2f}x as long as its GPU kind's typical "
            f"machine's; this prediction's copies ({copy_ms:.3f} ms) are not scaled (calibrate_copies: false; judged "
            f"on 5 H200 exam machines: inference/results/nvidia-h200/exam_v20/README.md)")


def calibrated_copies(prep: dict, scales: dict) -> dict:
    """A prepared model (timeline_model.prepared) with session.run's copy terms scaled per direction."""
    if not scales or all(v == 1.0 for v in scales.values()):
        return prep
    p = dict(prep, h2d_us=prep["h2d_us"] * scales.get("h2d", 1.0), d2h_us=prep["d2h_us"] * scales.get("d2h", 1.0))
    if prep.get("h2d_wait"):
        p["h2d_wait"] = dict(prep["h2d_wait"], extra_us=prep["h2d_wait"]["extra_us"] * scales.get("h2d", 1.0))
    return p


def range_note(model: dict, target) -> str:
    """A warning when the target's host index lies outside the p10-p90 of the readings the timeline was fitted at:
    the scaling then extrapolates its elasticity (judged: H100 machine q read 6.5 us against 7.2-12.4 and stayed
    +20% after scaling, inference/results/nvidia-h100/machine_calibration/). None inside the range or unknown."""
    ref = model.get("calibration_ref") or {}
    lo, hi = ref.get("p10_us"), ref.get("p90_us")
    us = reading(target)[0]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (lo, hi, us)) or lo <= us <= hi:
        return None
    return (f"calibration field 'host_index_us' {us:.2f} us is outside the {lo:.2f}-{hi:.2f} us (p10-p90) that the "
            f"timeline's own processes read: the host scaling extrapolates (elasticity "
            f"{float(ref.get('elasticity', 1.0)):.2f}; judged once, on a faster H100: still +20% after scaling)")


def calibrated_params(params: dict, scale: float) -> dict:
    """The timeline parameters with the host-side terms scaled."""
    p = dict(params)
    p["kappa"] = float(p.get("kappa", 1.0)) * scale
    p["c0_us"] = float(p.get("c0_us", 0.0)) * scale
    return p


def machine_effects(cells):
    """Each machine's effect in a (model x machine) table of log times with holes, as model + machine fitted by
    alternating means (the least-squares two-way fit of a connected design), median machine 0."""
    import pandas as pd
    effect = pd.Series(0.0, index=cells.columns)
    for _ in range(200):
        per_model = cells.sub(effect, axis=1).mean(axis=1)
        new = cells.sub(per_model, axis=0).mean()
        new -= new.median()
        done = float((new - effect).abs().max()) < 1e-7
        effect = new
        if done:
            break
    return effect


def machine_elasticity(clean, min_machines: int = 3, min_models: int = 10, max_elasticity: float = 2.0) -> dict:
    """The elasticity between machines: the slope of each machine's host effect on log(its median clean calibration /
    the median machine's). The host effect is the machine term of log(clean_ort_node_sum_us) = model + machine, fitted
    by alternating means over every (machine, model) cell measured: machines measured different model sets (an exam's
    models on one or two machines, the anchors on all), and an offset taken against each model's median over the
    machines that ran it is halved where only two did (session 33: that estimate read 0.56-0.64 on H200 and H100
    where this one reads 1.1-1.2, correlation 0.91-0.95; 0.97 on the 24 anchors every H200 machine ran).
    A target machine is calibrated by its median reading, so this slope is the one a prediction for it needs; the
    session-level slope (reference()) is diluted by the probe's own session-to-session noise.
    {} with fewer than min_machines calibrated machines."""
    need = {"machine", "model", "clean_calib_host_index_us", "clean_ort_node_sum_us"}
    if clean is None or not need <= set(clean.columns):
        return {}
    c = clean[(clean["clean_calib_host_index_us"] > 0) & (clean["clean_ort_node_sum_us"] > 0)]
    idx = c.groupby("machine")["clean_calib_host_index_us"].median()
    host = np.log(c.groupby(["machine", "model"])["clean_ort_node_sum_us"].median().unstack(0))
    host = host[host.notna().sum(axis=1) >= 2]      # a model one machine ran says nothing between machines
    counts = host.notna().sum()
    ok = [m for m in idx.index if m in counts.index and counts[m] >= min_models]
    if len(ok) < min_machines:
        return {}
    host = host[ok]
    effect = machine_effects(host[host.notna().sum(axis=1) >= 2])
    x = np.log(idx[ok] / idx[ok].median())
    if np.var(x) <= 0:
        return {}
    slope = float(np.polyfit(x, effect[ok], 1)[0])
    return {"elasticity": float(np.clip(slope, 0.0, max_elasticity)), "elasticity_corr": float(np.corrcoef(x, effect[ok])[0, 1]),
            "elasticity_machines": len(ok), "elasticity_from": "machine effects (model + machine fit) of clean-label processes"}


def machine_host_index_us(sessions) -> float:
    """A machine's host speed from its calibrated sessions: the median (a single reading is noisy)."""
    v = sessions.get("calib_host_index_us")
    return float(np.nanmedian(v)) if v is not None and np.isfinite(v).any() else math.nan


def from_prometheus(pcfg: dict):
    """The node agent's calibration as a profile-like dict {host_index_us, time_unix}; None when not exported."""
    from hase.inference.load_sources import load_from_prometheus
    copy_fields = {f"HASE_CALIB_{k.upper()}": k for k in COPY_KEYS.values()}
    got = load_from_prometheus(pcfg, [], optional=("HASE_CALIB_HOST_INDEX_US", "HASE_CALIB_AGE_S", *copy_fields))
    if "HASE_CALIB_HOST_INDEX_US" not in got:
        return None
    age = got.get("HASE_CALIB_AGE_S")
    return {"host_index_us": got["HASE_CALIB_HOST_INDEX_US"],
            "time_unix": time.time() - age if age is not None else None,
            "copy_gbps": {k: got[f] for f, k in copy_fields.items() if f in got}}


# ---- CPU EP (issue 23 item 5): a CPU timeline built on other CPUs, used on this one
# On the CPU EP a node's time is its compute on MLAS at the session's thread count, so the timeline's per-class lines
# (a_us + us_per_gflop * GFLOP + us_per_mb * MB, fit_cpu_timeline) move with the target's throughput: the GFLOP
# term by its conv or matmul rate (the class's kind of kernel), the MB term by its memory rate (a 4M-element Add),
# the per-node term, a_us and session.run's fixed cost by its per-node dispatch (the host chains). Each ratio is
# target / training reference, each measured by benchmark/host_calibration.py at its own session's thread count.
# Large kernels are split across threads, small nodes are not: the node-size ladder (work_scale) corrects each node's
# compute by its size. Judged in inference/results/cpu-amd-epyc/transfer/.
CPU_RATES = ("conv_gflops", "matmul_gflops", "add_gbps")
MATMUL_TYPES = ("MatMul", "Gemm", "FusedMatMul", "FusedGemm", "MatMulNBits", "Attention", "MultiHeadAttention",
                "QuickGelu", "BiasGelu")   # the last ones are GEMM-adjacent fusions whose FLOPs a record counts as GEMM work


def _rate_of_key(key: str) -> str:
    """Which throughput a CPU class's FLOP term moves with: conv (direct / NCHWc / im2col) or GEMM."""
    base = key.split("+")[0].split("/")[0]
    return "matmul_gflops" if base in MATMUL_TYPES else "conv_gflops"


def cpu_reference(profiles: list, threads: int) -> dict:
    """The training processes' CPU speed: medians of host_index_us and each compute rate over calibration profiles
    measured at `threads` (others are not the model's); {} when none."""
    ok = [p for p in profiles if p.get("device") == "cpu" and int(p.get("threads") or 0) == int(threads)
          and all(isinstance((p.get("compute") or {}).get(k), (int, float)) for k in CPU_RATES)]
    if not ok:
        return {}
    out = {"host_index_us": float(np.median([p["host_index_us"] for p in ok])), "threads": int(threads),
           "processes": len(ok), "cpus": sorted({(p.get("provenance") or {}).get("cpu", "") for p in ok})}
    out.update({k: float(np.median([p["compute"][k] for p in ok])) for k in CPU_RATES})
    low = [(p["compute"] or {}).get("conv_lowreuse_gflops") for p in ok]
    if all(isinstance(v, (int, float)) and v > 0 for v in low):   # recorded, not used: a per-Conv weight-reuse
        out["conv_lowreuse_gflops"] = float(np.median(low))      # term from it made transfer worse (09e5049)
    lad = [p.get("ladder") for p in ok]
    if all(isinstance(x, dict) and x.get("conv") and x.get("add") for x in lad):   # older profiles have none
        kinds = ("conv", "add") + (("gemm",) if all(x.get("gemm") for x in lad) else ())   # gemm: recorded, not used
        out["ladder"] = {kind: [[float(w), float(np.median([x[kind][i][1] for x in lad]))]
                                for i, (w, _) in enumerate(lad[0][kind])] for kind in kinds}
    return out


def work_scale(ref: dict, target: dict, scales: dict) -> tuple:
    """({'flop': [[GFLOP, m]], 'mb': [[MB, m]]}, note): per node size, the target/reference time ratio of the small
    and mid-size chains over the class ratio of the large kernels. A node at work G then scales by its class's ratio
    times m(G) (log-interpolated; 1 at and above the throughput kernel's work): small nodes are not split across
    threads, so they do not speed up with the thread count as the large kernels do. None when either side has no
    ladder or they were measured at other sizes."""
    from hase.benchmark.host_calibration import COMPUTE_WORK   # where a ladder's multiplier is 1
    a, b = ref.get("ladder") or {}, target.get("ladder") or {}
    out = {}
    for kind, key, top, unit in (("conv", "conv_gflops", COMPUTE_WORK["conv"] / 1e9, 1e3),
                                 ("add", "add_gbps", COMPUTE_WORK["add"] / 1e6, 1.0)):
        pa, pb = a.get(kind) or [], b.get(kind) or []
        if not pa or len(pa) != len(pb) or any(abs(x[0] - y[0]) > 1e-3 * x[0] for x, y in zip(pa, pb)):
            return None, None if not b else "calibration 'ladder' missing in the model's reference: node size not scaled"
        pts = []
        for (w, ta), (_, tb) in zip(pa, pb):
            r = float(tb) / float(ta) if ta and tb else math.nan
            if not (math.isfinite(r) and CPU_SCALE_RANGE[0] <= r <= CPU_SCALE_RANGE[1]):
                return None, f"calibration field 'ladder.{kind}' at {w:g}: ratio {r:.3g} out of range: node size not scaled"
            pts.append([float(w) / unit, r / scales[key]])
        out["flop" if kind == "conv" else "mb"] = pts + [[top, 1.0]]
    return out, None


def cpu_scales(model: dict, target, now: float = None, max_age_s: float = MAX_AGE_S) -> tuple:
    """({'host', 'conv_gflops', 'matmul_gflops', 'add_gbps'}: time multipliers, warning or None) for a CPU timeline
    on the node `target` (a CPU Calibration or its dict). Missing, stale, other-thread-count or out-of-range: all 1
    and a warning naming the field."""
    ones = {"host": 1.0, **{k: 1.0 for k in CPU_RATES}}
    ref = model.get("calibration_ref") or {}
    if target is None:
        return ones, None
    if not all(ref.get(k) for k in ("host_index_us", *CPU_RATES)):
        return ones, "CPU timeline model has no 'calibration_ref' with compute rates (fitted on uncalibrated sessions): not scaled"
    d = target if isinstance(target, dict) else target.to_dict()
    when = d.get("time_unix")
    if when is not None and ((now if now is not None else time.time()) - float(when)) > max_age_s:
        return ones, f"calibration field 'time_unix' is older than {max_age_s / 3600:.0f} h: not scaled"
    note = None
    if int(d.get("threads") or 0) != int(model.get("threads") or 0):
        # each side's throughput is measured at its own thread count, so the ratio carries the thread count too
        # (judged: inference/results/<cpu>/transfer/); the prediction is for a session with the calibration's count
        note = (f"the CPU timeline was measured with {model.get('threads')} intra-op threads; scaled to this "
                f"node's calibration at {d.get('threads')} threads: the prediction is for a session with "
                f"{d.get('threads')} intra-op threads")
    comp = d.get("compute") or {}
    out = {}
    for k, key, inverse in (("host", "host_index_us", False), *((r, r, True) for r in CPU_RATES)):
        v = d.get(key) if k == "host" else comp.get(key)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            return ones, f"calibration field '{key}' is {v!r}, not a positive number: not scaled"
        s = float(ref[key]) / v if inverse else v / float(ref[key])   # a slower target: > 1
        if not CPU_SCALE_RANGE[0] <= s <= CPU_SCALE_RANGE[1]:
            return ones, (f"calibration field '{key}' {v:.3g} is {s:.2f}x the reference's time, outside "
                          f"{CPU_SCALE_RANGE}: not scaled")
        out[k] = s
    ws, wnote = work_scale(ref, d, out)
    if ws:
        out["work_scale"] = ws
    return out, "; ".join(x for x in (note, wnote) if x) or None


CPU_SCALE_RANGE = (0.1, 10.0)   # CPUs differ far more than hosts of one GPU kind (cores, SIMD width, threads)


def calibrated_cpu_model(model: dict, scales: dict) -> dict:
    """A CPU timeline with its lines, per-node term and fixed cost scaled to the target's speed."""
    t = model["gpu_table"]

    def line(c, key=None):
        flop = scales[_rate_of_key(key)] if key else scales["conv_gflops"] ** 0.5 * scales["matmul_gflops"] ** 0.5
        return [c[0] * scales["host"], c[1] * flop, c[2] * scales["add_gbps"]]
    table = dict(t, by_key={k: line(c, k) for k, c in t["by_key"].items()},
                 by_category={k: line(c) for k, c in t.get("by_category", {}).items()}, default=line(t["default"]))
    ht = dict(model["host_table"], default_us=float(model["host_table"]["default_us"]) * scales["host"])
    p = dict(model["params"], c0_us=float(model["params"].get("c0_us", 0.0)) * scales["host"])
    if scales.get("work_scale"):   # per node: its class's ratio times the ladder's multiplier at its work
        table["work_scale"] = scales["work_scale"]
    return dict(model, gpu_table=table, host_table=ht, params=p, cpu_scales=dict(scales))


def cpu_node_ratios(model: dict, scales: dict, record: dict) -> np.ndarray:
    """Per node of `record`: how much longer it runs on the target than where a CPU node-trees timeline was
    measured. The trees price a node's shape at the reference CPU's speed, and do not say how much of that time is
    dispatch, FLOPs or bytes; the lines fitted on the same nodes (`scale_lines`) do: the ratio is the node's own line
    scaled by cpu_scales (host, class FLOP rate with the node-size ladder, bytes) over the line unscaled; the host
    ratio where the line is 0 (Reshape). Judged between CPUs: inference/results/cpu-intel-r-xeon-r-processor/unseen_vm/."""
    from hase.inference.timeline_model import gpu_table_us
    base = dict(model, gpu_table=model["scale_lines"])
    l0 = gpu_table_us(record, base["gpu_table"])
    l1 = gpu_table_us(record, calibrated_cpu_model(base, scales)["gpu_table"])
    return np.where(l0 > 1e-9, l1 / np.maximum(l0, 1e-9), scales["host"])


# ---- this machine, now ------------------------------------------------------------------------
LOCAL_READINGS = 5          # host-chain readings in the predicting process; their median is the host index
LOCAL_BUSY_MAX_PCT = 50.0   # other processes' CPU use (% of all cores) above which a reading is not this host's idle speed
# How long one reading of the host stays true (inference/results/nvidia-h200/calibration_age/, exams v21-v22, H200
# machines ag and ah): the host speed comes in episodes of seconds, so a prediction scaled by the reading taken right
# before the run is 1.6-2.5 points closer than an unscaled one, by a reading 3-4 s old no closer, and by one older
# than ~5 s 1-3 points *further* (batch 1 up to 8 points). A local calibration is therefore reused only for seconds
# on a GPU; the machine's level comes from readings spread over minutes (the node agent's rolling median). On the CPU
# EP the states last 20-60 s (benchmark/results/cpu-amd-epyc/episodes/); its reuse stays inside that.
LOCAL_REUSE_S = {"cuda": 3.0, "cpu": 20.0}
# CPU passes per local calibration at most: one whose compute probe moved by > 25% (host_calibration.probe_moved)
# is taken again; on the 2-vCPU EPYC VM 2 of 5 passes moved (session 46), so 3 passes all moving is rare
LOCAL_CPU_TRIES = 3


def host_busy_pct(window_s: float = 0.5) -> float:
    """Other processes' CPU use over `window_s` while this one sleeps (% of all cores), or NaN without psutil."""
    try:
        import psutil
    except ImportError:
        return float("nan")
    me = psutil.Process()
    psutil.cpu_percent(interval=None)
    me.cpu_percent(interval=None)
    time.sleep(window_s)
    own = me.cpu_percent(interval=None) / (psutil.cpu_count() or 1)
    return max(float(psutil.cpu_percent(interval=None)) - own, 0.0)


def local_calibration(device: str, device_id: int = 0, threads: int = 0, readings: int = LOCAL_READINGS,
                      busy_max_pct: float = None) -> tuple:
    """(profile dict or None, note): this machine's calibration, read now in this process (about 1-2 s): one full
    benchmark/host_calibration.py pass, then `readings` - 1 more passes of the host chains; host_index_us is the
    median of all of them (one reading flips with the process's fast and slow host states). None, with the reason,
    when other processes keep the host CPU busy above busy_max_pct (a reading then is their load, not this host's
    speed: the idle reference of issue 23) or the calibration cannot run here."""
    from hase.benchmark.host_calibration import Calibrator, host_index, probe_moved
    busy_max_pct = LOCAL_BUSY_MAX_PCT if busy_max_pct is None else float(busy_max_pct)
    busy = host_busy_pct()
    if math.isfinite(busy) and busy > busy_max_pct:
        return None, (f"this machine's calibration not used: CPU_UTIL_PCT = {busy:.0f}% of all cores busy with other "
                      f"processes (> {busy_max_pct:g}%): host not scaled")
    try:
        cal = Calibrator(device, device_id, threads)
        for tries in range(1, LOCAL_CPU_TRIES + 1):   # a CPU pass whose compute speed moved is of two states: again
            prof = cal.calibrate(20.0, run_copy_budget_ms=10.0 if device == "cuda" else 0.0, warn=False).to_dict()
            if not probe_moved(prof.get("compute")):
                break
        got = [prof["host_index_us"]] + [host_index(cal.host(20.0)) for _ in range(max(int(readings) - 1, 0))]
    except Exception as ex:  # noqa: BLE001  (ORT raises several types; any of them means "no local reading")
        return None, f"this machine's calibration failed ({str(ex).splitlines()[0][:160]}): host not scaled"
    prof.update(host_index_us=float(np.median(got)), host_index_readings_us=[float(x) for x in got],
                host_busy_pct=None if not math.isfinite(busy) else busy, compute_passes=tries)
    moved = ""
    if probe_moved(prof.get("compute")):
        c = prof["compute"]
        moved = (f"; its compute speed moved in each of {tries} passes (a MatMul read "
                 f"{c['probe_matmul_gflops_before']:.0f}, then {c['probe_matmul_gflops_after']:.0f} GFLOP/s: this "
                 f"machine's intra-op threads share cores at times), the last pass used")
    return prof, (f"this machine's calibration: host index {prof['host_index_us']:.2f} us per node (median of "
                  f"{len(got)} readings, {min(got):.2f}-{max(got):.2f}){moved}")


class HostReadings:
    """The node agent's host level: the median of the last `window` host-index readings, each taken on an idle
    device minutes apart (calib_period_s), so no single episode of the host (seconds, calibration_age/) sets it."""

    def __init__(self, window: int):
        if int(window) < 1:
            raise HaseError(f"calib_window must be >= 1, not {window!r}")
        self.values = collections.deque(maxlen=int(window))

    def add(self, host_index_us: float) -> float:
        """Add one reading (us per node); the rolling median after it."""
        v = float(host_index_us)
        if not (math.isfinite(v) and v > 0):
            raise HaseError(f"host_index_us {host_index_us!r} is not a positive number")
        self.values.append(v)
        return self.median()

    def median(self) -> float:
        return float(np.median(self.values)) if self.values else math.nan

    @property
    def last(self) -> float:
        return self.values[-1] if self.values else math.nan
