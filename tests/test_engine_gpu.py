"""GPU paths of the engine.

Two parts: (1) the event logic (apache/mxnet#18951) checked here on any machine
with a recording fake of cupy's documented API; (2) real-GPU tests, skipped
where cupy or a GPU is missing.
"""

from __future__ import annotations

import itertools
import threading
import types
from typing import Any, Iterator

import pytest

import engine
from engine import Context, FnProperty, NaiveEngine, Profiler, ThreadedEngine

pytestmark = pytest.mark.timeout(60)


# --- (1) the event logic, against a fake cupy ---------------------------------

class FakeCuda:
    """Just the cupy.cuda calls the engine makes, logged."""

    def __init__(self) -> None:
        self.log: list[tuple[str, Any, Any]] = []
        self._lock = threading.Lock()
        self._ids = itertools.count()
        cuda = self

        class Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                self.ptr = 1000 + next(cuda._ids)

            def use(self) -> "Stream":
                return self

            def __enter__(self) -> "Stream":
                return self

            def __exit__(self, *a: object) -> None:
                pass

            def wait_event(self, event: "Event") -> None:
                cuda._add("wait_event", self.ptr, event.id)

            def synchronize(self) -> None:
                cuda._add("stream_sync", self.ptr, None)

        class Event:
            def __init__(self, disable_timing: bool = True) -> None:
                self.id = next(cuda._ids)
                self.timing = not disable_timing

            def record(self, stream: Stream) -> None:
                self.stream = stream.ptr
                cuda._add("record", stream.ptr, self.id)

            def synchronize(self) -> None:
                cuda._add("event_sync", None, self.id)

        self.Stream, self.Event = Stream, Event
        self.runtime = types.SimpleNamespace(getDeviceCount=lambda: 1)
        self.Device = lambda i: types.SimpleNamespace(use=lambda: None)
        self.get_elapsed_time = lambda a, b: 1.5

    def _add(self, *entry: Any) -> None:
        with self._lock:
            self.log.append(entry)

    def of(self, kind: str) -> list[tuple[str, Any, Any]]:
        return [e for e in self.log if e[0] == kind]


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCuda]:
    cuda = FakeCuda()
    monkeypatch.setattr(engine.gpu, "_cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(engine.gpu, "_probed", True)
    yield cuda


def test_gpu_context_checks_device_ids(fake_cuda: FakeCuda) -> None:
    assert Context.gpu(0).is_gpu
    with pytest.raises(engine.NoGPUError, match="1 CUDA device"):
        Context.gpu(3)


def test_consumer_on_other_stream_waits_on_producer_event(fake_cuda: FakeCuda) -> None:
    eng = ThreadedEngine(num_gpu_workers=1, num_copy_workers=1)
    try:
        g = Context.gpu(0)
        a, b = eng.new_variable(), eng.new_variable()
        streams: dict[str, int] = {}
        eng.push_sync(lambda rc: streams.setdefault("producer", rc.stream.ptr), g, [], [a])
        eng.wait_for_var(a)  # host waits: by event, not by stream sync
        produced = fake_cuda.of("record")[-1][2]
        assert ("event_sync", None, produced) in fake_cuda.log
        fake_cuda.log.clear()
        eng.push_sync(lambda rc: streams.setdefault("copy", rc.stream.ptr), g, [a], [b],
                      prop=FnProperty.COPY_FROM_GPU)
        eng.wait_for_var(b)
        assert streams["copy"] != streams["producer"]  # another pool, another stream
        # The copy stream waited on the producer's event; nobody synced a stream.
        assert ("wait_event", streams["copy"], produced) in fake_cuda.log
        assert fake_cuda.of("stream_sync") == []
    finally:
        eng.shutdown()


def test_cpu_consumer_and_write_after_read(fake_cuda: FakeCuda) -> None:
    eng = ThreadedEngine(num_cpu_workers=1, num_gpu_workers=1, num_copy_workers=1)
    try:
        g = Context.gpu(0)
        a, o = eng.new_variable(), eng.new_variable()
        eng.push_sync(lambda rc: None, g, [], [a])                  # GPU write
        eng.push_sync(lambda rc: None, g, [a], [o], prop=FnProperty.COPY_TO_GPU)  # GPU read
        eng.wait_for_var(o)
        write_ev, read_ev = [e[2] for e in fake_cuda.of("record")][:2]
        fake_cuda.log.clear()
        seen: list[bool] = []
        # A CPU write after a GPU write and a GPU read must wait (host) for both.
        eng.push_sync(lambda rc: seen.append(rc.stream is None), Context.cpu(), [], [a])
        eng.wait_for_all()
        syncs = {e[2] for e in fake_cuda.of("event_sync")}
        assert {write_ev, read_ev} <= syncs and seen == [True]
        assert a._write_event is None and a._read_events == []  # CPU write: no events left
        assert a.version == 2
    finally:
        eng.shutdown()


def test_gpu_profiling_uses_device_events(fake_cuda: FakeCuda) -> None:
    prof = Profiler()
    eng = NaiveEngine(hooks=prof)
    v = eng.new_variable()
    eng.push_sync(lambda rc: None, Context.gpu(0), [], [v], name="kernel")
    eng.wait_for_all()
    (rec,) = prof.timeline()
    assert rec.stream is not None and rec.start_event.timing and rec.end_event.timing
    assert rec.device_ms() == 1.5 and prof.total_by() == {"kernel": 0.0015}
    assert fake_cuda.of("stream_sync")  # the naive engine syncs after each function


# --- (2) on a real GPU ----------------------------------------------------------

def _have_gpu() -> bool:
    try:
        return engine.gpu.device_count() > 0
    except Exception:
        return False


gpu_only = pytest.mark.skipif(not _have_gpu(), reason="needs cupy and a CUDA GPU")


@gpu_only
@pytest.mark.parametrize("name", ["naive", "threaded"])
def test_real_gpu_chain_across_streams(name: str) -> None:
    import cupy as cp
    eng = engine.create_engine(name, num_gpu_workers=2)
    try:
        g = Context.gpu(0)
        buf = {"x": cp.zeros((2048, 2048), dtype=cp.float32)}
        x, y = eng.new_variable(), eng.new_variable()

        def produce(rc: engine.RunContext) -> None:
            with rc.stream:
                buf["x"] += 1.0
                buf["x"] = buf["x"] @ cp.eye(2048, dtype=cp.float32)  # slow enough to race

        def consume(rc: engine.RunContext) -> None:
            with rc.stream:
                buf["y"] = buf["x"].sum()

        for _ in range(5):
            eng.push_sync(produce, g, [], [x])
            eng.push_sync(consume, g, [x], [y], prop=FnProperty.COPY_FROM_GPU)
        eng.wait_for_var(y)
        assert float(buf["y"]) == pytest.approx(5.0 * 2048 * 2048)
        eng.push_sync(lambda rc: buf.setdefault("host", float(buf["x"][0, 0])),
                      Context.cpu(), [x], [])
        eng.wait_for_all()
        assert buf["host"] == 5.0
    finally:
        eng.shutdown()


@gpu_only
def test_real_gpu_profiling_and_errors() -> None:
    import cupy as cp
    prof = Profiler()
    eng = ThreadedEngine(hooks=prof)
    try:
        g = Context.gpu(0)
        v = eng.new_variable()
        a = cp.ones((1024, 1024), dtype=cp.float32)
        eng.push_sync(lambda rc: a @ a, g, [], [v], name="matmul")
        eng.push_sync(lambda rc: (_ for _ in ()).throw(RuntimeError("gpu fn failed")),
                      g, [], [v])
        with pytest.raises(RuntimeError, match="gpu fn failed"):
            eng.wait_for_var(v)
        eng.wait_for_all()
        rec = next(r for r in prof.timeline() if r.name == "matmul")
        assert rec.stream and (rec.device_ms() or 0) > 0
    finally:
        eng.shutdown()
