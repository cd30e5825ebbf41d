"""If, Loop and Scan. Bodies run through the caller's ``run_graph(body, values)``, which
supplies outer-scope tensors itself; these kernels only sequence the iterations. A caller
whose ``run_graph`` has ``bind(body) -> step(*values)`` (the executor's) lets a Loop or
Scan bind its body once and call the step each iteration (``body_step``)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from partition.ir import Graph

from .registry import register_control_flow, to_host

RunGraph = Callable[[Graph, list], list]


def body_step(run_graph: RunGraph, graph: Graph, n_inputs: int) -> Callable[..., list]:
    """``step(*values) -> [outputs]`` for the iterations of one call: the caller's bound
    body where it offers one (its lookups, outer scope and input count settled once a call,
    its inputs passed by position: ``bench/control_flow.py``'s Scan of a two-node body
    6.1-6.3 -> 3.4-3.6 us a step, with the views below), else ``run_graph`` each time. The
    body's input count is checked here, once."""
    if len(graph.inputs) != n_inputs:
        raise ValueError(f"body '{graph.name}' takes {len(graph.inputs)} inputs, got {n_inputs}")
    bind = getattr(run_graph, "bind", None)
    if bind is not None:
        return bind(graph)
    return lambda *values: run_graph(graph, list(values))


def truth(xp: Any, v: Any) -> bool:
    """A condition tensor's one value as a bool."""
    if v.__class__ is np.ndarray and v.size == 1:  # a host array (a Loop's condition, each step)
        return bool(v)
    return bool(to_host(xp, v).reshape(-1)[0])


@register_control_flow("If")
def if_(xp: Any, cond: Any, *, subgraphs: dict[str, Graph], run_graph: RunGraph,
        then_branch: Any = None, else_branch: Any = None) -> tuple:
    branch = subgraphs["then_branch" if truth(xp, cond) else "else_branch"]
    return tuple(run_graph(branch, []))


def _stack(xp: Any, items: list[Any]) -> Any:
    return xp.stack(items) if items else None


@register_control_flow("Loop")
def loop(xp: Any, max_trip: Any = None, cond: Any = None, *carried: Any, subgraphs: dict[str, Graph],
         run_graph: RunGraph, body: Any = None) -> tuple:
    graph = subgraphs["body"]
    trips = None if max_trip is None else int(to_host(xp, max_trip).reshape(-1)[0])
    keep_going = True if cond is None else truth(xp, cond)
    state = list(carried)
    n_state = len(state)
    n_scan = len(graph.outputs) - 1 - n_state
    scans: list[list[Any]] = [[] for _ in range(n_scan)]
    # The condition fed in is true on every step that runs: one array for all of them (a
    # body never writes into its inputs); the counter is a new one each step.
    going = xp.asarray(np.array(True))
    step = body_step(run_graph, graph, 2 + n_state)
    i = 0
    while keep_going and (trips is None or i < trips):
        values = step(xp.asarray(np.array(i, dtype=np.int64)), going, *state)
        keep_going = truth(xp, values[0])
        state = values[1:1 + n_state]
        for k in range(n_scan):
            scans[k].append(values[1 + n_state + k])
        i += 1
    state = list(state)
    outs = [_stack(xp, s) if s else _empty_scan(xp, graph, 1 + len(state) + k)
            for k, s in enumerate(scans)]
    return tuple(state + outs)


def _empty_scan(xp: Any, graph: Graph, index: int) -> Any:
    """A zero-trip loop's scan output: empty along the iteration axis, typed if known."""
    from partition.dtypes import to_numpy  # noqa: PLC0415
    info = graph.info(graph.outputs[index])
    try:
        dtype = to_numpy(info.dtype) if info.dtype else np.float32
    except KeyError:
        dtype = np.float32
    dims = [d if isinstance(d, int) else 0 for d in (info.shape or ())]
    return xp.zeros([0] + dims, dtype=dtype)


@register_control_flow("Scan", since=9)
def scan(xp: Any, *inputs: Any, subgraphs: dict[str, Graph], run_graph: RunGraph, body: Any = None,
         num_scan_inputs: int, scan_input_axes: list[int] | None = None,
         scan_input_directions: list[int] | None = None, scan_output_axes: list[int] | None = None,
         scan_output_directions: list[int] | None = None) -> tuple:
    graph = subgraphs["body"]
    n_state = len(inputs) - num_scan_inputs
    state = list(inputs[:n_state])
    seqs = list(inputs[n_state:])
    in_axes = [a % seqs[k].ndim for k, a in enumerate(scan_input_axes or [0] * len(seqs))]
    in_dirs = scan_input_directions or [0] * len(seqs)
    lengths = {s.shape[a] for s, a in zip(seqs, in_axes)}
    if len(lengths) > 1:
        raise ValueError(f"Scan's sequences differ in length along their scan axes: {sorted(lengths)}")
    n_out = len(graph.outputs) - n_state
    collected: list[list[Any]] = [[] for _ in range(n_out)]
    # Each sequence iterated along its scan axis (moved first, reversed for direction 1): each
    # step's slice a view made by the array's own iterator (no copy: a kernel never writes into
    # its inputs), with no index tuple built in Python a step.
    views = [xp.moveaxis(s, a, 0) for s, a in zip(seqs, in_axes)]
    views = [v[::-1] if d else v for v, d in zip(views, in_dirs)]
    # a 1-D sequence's iterator yields numpy scalars: its slices are made 0-d arrays, as tensors
    steps = [iter(v) if v.ndim > 1 else map(xp.asarray, v) for v in views]
    step = body_step(run_graph, graph, len(inputs))
    for slices in zip(*steps):
        values = step(*state, *slices)
        state = values[:n_state]
        for k in range(n_out):
            collected[k].append(values[n_state + k])
    state = list(state)
    out_axes = scan_output_axes or [0] * n_out
    out_dirs = scan_output_directions or [0] * n_out
    outs = []
    for k, items in enumerate(collected):
        if out_dirs[k]:
            items = items[::-1]
        stacked = xp.stack(items)
        axis = out_axes[k] % stacked.ndim
        outs.append(xp.moveaxis(stacked, 0, axis))
    return tuple(state + outs)


@register_control_flow("Scan", since=8)
def scan8(xp: Any, sequence_lens: Any, *inputs: Any, subgraphs: dict[str, Graph], run_graph: RunGraph,
          body: Any = None, num_scan_inputs: int, directions: list[int] | None = None) -> tuple:
    """Scan-8: every input has a leading batch axis and scans along axis 1; it is Scan-9 run
    once per batch item (states and outputs stacked back along the batch axis)."""
    if sequence_lens is not None:
        lens = set(to_host(xp, sequence_lens).reshape(-1).tolist())
        n_steps = {s.shape[1] for s in inputs[len(inputs) - num_scan_inputs:]}
        if lens != n_steps:
            raise ValueError("Scan-8 with sequence_lens shorter than the sequences is not supported; "
                             "pad the sequences or use Scan-9+")
    batch = inputs[0].shape[0] if inputs else 0
    if batch == 0:
        raise ValueError("Scan-8 needs at least one batch item (the leading axis of its inputs)")
    per_item = [scan(xp, *[v[b] for v in inputs], subgraphs=subgraphs, run_graph=run_graph,
                     num_scan_inputs=num_scan_inputs, scan_input_directions=directions)
                for b in range(batch)]
    return tuple(xp.stack([item[k] for item in per_item]) for k in range(len(per_item[0])))
