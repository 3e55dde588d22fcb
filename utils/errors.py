"""One error type for bad input, and the wrapper that turns it into a one-line message."""
import sys
from pathlib import Path


class HaseError(Exception):
    """Bad input or an impossible request. Message: '<file>: <cause>' where a file is involved."""

    def __init__(self, cause, path=None):
        # one line whatever the source: a --set value or a file name may itself hold a line break
        self.path = str(path).replace("\r", "\\r").replace("\n", "\\n") if path is not None else None
        self.cause = str(cause).strip().splitlines()[0] if str(cause).strip() else "error"
        super().__init__(f"{self.path}: {self.cause}" if self.path else self.cause)

    def worded(self, style: str) -> "HaseError":
        """This error in the words of an entry point: 'cli' (hase, the phase scripts), 'api' (hase.load_predictor's
        Predictor) or 'service' (hase serve's upload). The same error here; one that tells the user what to pass
        (onnx_io.UnpinnedDims) says it as that entry point takes it."""
        return self


def log_failed(log, path, err: "HaseError", failed: list) -> None:
    """A batch goes on past an item that failed (one bad model must not cost the records of those after it): one
    line naming the file and the cause; the file's name joins `failed` for batch_failed."""
    log.error("%s", err if err.path else f"{path}: {err}")
    failed.append(Path(str(path)).name)


def batch_failed(failed: list, total: int, what: str = "models") -> None:
    """End of a batch that went on past failures: a HaseError saying how many of how many failed, and which
    (run_main makes it the last line and exit code 2)."""
    if failed:
        raise HaseError(f"{len(failed)} of {total} {what} failed: {', '.join(failed)}")


def run_main(main_fn):
    """Run a phase's main(); a HaseError becomes one line on stderr and exit code 2."""
    try:
        rc = main_fn()
    except HaseError as e:
        print(f"error: {e.worded('cli')}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc or 0)
