"""Large Conv / MatMul cut over threads (engine/kernels/blas.py ``run_split``, engine/kernels/cpu_split.py)
against onnxruntime on fresh random inputs, with the split forced on and every slice checked to
have run; plus the pool's rules: exceptions reach the caller, helpers stand back when the cores
are taken, a split that gains nothing backs off."""

from __future__ import annotations

import threading
import time
from typing import Any, Iterator

import numpy as np
import pytest

from engine.kernels import blas
from engine.kernels import cpu_split, native
from test_kernels_harness import check

f32 = np.float32


@pytest.fixture(autouse=True)
def _numpy_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests check the numpy split (``blas.run_split``); the compiled pool's
    GEMM and Conv have theirs in test_native.py."""
    monkeypatch.setattr(native, "_lib", None)


@pytest.fixture
def forced_split(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Splitting on for any size, as on a 2-core machine; yields the names of the
    threads that ran slices (so a test can see the helpers took part)."""
    monkeypatch.setattr(blas, "_split_on", True)
    monkeypatch.setattr(blas, "_CORES", 2)
    monkeypatch.setattr(blas, "SPLIT_MIN_MACS", 0)
    monkeypatch.setattr(blas, "_skip_until", 0.0)
    monkeypatch.setattr(blas, "_MIN_GAIN", 0.0)  # never back off inside these tests
    ran: list[str] = []
    real = blas.run_split

    def recording(fn: Any, n: int, ways: int) -> None:
        def slice_(i: int) -> None:
            ran.append(threading.current_thread().name)
            fn(i)
        real(slice_, n, ways)

    monkeypatch.setattr(blas, "run_split", recording)
    yield ran


def _x(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape).astype(f32)


@pytest.mark.parametrize("case", [
    # (N, C, M, spatial, kernel, strides, pads, dilations): ResNet-like and odd geometries.
    (1, 8, 16, (30, 30), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),     # row bands
    (2, 6, 16, (33, 31), (3, 3), (2, 2), (1, 0, 2, 1), (1, 1)),     # stride 2, uneven pads, N=2
    (1, 3, 16, (40, 40), (7, 7), (2, 2), (3, 3, 3, 3), (1, 1)),     # the 7x7 stem
    (1, 16, 32, (24, 24), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1)),    # 1x1: the input is the columns
    (1, 16, 32, (24, 24), (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),    # 1x1 stride 2 downsample
    (1, 32, 64, (7, 7), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),      # small map: channel slices
    (1, 4, 8, (36, 37), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2)),      # dilated
    (1, 4, 16, (800,), (5,), (2,), (2, 2), (1,)),                   # 1-D
    (1, 2, 4, (12, 9, 8), (3, 3, 3), (1, 1, 1), (1,) * 6, (1, 1, 1)),  # 3-D
])
def test_conv_split_matches_onnxruntime(case: tuple, forced_split: list[str],
                                        rng: np.random.Generator) -> None:
    n, c, m, sp, k, strides, pads, dil = case
    x, w, b = _x(rng, (n, c) + sp), _x(rng, (m, c) + k), _x(rng, (m,))
    check("Conv", {"x": x, "w": w, "b": b}, rtol=1e-4, atol=1e-4, oracle="onnxruntime",
          kernel_shape=list(k), strides=list(strides), pads=list(pads), dilations=list(dil))
    assert len(forced_split) >= 2, "the conv did not take the split path"
    check("Conv", {"x": x, "w": w}, rtol=1e-4, atol=1e-4, oracle="onnxruntime",  # no bias
          kernel_shape=list(k), strides=list(strides), pads=list(pads), dilations=list(dil))


@pytest.mark.parametrize("seed", range(12))
def test_conv_split_random_geometry(seed: int, forced_split: list[str]) -> None:
    """Padding applied on the fly (cpu_split ``_columns``): random strides, dilations,
    kernels and pads -- pads up to twice the kernel, so whole windows fall in the
    padding -- and auto_pad, against onnxruntime."""
    rng = np.random.default_rng(seed)
    rank = int(rng.choice([1, 2, 2, 3]))
    k = tuple(int(v) for v in rng.integers(1, 4, rank))
    low, high = {1: (200, 400), 2: (20, 40), 3: (9, 13)}[rank]
    sp = tuple(int(v) for v in rng.integers(low, high, rank))
    attrs: dict[str, Any] = {"kernel_shape": list(k),
                             "strides": [int(v) for v in rng.integers(1, 4, rank)]}
    if rng.random() < 0.7:
        attrs["dilations"] = [int(v) for v in rng.integers(1, 3, rank)]
        attrs["pads"] = [int(rng.integers(0, 2 * kk + 1)) for kk in k * 2]
    else:
        attrs["auto_pad"] = str(rng.choice(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    x, w = _x(rng, (int(rng.integers(1, 3)), 16) + sp), _x(rng, (16, 16) + k)
    check("Conv", {"x": x, "w": w, "b": _x(rng, (16,))}, rtol=1e-4, atol=1e-4,
          oracle="onnxruntime", **attrs)
    assert forced_split, "the conv did not take the split path"


def test_conv_split_uses_the_helper(forced_split: list[str], rng: np.random.Generator) -> None:
    """Over many large convs a helper thread takes part in some (it cannot be forced
    to win the race for a given slice, but it must not sit idle every time)."""
    x, w = _x(rng, (1, 32, 64, 64)), _x(rng, (32, 32, 3, 3))
    for _ in range(20):
        cpu_split.conv_split(x, w, None, [1, 1, 1, 1], [(i, j) for i in range(3) for j in range(3)],
                             [1, 1], [1, 1], [64, 64])
    assert any(name.startswith("sglens-split") for name in forced_split)


@pytest.mark.parametrize("shapes", [((64, 96), (96, 80)), ((3, 40, 64), (64, 50)),
                                    ((2, 3, 40, 32), (2, 3, 32, 48)), ((7, 300), (300, 9))])
def test_matmul_split_matches_onnxruntime(shapes: tuple, forced_split: list[str],
                                          rng: np.random.Generator) -> None:
    a, b = _x(rng, shapes[0]), _x(rng, shapes[1])
    check("MatMul", {"a": a, "b": b}, rtol=1e-4, atol=1e-4, oracle="onnxruntime")
    assert len(forced_split) >= 2, "the matmul did not take the split path"


def test_gemm_split_matches_onnxruntime(forced_split: list[str], rng: np.random.Generator) -> None:
    check("Gemm", {"a": _x(rng, (80, 64)), "b": _x(rng, (96, 64)), "c": _x(rng, (96,))},
          rtol=1e-4, atol=1e-4, oracle="onnxruntime", transB=1, alpha=0.5, beta=2.0)
    assert len(forced_split) >= 2


def test_slice_error_reaches_the_caller(forced_split: list[str]) -> None:
    def fn(i: int) -> None:
        if i == 3:
            raise ValueError("slice 3 failed")
    with pytest.raises(ValueError, match="slice 3 failed"):
        blas.run_split(fn, 6, 2)
    blas.run_split(lambda i: None, 6, 2)  # the pool still works afterwards


def test_every_slice_runs_once(forced_split: list[str]) -> None:
    seen: list[int] = []
    lock = threading.Lock()

    def fn(i: int) -> None:
        with lock:
            seen.append(i)
    for _ in range(50):
        seen.clear()
        blas.run_split(fn, 7, 2)
        assert sorted(seen) == list(range(7))


def test_no_split_when_the_cores_are_busy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two large kernels on a 2-core machine: the second runs serially, and while
    both run, a helper takes no slice (no third thread computing)."""
    monkeypatch.setattr(blas, "_split_on", True)
    monkeypatch.setattr(blas, "_CORES", 2)
    monkeypatch.setattr(blas, "_skip_until", 0.0)
    with blas.LargeKernel(10 ** 9) as first:
        assert first == 2
        with blas.LargeKernel(10 ** 9) as second:  # as if from another engine worker
            assert second == 1
            taken: list[str] = []
            job = blas._Job(lambda i: taken.append(threading.current_thread().name), 4)
            job.take(helper=True)  # a helper arriving now stands back
            assert taken == [] and job.refused  # (so this job's gain will not count as load)
            job.take(helper=False)  # the caller runs every slice itself
            assert len(taken) == 4 and job.done.is_set()
    assert blas._running == 0


@pytest.mark.parametrize("load,longest", [(5.0, 0.2), (0.3, 0.01)])
def test_split_backs_off_when_it_gains_nothing(load: float, longest: float,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Long while the load average says the cores are taken, briefly when they are not."""
    monkeypatch.setattr(blas, "_split_on", True)
    monkeypatch.setattr(blas, "_CORES", 2)
    monkeypatch.setattr(blas, "_skip_until", 0.0)
    monkeypatch.setattr(blas, "_gain", 1.6)
    monkeypatch.setattr(blas, "_BACKOFF", 0.2)
    monkeypatch.setattr(blas, "_BACKOFF_IDLE", 0.01)
    monkeypatch.setattr(blas.os, "getloadavg", lambda: (load, load, load))
    if longest < 0.2:
        for _ in range(5):
            blas._record_gain(1.0)
            if blas._skip_until:
                break
        assert 0 < blas._skip_until - time.perf_counter() <= longest
        return
    for _ in range(5):  # jobs that ran at the speed of one thread
        blas._record_gain(1.0)
        if blas._skip_until:
            break
    assert blas._skip_until > time.perf_counter()
    with blas.LargeKernel(10 ** 9) as ways:
        assert ways == 1  # backing off
    time.sleep(0.25)
    with blas.LargeKernel(10 ** 9) as ways:
        assert ways == 2  # tried again once the back-off is over


def test_a_share_of_the_cores_keeps_splitting_on_beside_dasks_blas_setting(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blas, "_CORES", 2)
    monkeypatch.setattr(blas, "_split_on", False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")
    monkeypatch.delenv(blas.SHARE_VAR, raising=False)
    try:
        assert blas.apply(None, 1) is None and blas._split_on is False  # the user's setting wins
        monkeypatch.setenv(blas.SHARE_VAR, "2")
        assert blas.apply(None, 1) == 1 and blas._split_on is True      # a share: ours to split
    finally:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        monkeypatch.delenv(blas.SHARE_VAR, raising=False)
        blas.apply(None, 2)


@pytest.mark.parametrize("value,expect", [("1", 1), ("0", None), ("x", None), ("9999", None)])
def test_the_share_is_read_from_the_environment(value: str, expect: int | None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    monkeypatch.setenv(blas.SHARE_VAR, value)
    cores = os.cpu_count() or 1
    assert blas._cpu_share() == (cores if expect is None else expect)


def test_apply_turns_splitting_on_only_with_one_blas_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in blas._USER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(blas, "_CORES", 2)
    monkeypatch.setattr(blas, "_split_on", False)
    try:
        blas.apply(2, 1)
        assert blas._split_on is False  # BLAS itself is threaded: splitting would oversubscribe
        blas.apply(0, 1)
        assert blas._split_on is False  # "leave BLAS alone": its thread count is unknown
        blas.apply(None, 2)
        assert blas._split_on is True
        assert blas.set_split(False) is True and blas._split_on is False  # bench --cpu
        with blas.LargeKernel(10 ** 9) as ways:
            assert ways == 1
        blas.set_split(True)
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
        blas.apply(None, 2)
        assert blas._split_on is False
    finally:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        blas.apply(None, 2)


@pytest.mark.parametrize("case", [
    # (shape, kernel, strides, pads, dilations, ceil_mode)
    ((1, 8, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),   # ResNet's stem pool
    ((2, 3, 17, 19), [3, 2], [2, 1], [1, 0, 1, 1], [2, 1], 1),     # dilated, ceil mode
    ((1, 2, 9, 8, 7), [2, 3, 2], [2, 2, 1], [0] * 6, [1, 1, 2], 0),  # 3-D
    ((1, 4, 50), [4], [3], [1, 2], [1], 1),                        # 1-D
])
def test_max_pool_separable_matches_onnxruntime(case: tuple, rng: np.random.Generator) -> None:
    """MaxPool without Indices takes the maximum one axis at a time (nn.py ``_separable_max``)."""
    shape, kernel, strides, pads, dil, ceil = case
    check("MaxPool", {"x": _x(rng, shape)}, oracle="onnxruntime", kernel_shape=kernel,
          strides=strides, pads=pads, dilations=dil, ceil_mode=ceil)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_split_works_in_a_forked_child(forced_split: list[str]) -> None:
    """A child forked after the helpers started has none: its splits run on the
    caller alone (and leave no job queued), and new helpers start there."""
    import os
    blas.run_split(lambda i: None, 4, 2)  # helpers exist in the parent
    pid = os.fork()
    if pid == 0:  # the child: exit code says what happened
        try:
            seen: list[int] = []
            blas.run_split(seen.append, 6, 2)
            ok = sorted(seen) == list(range(6)) and blas._jobs.qsize() <= 1
            os._exit(0 if ok else 1)
        except BaseException:  # noqa: BLE001
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


@pytest.mark.parametrize("case", [
    # (shape, dtype, kernel, strides, pads, dilations, ceil_mode): several blocks of planes
    ((1, 64, 112, 112), f32, [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], 0),   # ResNet's stem pool
    ((2, 37, 41, 39), f32, [3, 2], [2, 1], [1, 0, 1, 1], [2, 1], 1),     # dilated, ceil, odd
    ((3, 40, 60, 61), np.int8, [2, 2], [2, 2], [0, 0, 0, 0], [1, 1], 1),  # int8: fill is the minimum
    ((1, 5, 30, 28, 26), f32, [2, 3, 2], [2, 2, 1], [1] * 6, [1, 1, 1], 0),  # 3-D
])
def test_max_pool_blocks_over_the_cores(case: tuple, forced_split: list[str],
                                        rng: np.random.Generator) -> None:
    """MaxPool (no Indices) by blocks of planes over the threads (cpu_split ``max_pool``)."""
    shape, dtype, kernel, strides, pads, dil, ceil = case
    x = (rng.standard_normal(shape) * 40).astype(dtype)
    check("MaxPool", {"x": x}, oracle="onnxruntime", kernel_shape=kernel, strides=strides,
          pads=pads, dilations=dil, ceil_mode=ceil)
    assert len(forced_split) >= 2, "the pool did not take the split path"

