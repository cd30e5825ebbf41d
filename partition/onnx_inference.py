"""ONNX shape inference for ``partition/onnx_io.py``: in this process, or in a forked child.

At 100k nodes ONNX's C++ inference takes a third of a second and holds the GIL;
``InferenceChild`` runs it in a child process while the importer builds the
nodes, which is most of what a large import costs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from typing import Any

import onnx


def infer_in_process(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with ONNX's inferred types, or the model itself when inference fails."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - inference is best effort; the graph stays usable
        return model


#: Below this many nodes inference takes milliseconds: not worth a process.
FORK_MIN_NODES = 20_000


class InferenceChild:
    """ONNX's shape inference of a large model in a forked child, while this process imports the nodes.

    The C++ inference holds the GIL (a third of a second at 100k nodes), so a thread
    would not run beside the import; a child forked from this process (copy-on-write:
    milliseconds) runs it on another core and hands the inferred model back through
    an in-memory file. Only where that is safe and pays: Linux (macOS frameworks
    do not survive a fork; Windows has none), a process running one Python thread
    (the command line; the web app's threaded server infers in-process), a model of
    ``FORK_MIN_NODES`` nodes or more. The child runs nothing but the inference and
    ``os._exit``. Best effort like the in-process call: a failed child (or fork)
    leaves the model's declared types.
    """

    def __init__(self, pid: int, out: Any) -> None:
        self.pid, self.out = pid, out

    @classmethod
    def start(cls, model: onnx.ModelProto) -> "InferenceChild | None":
        if not sys.platform.startswith("linux") or len(model.graph.node) < FORK_MIN_NODES \
                or threading.active_count() != 1:
            return None
        data = model.SerializeToString()
        out = open(os.memfd_create("sglens-shape-inference"), "w+b")  # an unnamed file in memory
        try:
            with warnings.catch_warnings():  # Python >= 3.12 warns of forking beside native threads (a
                warnings.simplefilter("ignore", DeprecationWarning)  # BLAS pool): the child uses none
                pid = os.fork()
        except OSError:  # no memory or process left for a child: infer in-process
            out.close()
            return None
        if pid == 0:  # the child
            code = 1
            try:
                inferred = memoryview(onnx.shape_inference.infer_shapes(data, strict_mode=False)
                                      .SerializeToString())
                while inferred:
                    inferred = inferred[os.write(out.fileno(), inferred):]
                code = 0
            finally:
                os._exit(code)
        return cls(pid, out)

    def wait(self) -> onnx.ModelProto | None:
        """The inferred model; None when the child failed."""
        _, status = os.waitpid(self.pid, 0)
        self.pid = 0
        if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
            return None
        self.out.seek(0)
        try:
            return onnx.load_from_string(self.out.read())
        except Exception:  # noqa: BLE001 - as a failed inference
            return None

    def close(self) -> None:
        """Stop a child nobody waits for (the import failed) and drop the file."""
        if self.pid:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.pid = 0
        self.out.close()
