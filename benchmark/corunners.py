"""Phase 4: realistic neighbours for the collector, each a separate process with one knob 0-1.

  python benchmark/corunners.py --name small_infer --knob 0.5 [--device cuda|cpu] [--duration 60]
  with start_corunner("cnn_train", 0.5, "cuda"): ...        # from Python (the collector)

The stressor's duty cycle is synthetic; these are what really shares a GPU in serving:

  cnn_train       ResNet-ish training loop (fwd+bwd+SGD); knob -> batch size (1..128; CPU 1..8)
  small_infer     batch-1 inference of a small CNN with sleeps; knob -> busy fraction
  memcopy_gaps    memory-bound copies with 2 ms gaps; knob -> buffer size (..512 MiB; CPU ..32 MiB)
  tc_gemm_bursts  bf16 GEMM bursts (tensor cores) in 100 ms periods; knob -> burst fraction
  slices_<kind>_<len>  kernels of one length (10us, 100us, 1ms, 10ms), compute-bound (fp32 matmul) or
                  memory-bound (device copy), in bursts; knob -> busy fraction. At equal busy fraction
                  they differ only in how long each of their kernels holds the GPU: what a launch onto
                  an idle stream waits for (the interference issue's training neighbours)
  host_spin       no GPU work at all: one process spinning a host core in 1 ms periods; knob -> busy fraction.
                  Does a busy host make dispatch faster (cores kept out of idle states)? On H100 machine m the
                  clean labels of batch-1 models ran 15-35% faster next to light GPU neighbours than at idle

On CPU each runs a CPU equivalent (torch/numpy on CPU, one thread), so tests can start and stop
them. Process machinery (READY handshake, PR_SET_PDEATHSIG, parent watchdog, terminate on exit)
is stressor.LoadProcess. Knob 0 starts no process.
"""
import argparse
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path


from hase.benchmark.stressor import ManagedLoad, check_intensity, duty_cycle, guard_child, idle, signal_ready  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402


@dataclass(frozen=True)
class Corunner:
    description: str
    knob: str


CORUNNERS = {
    "cnn_train": Corunner("ResNet-ish training loop", "batch size = knob * 128 (CPU: * 8), at least 1"),
    "small_infer": Corunner("batch-1 small-CNN inference with sleeps", "busy fraction of each request cycle"),
    "memcopy_gaps": Corunner("device memory copies with 2 ms gaps", "buffer size = knob * 512 MiB (CPU: 32 MiB)"),
    "tc_gemm_bursts": Corunner("bf16 GEMM bursts", "burst fraction of each 100 ms period"),
    "host_spin": Corunner("a host core spinning, no GPU work", "busy fraction of each 1 ms period"),
}
SLICE_US = {"10us": 10.0, "100us": 100.0, "1ms": 1000.0, "10ms": 10000.0}
SLICE_KINDS = {"compute": "fp32 matmul", "memory": "device-to-device copy"}
for _kind, _what in SLICE_KINDS.items():
    for _len in SLICE_US:
        CORUNNERS[f"slices_{_kind}_{_len}"] = Corunner(f"{_what} kernels of about {_len} each, in bursts",
                                                       "busy fraction")


class CorunnerLoad(ManagedLoad):
    """Context manager around a co-runner child; knob 0 = no process."""

    def __init__(self, name: str, knob: float, device: str, device_id: int = 0, ready_timeout_s: float = 180.0):
        if name not in CORUNNERS:
            raise HaseError(f"unknown co-runner '{name}' (one of: {', '.join(CORUNNERS)})")
        if device not in ("cuda", "cpu"):
            raise HaseError(f"co-runner device must be cuda or cpu, got '{device}'")
        knob = check_intensity(knob, f"co-runner '{name}' knob")
        self.knob, self.device = knob, device
        args = ["--name", name, "--knob", knob, "--device", device, "--device-id", device_id, "--duration", 0]
        super().__init__(f"corunner-{name}", knob, Path(__file__), args, ready_timeout_s)


def start_corunner(name: str, knob: float, device: str, device_id: int = 0) -> CorunnerLoad:
    """`with start_corunner('small_infer', 0.5, 'cuda') as c:` runs it for the block."""
    return CorunnerLoad(name, knob, device, device_id)


# ---- child side: the workloads -----------------------------------------------------------------
def _torch(device: str, device_id: int):
    import torch
    if device == "cuda":
        if not torch.cuda.is_available():
            raise HaseError("co-runner --device cuda: torch sees no CUDA device")
        return torch, torch.device("cuda", device_id)
    torch.set_num_threads(1)
    return torch, torch.device("cpu")


def _sync(torch, dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def small_cnn(torch, width: int):
    """ResNet-ish: stem, two residual blocks, pooled classifier."""
    nn = torch.nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                                      nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    return nn.Sequential(nn.Conv2d(3, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                         Block(width), nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), Block(2 * width),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))


def run_cnn_train(knob, device, device_id, duration_s):
    torch, dev = _torch(device, device_id)
    gpu = dev.type == "cuda"
    batch = max(1, round(knob * (128 if gpu else 8)))
    res = 128 if gpu else 32
    model = small_cnn(torch, 64 if gpu else 16).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, res, res, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    step().item()  # first step: cuDNN autotune, allocations
    signal_ready()
    t_end, i = _deadline(duration_s), 0
    while time.monotonic() < t_end:
        loss = step()
        i += 1
        if i % 10 == 0:
            loss.item()  # a training loop logs now and then: the host syncs like a real one


def run_small_infer(knob, device, device_id, duration_s):
    torch, dev = _torch(device, device_id)
    gpu = dev.type == "cuda"
    model = small_cnn(torch, 32 if gpu else 16).to(dev).eval()
    x = torch.randn(1, 3, 224 if gpu else 64, 224 if gpu else 64, device=dev)
    with torch.inference_mode():
        model(x)
        _sync(torch, dev)
        signal_ready()
        t_end = _deadline(duration_s)
        while time.monotonic() < t_end:
            t0 = time.monotonic()
            model(x)
            _sync(torch, dev)
            busy = time.monotonic() - t0
            time.sleep(busy * (1.0 - knob) / knob)  # idle between requests: busy fraction = knob


def run_memcopy_gaps(knob, device, device_id, duration_s):
    gap_s = 0.002
    if device == "cuda":
        torch, dev = _torch(device, device_id)
        numel = max(1, round(knob * 128)) * 2**20  # float32: knob * 512 MiB
        src, dst = torch.empty(numel, device=dev), torch.empty(numel, device=dev)

        def copy():
            dst.copy_(src)
            _sync(torch, dev)
    else:
        import numpy as np
        src = np.ones(max(1, round(knob * 8)) * 2**20, np.float32)  # knob * 32 MiB
        dst = np.empty_like(src)

        def copy():
            np.copyto(dst, src)
    copy()
    signal_ready()
    t_end = _deadline(duration_s)
    while time.monotonic() < t_end:
        for _ in range(4):
            copy()
        time.sleep(gap_s)


def run_tc_gemm_bursts(knob, device, device_id, duration_s):
    torch, dev = _torch(device, device_id)
    n = 8192 if dev.type == "cuda" else 256
    a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)

    def step():
        torch.mm(a, b)
        _sync(torch, dev)

    step()
    signal_ready()
    duty_cycle(step, knob, 0.1, duration_s)


def slice_kernel(torch, dev, kind: str, target_us: float):
    """(one-kernel callable, its measured time in us): the smallest size whose kernel takes >= target_us
    (doubling; CPU: numpy-sized torch ops, so tests can run it)."""
    def make(size):
        if kind == "compute":
            n = int(size)
            a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
            out = torch.empty(n, n, device=dev)
            return lambda: torch.mm(a, b, out=out)
        src, dst = torch.empty(int(size), device=dev), torch.empty(int(size), device=dev)
        return lambda: dst.copy_(src)

    def time_us(fn, reps=20):
        fn()
        _sync(torch, dev)
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        _sync(torch, dev)
        return (time.perf_counter() - t0) / reps * 1e6
    size = 64 if kind == "compute" else 2**14
    grow = 2 ** (1 / 3) if kind == "compute" else 2.0   # matmul time ~ n^3
    while True:
        fn = make(size)
        t = time_us(fn)
        if t >= target_us or size > (2**15 if kind == "compute" else 2**31):
            return fn, t
        size = size * grow


def run_slices(kind: str, kernel_us: float, knob, device, device_id, duration_s):
    """Bursts of back-to-back kernels of one length, then an idle gap: busy fraction = knob at any
    kernel length (a burst lasts >= 1 ms or 2 kernels)."""
    torch, dev = _torch(device, device_id)
    fn, t_us = slice_kernel(torch, dev, kind, kernel_us if dev.type == "cuda" else kernel_us / 10)
    n = max(2, round(1000.0 / t_us))
    signal_ready()
    t_end = _deadline(duration_s)
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        for _ in range(n):
            fn()
        _sync(torch, dev)
        busy = time.monotonic() - t0
        time.sleep(busy * (1.0 - knob) / knob)


def run_host_spin(knob, device, device_id, duration_s):
    period_s = 0.001
    signal_ready()   # no torch, no device: the GPU sees nothing of this neighbour
    t_end = _deadline(duration_s)
    while time.monotonic() < t_end:
        t0 = time.monotonic()
        while time.monotonic() - t0 < knob * period_s:
            pass
        if knob < 1.0:
            time.sleep((1.0 - knob) * period_s)


WORKLOADS = {"cnn_train": run_cnn_train, "host_spin": run_host_spin, "small_infer": run_small_infer,
             "memcopy_gaps": run_memcopy_gaps, "tc_gemm_bursts": run_tc_gemm_bursts}
WORKLOADS.update({f"slices_{kind}_{name}": functools.partial(run_slices, kind, us)
                  for kind in SLICE_KINDS for name, us in SLICE_US.items()})


def _deadline(duration_s: float) -> float:
    return time.monotonic() + duration_s if duration_s > 0 else float("inf")


def main() -> int:
    p = argparse.ArgumentParser(description="Phase 4: a realistic GPU (or CPU) neighbour process")
    p.add_argument("--name", required=True, choices=sorted(CORUNNERS))
    p.add_argument("--knob", required=True, help="0.0-1.0 (meaning depends on --name)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--device-id", type=int, default=0)
    p.add_argument("--duration", type=float, default=60.0, help="seconds; 0 = until stopped")
    p.add_argument("--parent-pid", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    knob = check_intensity(args.knob, "knob")
    if args.parent_pid is not None:
        guard_child(args.parent_pid)
    if knob == 0:
        idle(args.duration)
        return 0
    WORKLOADS[args.name](knob, args.device, args.device_id, args.duration)
    return 0


if __name__ == "__main__":
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    run_main(main)
