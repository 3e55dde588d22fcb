"""torch.profiler demo: four controllable bottlenecks in a small CNN training loop (PRD: seed 004).

  python debug/profiler_demo.py --scenario dataloader --pin_memory --amp
  python debug/profiler_demo.py --scenario tiny_ops --pin_memory --amp
  tensorboard --logdir results/traces        # or open the *.pt.trace.json in ui.perfetto.dev

Scenarios:
  dataloader    heavy CPU augment + simulated I/O sleep in Dataset.__getitem__ -> data-feed bound
  sync          forced .item() calls every step -> implicit host/GPU synchronisation
  tiny_ops      a long chain of tiny elementwise ops -> kernel-launch bound
  memory_churn  many temporary tensors of varying size every step -> allocator churn

CUDA only: without a CUDA device it stops with a one-line error (exit 2).
Outputs: traces in --trace_dir (tensorboard_trace_handler, *.pt.trace.json), metrics in --output_json.
"""
import argparse
import json
import math
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset


from hase.utils import paths  # noqa: E402
from hase.utils.errors import HaseError, run_main  # noqa: E402

SCENARIOS = ["dataloader", "sync", "tiny_ops", "memory_churn"]
IMAGE_SIZE = 64            # synthetic 3xHxW images
NUM_CLASSES = 10
TINY_OPS_CHAIN = 200       # elementwise ops per TinyOpsBlock forward (tiny_ops scenario)
SYNC_ITEMS_PER_STEP = 8    # forced .item() calls per step (sync scenario)
CHURN_TENSORS_PER_STEP = 64  # temporary tensors per step (memory_churn scenario)
TOP_OPS = 15


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="torch.profiler bottleneck demo (CUDA only)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--scenario", choices=SCENARIOS, default="dataloader")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--num_workers", type=int, default=2)
    p.add_argument("--pin_memory", action="store_true", help="pinned host memory + non_blocking H2D copies")
    p.add_argument("--amp", action="store_true", help="autocast fp16 + GradScaler")
    p.add_argument("--warmup_steps", type=int, default=10)
    p.add_argument("--profile_steps", type=int, default=8)
    p.add_argument("--trace_dir", default=str(paths.home() / "results" / "traces" / "profiler_demo"))
    p.add_argument("--output_json", default=str(paths.home() / "results" / "metrics_demo.json"),
                   help="metrics JSON; empty string to skip")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--with_stack", action="store_true", help="record Python call stacks (slower)")
    p.add_argument("--prefetch_factor", type=int, default=2, help="batches prefetched per worker (num_workers > 0)")
    return p.parse_args(argv)


def data_pressure(scenario: str):
    """(cpu_work, io_sleep_ms) per sample: heavy only in the dataloader scenario."""
    return (4000, 2) if scenario == "dataloader" else (200, 0)


def steps_needed(args) -> int:
    return args.warmup_steps + 1 + 1 + args.profile_steps


class SlowCPUDataset(Dataset):
    """Synthetic images + labels; cpu_work Python-loop iterations and io_sleep_ms sleep per sample."""

    def __init__(self, n: int, seed: int, cpu_work: int, io_sleep_ms: float):
        self.n, self.seed, self.cpu_work, self.io_sleep_ms = n, seed, cpu_work, io_sleep_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.seed + i)
        img = torch.rand(3, IMAGE_SIZE, IMAGE_SIZE, generator=g)
        acc = 0.0
        for k in range(self.cpu_work):      # CPU augment cost (pure Python, holds the worker)
            acc += math.sin(k * 1e-3)
        if torch.rand(1, generator=g).item() < 0.5:
            img = img.flip(-1)              # a real augment: horizontal flip + brightness jitter
        img = (img * (1.0 + 1e-6 * acc)).clamp_(0, 1)
        if self.io_sleep_ms:
            time.sleep(self.io_sleep_ms / 1000.0)   # simulated storage latency
        return img, int(torch.randint(0, NUM_CLASSES, (1,), generator=g))


class SimpleCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(128, NUM_CLASSES)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))


class TinyOpsBlock(nn.Module):
    """TINY_OPS_CHAIN small elementwise ops on the logits: one kernel launch each, almost no math."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(NUM_CLASSES))

    def forward(self, x):
        for _ in range(TINY_OPS_CHAIN // 4):
            x = x * self.scale
            x = x + 1e-4
            x = torch.relu(x)
            x = x / 1.0001
        return x


def build_loader(args, cpu_work: int, io_sleep_ms: float) -> DataLoader:
    extra = {}
    if args.num_workers > 0:  # persistent_workers and prefetch_factor only mean something with workers
        extra = {"persistent_workers": True, "prefetch_factor": args.prefetch_factor}
    dataset = SlowCPUDataset(steps_needed(args) * args.batch_size, args.seed, cpu_work, io_sleep_ms)
    return DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
                      pin_memory=args.pin_memory, drop_last=True, **extra)


def run_step(scenario, model, tiny, images, labels, amp: bool):
    """Forward + loss, with the scenario's bottleneck injected. Returns the loss tensor."""
    with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
        logits = model(images)
        if scenario == "tiny_ops":
            logits = tiny(logits)
        loss = F.cross_entropy(logits.float(), labels)
    if scenario == "sync":  # each .item() waits for the GPU to drain the queue
        for _ in range(SYNC_ITEMS_PER_STEP):
            _ = logits.float().abs().mean().item()
        _ = loss.item()
    if scenario == "memory_churn":  # temporary tensors of varying size, freed and returned to the driver
        junk = [torch.empty(int(2**18 * (1 + k % 16)), device=images.device).fill_(1.0)
                for k in range(CHURN_TENSORS_PER_STEP)]
        loss = loss + 0.0 * sum(j[0] for j in junk)
        del junk
        torch.cuda.empty_cache()
    return loss


def train_step(args, model, tiny, opt, scaler, batch, device):
    images, labels = batch
    images = images.to(device, non_blocking=args.pin_memory)
    labels = labels.to(device, non_blocking=args.pin_memory)
    opt.zero_grad(set_to_none=True)
    loss = run_step(args.scenario, model, tiny, images, labels, args.amp)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()


def top_cuda_ops(prof, n: int = TOP_OPS) -> list:
    """Ops by self CUDA time (self_device_time_total; 'self_cuda_time_total' is its deprecated name)."""
    rows = sorted(prof.key_averages(), key=lambda e: e.self_device_time_total, reverse=True)
    return [{"name": e.key, "self_cuda_time_us": round(e.self_device_time_total, 3), "calls": e.count,
             "cuda_time_us": round(e.device_time_total, 3)}
            for e in rows[:n] if e.self_device_time_total > 0]


def cuda_device():
    """The CUDA device, or HaseError: this demo only means something on a GPU."""
    with warnings.catch_warnings():  # a CUDA torch on a machine without a driver warns here
        warnings.simplefilter("ignore")
        ok = torch.cuda.is_available()
    if not ok:
        raise HaseError("profiler_demo needs a CUDA device (torch.cuda.is_available() is False); "
                        "it profiles CUDA kernels only")
    return torch.device("cuda")


def main() -> int:
    args = parse_args()
    if args.batch_size < 1 or args.num_workers < 0 or args.warmup_steps < 0 or args.profile_steps < 1:
        raise HaseError("--batch_size >= 1, --num_workers >= 0, --warmup_steps >= 0, --profile_steps >= 1")
    torch.manual_seed(args.seed)
    device = cuda_device()

    cpu_work, io_sleep_ms = data_pressure(args.scenario)
    loader = build_loader(args, cpu_work, io_sleep_ms)
    model, tiny = SimpleCNN().to(device), TinyOpsBlock().to(device)
    opt = torch.optim.AdamW(list(model.parameters()) + list(tiny.parameters()), lr=1e-3)
    scaler = torch.amp.GradScaler("cuda", enabled=args.amp)

    iterator = iter(loader)
    for _ in range(args.warmup_steps):  # cudnn autotune, allocator and worker start-up settle here
        train_step(args, model, tiny, opt, scaler, next(iterator), device)

    trace_dir = Path(args.trace_dir)
    trace_dir.mkdir(parents=True, exist_ok=True)
    if args.output_json:
        Path(args.output_json).parent.mkdir(parents=True, exist_ok=True)

    data_wait_s, step_s = [], []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 profile_memory=True, with_stack=args.with_stack,
                 schedule=schedule(wait=1, warmup=1, active=args.profile_steps, repeat=1),
                 on_trace_ready=tensorboard_trace_handler(str(trace_dir))) as prof:
        torch.cuda.synchronize()
        end_prev = time.time()
        for _ in range(1 + 1 + args.profile_steps):
            batch = next(iterator)
            data_wait_s.append(time.time() - end_prev)
            torch.cuda.synchronize()
            t0 = time.time()
            train_step(args, model, tiny, opt, scaler, batch, device)
            torch.cuda.synchronize()
            t1 = time.time()
            step_s.append(t1 - t0)
            prof.step()
            end_prev = time.time()

    stats = {
        "scenario": args.scenario, "batch_size": args.batch_size, "num_workers": args.num_workers,
        "pin_memory": args.pin_memory, "amp": args.amp,
        "warmup_steps": args.warmup_steps, "profile_steps": args.profile_steps,
        "cpu_work": cpu_work, "io_sleep_ms": io_sleep_ms,
        "avg_step_time_s": sum(step_s) / len(step_s),
        "avg_dataloader_wait_s": sum(data_wait_s) / len(data_wait_s),
        "step_times_s": step_s, "dataloader_wait_s": data_wait_s,
        "trace_dir": str(trace_dir),
        "traces": sorted(str(p) for p in trace_dir.glob("*.pt.trace.json*")),
        "top_cuda_ops": top_cuda_ops(prof),
        "gpu": torch.cuda.get_device_name(device), "torch": torch.__version__,
    }
    print(f"scenario={args.scenario} batch_size={args.batch_size} num_workers={args.num_workers} "
          f"pin_memory={args.pin_memory} amp={args.amp}")
    print(f"avg_step_time_s       = {stats['avg_step_time_s']:.6f}")
    print(f"avg_dataloader_wait_s = {stats['avg_dataloader_wait_s']:.6f}")
    print("top CUDA ops by self CUDA time:")
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=TOP_OPS))
    print(f"traces: {trace_dir}")
    if args.output_json:
        paths.atomic_write_text(Path(args.output_json), json.dumps(stats, indent=2) + "\n")
        print(f"metrics: {args.output_json}")
    return 0


if __name__ == "__main__":
    run_main(main)
