"""ONNX's own backend test suite (node cases, CPU) through engine.onnx_backend: each case on our
executor, as a user's model runs.

The floor is the measured pass count: the suite is deterministic, so any newly failing case fails the
test (every remaining failure and its reason is listed in docs/kernels_conformance.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from engine.onnx_backend import LensBackend, failure_reason, run_node_suite

#: Measured 1,863 of 1,884 node cases (onnx 1.23.2, numpy 2); see docs/kernels_conformance.md.
#: (1,864 through the kernel-by-kernel interpreter it ran on before: the one case between is float16
#: computed in float32 on the host, a documented choice.)
MEASURED = 1863
FLOOR = 1863


@pytest.mark.slow
def test_node_suite_pass_count() -> None:
    result = run_node_suite()
    passed, total = len(result.passed), len(result.passed) + len(result.failed)
    print(f"ONNX backend node cases: {passed} of {total} pass (floor {FLOOR})")
    assert passed >= FLOOR, (f"{passed} node cases pass, below the floor of {FLOOR}; newly failing "
                             "cases are listed by `python -m engine.onnx_backend --show-failures`")
    unexplained = sorted(n for n in result.failed if failure_reason(n) is None)
    assert not unexplained, (f"failing node cases without a documented reason: {unexplained[:10]}; "
                             "fix them or add the reason to KNOWN_FAILURES in engine/onnx_backend.py")


def test_supports_device() -> None:
    assert LensBackend.supports_device("CPU")
    try:
        import cupy  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        assert not LensBackend.supports_device("CUDA")


def test_run_node_and_prepare(rng: np.random.Generator) -> None:
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (y,) = LensBackend.run_node(helper.make_node("Relu", ["x"], ["y"]), [x])
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["c"])], "g",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    (c,) = LensBackend.prepare(model).run([x, x])
    np.testing.assert_allclose(c, x + x)
