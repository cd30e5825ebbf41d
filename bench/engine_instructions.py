"""The engine's cost per pushed function in user-space instructions (callgrind).

A figure a loaded machine does not change: each configuration is run under
``valgrind --tool=callgrind`` twice, pushing ``small`` and ``large`` functions
(variables made up front for both), and the difference in instructions is
divided by ``large - small``.  The threaded engine's count varies a little with
how its threads interleave.

    .venv/bin/python bench/engine_instructions.py              # 1000 vs 3000 functions
    .venv/bin/python bench/engine_instructions.py --small 200 --large 600   # quicker

Needs ``valgrind`` on the PATH (Debian: ``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def noop(rc: object) -> None:
    """The pushed function (made once, so the driver adds no object a push)."""


def drive(kind: str, shape: str, n: int, made: int) -> None:
    """Push ``n`` no-op functions as a chain or a fan on a fresh engine."""
    sys.path.insert(0, str(ROOT))
    from engine import Context, create_engine
    eng = create_engine(kind, num_cpu_workers=2)
    cpu = Context.cpu()
    vs = [eng.new_variable() for _ in range(made + 1)]
    eng.push_sync(noop, cpu, [], [vs[0]])
    eng.wait_for_all()
    for i in range(n):
        src = vs[i] if shape == "chain" else vs[0]
        eng.push_sync(noop, cpu, [src], [vs[i + 1]])
    eng.wait_for_all()
    eng.shutdown()


def instructions(kind: str, shape: str, n: int, made: int) -> int:
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable,
         __file__, "--drive", kind, shape, str(n), str(made)],
        capture_output=True, text=True, check=True).stderr
    found = re.search(r"Collected : (\d+)", out)
    if found is None:
        raise SystemExit(f"callgrind printed no instruction count:\n{out[-2000:]}")
    return int(found.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--large", type=int, default=3000)
    ap.add_argument("--drive", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.drive:
        kind, shape, n, made = args.drive
        drive(kind, shape, int(n), int(made))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    print(f"instructions per pushed function ({args.large} minus {args.small} functions):")
    for kind in ("naive", "threaded"):
        for shape in ("chain", "fan"):
            diff = (instructions(kind, shape, args.large, args.large)
                    - instructions(kind, shape, args.small, args.large))
            print(f"  {kind:8} {shape:5} {diff / (args.large - args.small):10,.0f}")


if __name__ == "__main__":
    main()
