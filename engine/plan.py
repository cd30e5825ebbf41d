"""How a bound graph is cut into engine functions (``ExecOptions.plan``).

``nodes``: one engine function per node -- every node is its own entry in a
profile's timeline, and bodies of If/Loop/Scan run as nested graphs on the
engine (the control-flow design's nested waits).

``segments`` (the default): nodes are grouped into straight-line *segments*,
each pushed as one engine function that runs its nodes in order. A node joins
the segment that produced every local tensor it reads when that segment's last
node is one of those producers (a chain, or the first branch of a fork); any
other node starts a segment. Forks therefore keep their other branches as
separate functions, so independent branches still run in parallel, while a
chain of microsecond nodes costs one push instead of one per node.

Why this is safe: a joining node reads nothing from outside its segment, so
a segment's inputs are those of its first node and no path can leave a
segment and come back into it (no cycle among segments).
"""

from __future__ import annotations

from typing import Sequence

PLANS = ("segments", "nodes")

#: Runs of each kind (parallel segments, one serial function) measured before
#: an executor settles on the faster.
CALIBRATION_RUNS = 2


def segments(reads: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]],
             local: set[str], plan: str) -> list[list[int]]:
    """Node positions (topological order) grouped into segments, in order.

    ``reads[i]`` are the tensors node ``i`` depends on, ``outputs[i]`` the ones
    it writes, ``local`` the tensors some node of this graph produces.
    """
    if plan == "nodes":
        return [[i] for i in range(len(reads))]
    producer_seg: dict[str, int] = {}
    groups: list[list[int]] = []
    for i, rd in enumerate(reads):
        segs = {producer_seg[t] for t in rd if t in local and t in producer_seg}
        target = None
        if len(segs) == 1:
            s = next(iter(segs))
            last = groups[s][-1]
            if any(t in outputs[last] for t in rd):
                target = s
        if target is None:
            target = len(groups)
            groups.append([])
        groups[target].append(i)
        for t in outputs[i]:
            if t:
                producer_seg[t] = target
    return groups


class ModeChooser:
    """Parallel segments or the whole graph as one serial function, by measurement.

    Parallel segments run independent branches on the engine's workers; the
    serial function runs the graph in order on the calling thread, with no
    hand-off between threads. Which wins depends on the graph (wide branches of
    large kernels, or many microsecond nodes) and on the machine's load, so an
    executor tries both alternately, parallel first,
    ``CALIBRATION_RUNS`` successful runs each, then keeps the faster (the
    fastest run of each kind, the measure least hurt by a noisy neighbour).
    """

    def __init__(self, runs: int = CALIBRATION_RUNS) -> None:
        self.runs = runs
        self.times: dict[bool, list[float]] = {False: [], True: []}
        self.choice: bool | None = None

    def serial(self) -> bool:
        """Whether the next run should be the serial function."""
        if self.choice is not None:
            return self.choice
        return len(self.times[True]) < len(self.times[False])

    def record(self, serial: bool, seconds: float) -> None:
        if self.choice is not None:
            return
        self.times[serial].append(seconds)
        if min(len(v) for v in self.times.values()) >= self.runs:
            self.choice = min(self.times[True]) <= min(self.times[False])
