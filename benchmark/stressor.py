"""Phase 4.2: background load in a separate process, at a controlled intensity.

  python benchmark/stressor.py --intensity 0.6 --duration 60 [--mode matmul|memcpy] [--device cuda|cpu]

Intensity 0.0-1.0 is a duty cycle: in each period (~20 ms) the stressor is busy for
intensity*period (large matmuls, or device-to-device copies) and sleeps the rest. On CPU the
load is a numpy matmul busy loop (single-threaded BLAS per process), so tests can run it.

From Python (the collector): `with Stressor(0.6, "matmul", "cuda"): ...`. The load runs in a
child process that never outlives its parent: PR_SET_PDEATHSIG (Linux) kills it when the parent
dies, a watchdog thread exits when its parent pid changes, and the context manager terminates
it on exit, exception or Ctrl-C. LoadProcess is the machinery co-runners reuse.
"""
import argparse
import ctypes
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


from hase.utils.errors import HaseError, run_main  # noqa: E402

MODES = ("matmul", "memcpy")
PERIOD_MS = 20.0
READY = "HASE_LOAD_READY"
PR_SET_PDEATHSIG = 1


def check_intensity(x, what: str = "intensity") -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise HaseError(f"{what} must be a number in [0, 1], got {x!r}")
    if not 0.0 <= v <= 1.0:
        raise HaseError(f"{what} must be in [0, 1], got {v:g}")
    return v


# ---- child side: die with the parent -----------------------------------------------------------
def set_pdeathsig(sig=signal.SIGKILL) -> bool:
    """Ask the kernel to send `sig` when our parent dies (Linux only; False elsewhere)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except OSError:
        return False


def _watch_parent(parent_pid: int, poll_s: float) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(0)  # reparented: the parent is gone (PDEATHSIG covers the fast path)
        time.sleep(poll_s)


def guard_child(parent_pid: int, poll_s: float = 0.5) -> None:
    """First thing a load child does: tie its life to parent_pid."""
    set_pdeathsig(signal.SIGKILL)
    if os.getppid() != parent_pid:  # parent died before prctl took effect
        os._exit(0)
    threading.Thread(target=_watch_parent, args=(parent_pid, poll_s), daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))


def signal_ready() -> None:
    print(f"{READY} {os.getpid()}", flush=True)


def idle(duration_s: float) -> None:
    """A load of level 0: report ready, then hold no GPU until the duration ends or it is stopped."""
    signal_ready()
    if duration_s > 0:
        time.sleep(duration_s)
    else:
        signal.pause()


def duty_cycle(step, intensity: float, period_s: float, duration_s: float = 0.0) -> None:
    """Call step() (synchronous) for intensity*period_s of every period; sleep the rest."""
    t_end = time.monotonic() + duration_s if duration_s > 0 else float("inf")
    busy_s = intensity * period_s
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        while time.monotonic() - t0 < busy_s:
            step()
        rest = period_s - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)


# ---- parent side: the process ------------------------------------------------------------------
class LoadProcess:
    """A load child (`python script args --parent-pid PID`) as a context manager.

    Waits for the child's READY line (setup done: allocations, CUDA context) before returning, so
    a settle time starts from real load. A child that fails at start becomes a HaseError with
    the last line of its stderr.
    """

    def __init__(self, name: str, script: Path, args: list, ready_timeout_s: float = 120.0, env=None):
        self.name, self.script, self.args = name, Path(script), [str(a) for a in args]
        self.ready_timeout_s = ready_timeout_s
        self.env = env
        self.proc = None
        self._err = None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self) -> "LoadProcess":
        self._err = tempfile.TemporaryFile(mode="w+")
        cmd = [sys.executable, str(self.script), *self.args, "--parent-pid", str(os.getpid())]
        from hase.utils.paths import child_env
        env = child_env({**os.environ, **(self.env or {})})
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._err, stdin=subprocess.DEVNULL,
                                     env=env, text=True)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                line = self.proc.stdout.readline()
                if line.startswith(READY):
                    return
                if line == "":  # EOF: the child exited
                    break
            elif self.proc.poll() is not None:
                break
        self.proc.poll()
        raise HaseError(f"load '{self.name}' did not start: {self._stderr_tail() or 'no READY within timeout'}")

    def _stderr_tail(self) -> str:
        try:
            self._err.seek(0)
            lines = [ln.strip() for ln in self._err.read().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return lines[-1][:300] if lines else ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 5.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout_s)
        if self.proc.stdout:
            self.proc.stdout.close()
        if self._err:
            self._err.close()
            self._err = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


class ManagedLoad:
    """A named load at a level 0-1 for a `with` block; level 0 starts no process."""

    def __init__(self, name: str, level: float, script: Path, args: list, ready_timeout_s: float = 120.0):
        self.name, self.level = name, level
        self._proc = LoadProcess(name, script, args, ready_timeout_s)

    @property
    def pid(self):
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.alive()

    def __enter__(self):
        if self.level > 0:
            self._proc.start()
        return self

    def __exit__(self, *exc):
        self._proc.stop()
        return False


class Stressor(ManagedLoad):
    """`with Stressor(0.6, 'matmul', 'cuda'):` -> a stressor child for the block; 0 = no process."""

    def __init__(self, intensity: float, mode: str = "matmul", device: str = "cuda", period_ms: float = PERIOD_MS,
                 size: int = 0, device_id: int = 0, ready_timeout_s: float = 120.0):
        intensity = check_intensity(intensity)
        if mode not in MODES:
            raise HaseError(f"unknown stressor mode '{mode}' ({' or '.join(MODES)})")
        if device not in ("cuda", "cpu"):
            raise HaseError(f"stressor device must be cuda or cpu, got '{device}'")
        self.intensity, self.mode, self.device = intensity, mode, device
        args = ["--intensity", intensity, "--duration", 0, "--mode", mode, "--device", device,
                "--period-ms", period_ms, "--size", size, "--device-id", device_id]
        super().__init__(f"stressor-{mode}", intensity, Path(__file__), args, ready_timeout_s)


# ---- the workloads -----------------------------------------------------------------------------
def cuda_step(mode: str, size: int, device_id: int):
    """One synchronous unit of GPU work: an n x n fp32 matmul, or a 256 MiB D2D copy."""
    import torch
    if not torch.cuda.is_available():
        raise HaseError("stressor --device cuda: torch sees no CUDA device")
    dev = torch.device("cuda", device_id)
    if mode == "matmul":
        n = size or 4096
        a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
        c = torch.empty(n, n, device=dev)

        def step():
            torch.mm(a, b, out=c)
            torch.cuda.synchronize(dev)
    else:
        numel = (size or 64) * 2**20  # size in Mi float32 elements: 64 -> 256 MiB
        src, dst = torch.empty(numel, device=dev), torch.empty(numel, device=dev)

        def step():
            dst.copy_(src)
            torch.cuda.synchronize(dev)
    step()  # CUDA context, cuBLAS handle: ready before READY
    return step


def cpu_step(mode: str, size: int):
    """CPU equivalent: a numpy matmul (single-threaded BLAS, set by the parent's env) or a copy."""
    import numpy as np
    if mode == "matmul":
        n = size or 256
        a, b = np.random.rand(n, n).astype(np.float32), np.random.rand(n, n).astype(np.float32)
        c = np.empty((n, n), np.float32)
        return lambda: np.matmul(a, b, out=c)
    src = np.ones((size or 4) * 2**20, np.float32)
    dst = np.empty_like(src)
    return lambda: np.copyto(dst, src)


def main() -> int:
    p = argparse.ArgumentParser(description="Phase 4.2: GPU (or CPU) background load at an intensity 0-1")
    p.add_argument("--intensity", required=True, help="duty cycle 0.0-1.0")
    p.add_argument("--duration", type=float, default=60.0, help="seconds; 0 = until stopped")
    p.add_argument("--mode", choices=MODES, default="matmul")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--period-ms", type=float, default=PERIOD_MS)
    p.add_argument("--size", type=int, default=0, help="matmul n, or copy size in Mi elements (0 = default)")
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    intensity = check_intensity(args.intensity)
    if args.parent_pid is not None:
        guard_child(args.parent_pid)
    if intensity == 0:
        idle(args.duration)
        return 0
    step = cuda_step(args.mode, args.size, args.device_id) if args.device == "cuda" else cpu_step(args.mode, args.size)
    signal_ready()
    duty_cycle(step, intensity, args.period_ms / 1e3, args.duration)
    return 0


if __name__ == "__main__":
    # one BLAS thread per load process: intensity then means one core's duty cycle on CPU
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    run_main(main)
