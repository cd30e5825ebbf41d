"""Models in memory (samples and uploads) and runs in SQLite.

Uploads are written under ``<instance>/uploads/<random hex>.onnx``: the name
a user gave is kept only as a label, never as a path. Partition results are
cached per (model, backend options) in a small LRU, so the graph view, the
TensorRT tab and the downloads of one partition share one computation.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from partition.errors import LensError
from partition.ir import Graph

from .errors import ApiError

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "sample_models"


@dataclass
class ModelEntry:
    id: str
    name: str
    graph: Graph
    source: str                    # "sample" | "upload"
    size: int
    path: str | None = None        # the stored file (generated name), None for in-memory samples
    data: bytes | None = None      # bytes kept for samples built in memory
    created: float = field(default_factory=time.time)

    def model_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        assert self.path is not None
        with open(self.path, "rb") as f:
            return f.read()


class ModelStore:
    """Models by id. Thread-safe; ids are random for uploads, ``sample-<stem>`` for samples."""

    def __init__(self, upload_dir: str, max_bytes: int, max_results: int = 32) -> None:
        self.upload_dir = upload_dir
        self.max_bytes = max_bytes
        self._models: dict[str, ModelEntry] = {}
        self._lock = threading.Lock()
        self._results: OrderedDict[tuple, Any] = OrderedDict()
        self._results_lock = threading.Lock()
        self._max_results = max_results

    # ---- models ----
    def load_samples(self) -> list[str]:
        """``sample_models/*.onnx``; built in memory with ``build_all()`` when the files are missing."""
        from partition.onnx_io import load_model
        loaded: list[str] = []
        files = sorted(SAMPLES_DIR.glob("*.onnx"))
        if files:
            for path in files:
                data = path.read_bytes()
                graph = load_model(data)
                loaded.append(self._add(f"sample-{path.stem}", path.name, graph, "sample", data))
        else:
            from sample_models.generate import build_all
            for name, proto in build_all().items():
                data = proto.SerializeToString()
                graph = load_model(data)
                loaded.append(self._add(f"sample-{Path(name).stem}", name, graph, "sample", data))
        return loaded

    def _add(self, mid: str, name: str, graph: Graph, source: str, data: bytes | None,
             path: str | None = None, size: int | None = None) -> str:
        entry = ModelEntry(mid, name, graph, source, size if size is not None else len(data or b""),
                           path=path, data=data)
        with self._lock:
            self._models[mid] = entry
        return mid

    def add_graph(self, name: str, graph: Graph, data: bytes) -> ModelEntry:
        """A model made in memory (tests, benchmarks)."""
        mid = secrets.token_hex(8)
        self._add(mid, name, graph, "memory", data)
        return self.get(mid)

    def upload(self, filename: str, stream: Any) -> ModelEntry:
        """Store an uploaded file under a generated name, then load it; a bad file leaves nothing behind."""
        label = _label(filename)
        os.makedirs(self.upload_dir, exist_ok=True)
        mid = secrets.token_hex(8)
        path = os.path.join(self.upload_dir, f"{mid}.onnx")
        size = 0
        try:
            with open(path, "wb") as out:
                while True:
                    chunk = stream.read(1 << 20)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > self.max_bytes:
                        from partition.errors import ModelTooLargeError
                        raise ModelTooLargeError(f"{label}: over the upload limit of {self.max_bytes} bytes")
                    out.write(chunk)
            # Parsed from the stored file; an upload's external data is refused at every level.
            from .uploads import load_upload
            graph = load_upload(path, self.max_bytes, label)
        except LensError as exc:
            _unlink(path)
            msg = str(exc)
            if msg.startswith("upload:"):
                msg = f"{label}:" + msg[len("upload:"):]
            raise type(exc)(msg) from None
        except Exception as exc:  # noqa: BLE001 - any loader failure is the file's fault
            _unlink(path)
            raise ApiError(f"{label}: cannot be read as an ONNX model ({type(exc).__name__}: {exc})") from None
        self._add(mid, label, graph, "upload", None, path=path, size=size)
        return self.get(mid)

    def get(self, mid: str) -> ModelEntry:
        with self._lock:
            entry = self._models.get(mid)
        if entry is None:
            raise ApiError(f"no model with id '{mid}'; GET /api/models lists them", 404)
        return entry

    def list(self) -> list[ModelEntry]:
        with self._lock:
            return sorted(self._models.values(), key=lambda e: (e.source != "sample", e.created, e.name))

    def delete(self, mid: str) -> None:
        entry = self.get(mid)
        with self._lock:
            self._models.pop(mid, None)
        if entry.path:
            _unlink(entry.path)

    # ---- partition results (LRU) ----
    def cached(self, key: tuple, compute: Callable[[], Any]) -> Any:
        with self._results_lock:
            if key in self._results:
                self._results.move_to_end(key)
                return self._results[key]
        value = compute()
        with self._results_lock:
            self._results[key] = value
            while len(self._results) > self._max_results:
                self._results.popitem(last=False)
        return value


def _label(filename: str | None) -> str:
    """A display name from an uploaded file name: the base name, printable, short."""
    base = os.path.basename((filename or "upload.onnx").replace("\\", "/")) or "upload.onnx"
    clean = "".join(c for c in base if c.isprintable())[:120]
    return clean or "upload.onnx"


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -------------------------------------------------------------------- runs --
class RunStore:
    """Finished (and failed, cancelled) runs in SQLite, one connection per call."""

    SCHEMA = """
    CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY, model_id TEXT, model_name TEXT, backend TEXT, options TEXT,
        device TEXT, executor TEXT, status TEXT, error TEXT, created REAL, finished REAL,
        result TEXT, chrome_trace TEXT
    )"""

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with self._connect() as db:
            db.execute(self.SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30)
        db.row_factory = sqlite3.Row
        return db

    def save(self, run: dict[str, Any], result: dict[str, Any] | None, chrome_trace: Any | None) -> None:
        with self._connect() as db:
            db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (run["id"], run["model_id"], run["model_name"], run["backend"], json.dumps(run["options"]),
                 run["device"], run["executor"], run["status"], run.get("error"), run["created"],
                 run.get("finished"), json.dumps(result, default=str) if result is not None else None,
                 json.dumps(chrome_trace) if chrome_trace is not None else None))

    def list(self, limit: int = 200) -> list[dict[str, Any]]:
        with self._connect() as db:
            rows = db.execute("SELECT id, model_id, model_name, backend, options, device, executor, status,"
                              " error, created, finished FROM runs ORDER BY created DESC LIMIT ?",
                              (limit,)).fetchall()
        return [self._meta(r) for r in rows]

    def get(self, rid: str) -> dict[str, Any] | None:
        with self._connect() as db:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            return None
        data = self._meta(row)
        data["result"] = json.loads(row["result"]) if row["result"] else None
        return data

    def chrome_trace(self, rid: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT chrome_trace FROM runs WHERE id = ?", (rid,)).fetchone()
        return row["chrome_trace"] if row else None

    @staticmethod
    def _meta(row: sqlite3.Row) -> dict[str, Any]:
        return {"id": row["id"], "model_id": row["model_id"], "model_name": row["model_name"],
                "backend": row["backend"], "options": json.loads(row["options"] or "{}"),
                "device": row["device"], "executor": row["executor"], "status": row["status"],
                "error": row["error"], "created": row["created"], "finished": row["finished"]}
