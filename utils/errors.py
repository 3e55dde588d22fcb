"""One error type for bad input, and the wrapper that turns it into a one-line message."""
import sys


class HaseError(Exception):
    """Bad input or an impossible request. Message: '<file>: <cause>' where a file is involved."""

    def __init__(self, cause, path=None):
        # one line whatever the source: a --set value or a file name may itself hold a line break
        self.path = str(path).replace("\r", "\\r").replace("\n", "\\n") if path is not None else None
        self.cause = str(cause).strip().splitlines()[0] if str(cause).strip() else "error"
        super().__init__(f"{self.path}: {self.cause}" if self.path else self.cause)


def run_main(main_fn):
    """Run a phase's main(); a HaseError becomes one line on stderr and exit code 2."""
    try:
        rc = main_fn()
    except HaseError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    sys.exit(rc or 0)
