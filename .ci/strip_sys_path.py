#!/usr/bin/env python3
"""Remove the `sys.path.insert(0, <repo root>)` lines from every Python file (the project is a package now:
`pip install -e .`, or `python -m pkg.module` from the repository root). Idempotent; run it again after merging a
branch that still has them:  python3 .ci/strip_sys_path.py
Also drops an `import sys` left unused. Lines that insert something else are left alone and listed."""
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT_INSERT = re.compile(r"^[ \t]*sys\.path\.insert\(0, (str\(Path\(__file__\)\.resolve\(\)\.(parent\.parent|parents\[1\]|parent)\)"
                         r"|str\(REPO\)|\{str\(REPO\)!r\})\)[ \t]*\n", re.M)


def strip(text: str) -> str:
    new = ROOT_INSERT.sub("", text)
    if new != text and re.search(r"^import sys\n", new, re.M):
        body = re.sub(r"^import sys\n", "", new, count=1, flags=re.M)
        if not re.search(r"\bsys\.", body):
            new = body
    return new


def main() -> int:
    files = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    changed = 0
    for f in files:
        p = REPO / f
        if p.resolve() == Path(__file__).resolve() or not p.exists():
            continue
        t = p.read_text()
        n = strip(t)
        if n != t:
            p.write_text(n)
            changed += 1
        for line in n.splitlines():
            if "sys.path" in line and "insert" in line:
                print(f"left: {f}: {line.strip()}")
    print(f"{changed} files changed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
