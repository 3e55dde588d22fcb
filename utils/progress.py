"""Progress of a phase's loop, one helper for every phase:

  for x in progress(items, desc="build", unit="record"): ...
  with progress(total=n, desc="collect", unit="item") as bar: bar.update(1); bar.set_postfix_str("load")

On a terminal it is tqdm. Into a log (stderr not a TTY: the main job, CI) tqdm would write every
refresh, so instead one line every EVERY_PCT percent or EVERY_S seconds, whichever comes first,
and one at the end.
"""
import sys
import time

EVERY_PCT = 10      # a line each time the loop passes another 10%
EVERY_S = 30.0      # and at least one every 30 s (long items, or a loop of unknown length)


def is_tty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def progress(iterable=None, *, total=None, desc: str = "", unit: str = "it", stream=None,
             every_pct: float = EVERY_PCT, every_s: float = EVERY_S, clock=time.monotonic):
    """tqdm on a TTY, else LogProgress (same calls: iteration, update, set_postfix_str, close, with)."""
    stream = stream if stream is not None else sys.stderr
    if is_tty(stream):
        from tqdm import tqdm
        return tqdm(iterable, total=total, desc=desc, unit=unit, file=stream)
    return LogProgress(iterable, total, desc, unit, stream, every_pct, every_s, clock)


class LogProgress:
    """Log-friendly progress: a line per `every_pct` percent or `every_s` seconds, and a last one."""

    def __init__(self, iterable=None, total=None, desc="", unit="it", stream=None, every_pct=EVERY_PCT,
                 every_s=EVERY_S, clock=time.monotonic):
        self.iterable, self.desc, self.unit = iterable, desc, unit
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.every_pct, self.every_s, self.clock = float(every_pct), float(every_s), clock
        self.n, self.postfix = 0, ""
        self.t0 = self.t_last = clock()
        self.n_last = 0           # n at the last line written
        self.closed = False

    def line(self) -> str:
        el = self.clock() - self.t0
        if self.total:
            pct = 100.0 * self.n / self.total
            eta = f", eta {el / self.n * (self.total - self.n):.0f} s" if 0 < self.n < self.total else ""
            head = f"{self.n}/{self.total} {self.unit} ({pct:.0f}%) in {el:.0f} s{eta}"
        else:
            head = f"{self.n} {self.unit} in {el:.0f} s"
        return f"{self.desc}: {head}" + (f" [{self.postfix}]" if self.postfix else "")

    def _emit(self) -> None:
        print(self.line(), file=self.stream, flush=True)
        self.t_last, self.n_last = self.clock(), self.n

    def update(self, n: int = 1) -> None:
        self.n += n
        step = self.total * self.every_pct / 100.0 if self.total else None
        crossed = step and int(self.n / step) > int(self.n_last / step)
        if crossed or self.clock() - self.t_last >= self.every_s:
            self._emit()

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        self.postfix = str(s)

    def close(self) -> None:
        if not self.closed and self.n != self.n_last:
            self._emit()
        self.closed = True

    def __iter__(self):
        for x in self.iterable:
            yield x
            self.update(1)
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
