"""The store: uploaded models (file + metadata) and runs, on disk, surviving restarts.

Everything persistent goes through this module, so a shared deployment can swap SQLite
for PostgreSQL by giving a ``postgresql://`` URL (``SGLENS_STORE_URL``; needs ``psycopg``):

- ``Database``: one SQL database behind ``?`` placeholders and portable SQL (``BIGINT``,
  ``DOUBLE PRECISION``, ``INSERT ... ON CONFLICT``): the standard library's ``sqlite3``
  (WAL journal, so several server processes can share one file) or ``psycopg``.
- ``MIGRATIONS``: numbered schema steps recorded in ``schema_version``; a store made by an
  older version is brought up to date on open (version 1 is the runs table of the first
  release, so existing ``runs.sqlite3`` files keep their runs).
- ``ModelStore``: samples and in-memory models live in memory (they are rebuilt at every
  start); uploads are rows in ``models`` (with the SHA-256 of the bytes) plus one file each,
  ``<instance>/uploads/<id>.onnx`` (the user's file name is a label, never a path). A file
  is written under a temporary name and renamed when complete, so a crash mid-upload
  leaves no half model in the library. Bundles (a model with its external-data files,
  uploaded or named by ``sglens serve --model``) are rows too, whose ``bundle`` column names
  their unpacked folder ``<instance>/bundles/<id>/`` and ``file`` the model inside it.
- ``RunStore``: every run from submission on (queued, running with its stage and
  progress, then done/failed/cancelled/interrupted with its result and Chrome trace).

``--store-limit`` caps the bytes the store holds (upload files + the database); an upload
or a run that would pass it gets a 507 JSON error.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import socket
import sqlite3
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from partition.errors import LensError
from partition.ir import Graph

from .errors import ApiError
from .run_states import IN_FLIGHT, lost_with_server

SAMPLES_DIR = Path(__file__).resolve().parent.parent / "sample_models"



# --------------------------------------------------------------- database --
class Database:
    """A SQL database: ``sqlite:///path`` / a plain path (sqlite3), or ``postgresql://...`` (psycopg)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.postgres = url.startswith(("postgresql://", "postgres://"))
        if self.postgres:
            import psycopg  # noqa: F401 - fail now with a clear ImportError, not at the first query
            self.path = None
        else:
            self.path = url[len("sqlite:///"):] if url.startswith("sqlite:///") else url
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            with self.connect() as db:
                db.execute("PRAGMA journal_mode=WAL")  # readers do not block the writer (other processes)

    @contextlib.contextmanager
    def connect(self) -> Iterator["_Conn"]:
        """A connection for one unit of work, committed at the end (rolled back on error)."""
        if self.postgres:
            import psycopg
            from psycopg.rows import dict_row
            raw: Any = psycopg.connect(self.url, row_factory=dict_row)
        else:
            raw = sqlite3.connect(self.path, timeout=30)
            raw.row_factory = sqlite3.Row
        try:
            yield _Conn(raw, self.postgres)
            raw.commit()
        except BaseException:
            raw.rollback()
            raise
        finally:
            raw.close()

    def size(self) -> int:
        """Bytes the database takes on disk (0 for a server database: not ours to count)."""
        if self.postgres or not self.path:
            return 0
        return sum(os.path.getsize(p) for p in (self.path, self.path + "-wal") if os.path.exists(p))


class _Conn:
    def __init__(self, raw: Any, postgres: bool) -> None:
        self.raw = raw
        self.postgres = postgres

    def execute(self, sql: str, params: tuple | list = ()) -> Any:
        if self.postgres:
            sql = sql.replace("?", "%s")
        cur = self.raw.cursor()
        cur.execute(sql, tuple(params))
        return cur


def _v1(db: _Conn) -> None:
    # The first release's table, unchanged, so its runs.sqlite3 files open.
    db.execute("""CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY, model_id TEXT, model_name TEXT, backend TEXT, options TEXT,
        device TEXT, executor TEXT, status TEXT, error TEXT, created DOUBLE PRECISION,
        finished DOUBLE PRECISION, result TEXT, chrome_trace TEXT)""")


def _v2(db: _Conn) -> None:
    for column in ("stage TEXT", "progress DOUBLE PRECISION", "message TEXT", "repeat_count BIGINT",
                   "inputs TEXT", "worker TEXT", "owner TEXT", "updated DOUBLE PRECISION"):
        db.execute(f"ALTER TABLE runs ADD COLUMN {column}")
    db.execute("""CREATE TABLE models (
        id TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT NOT NULL, size BIGINT NOT NULL,
        sha256 TEXT NOT NULL, file TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""")
    db.execute("CREATE INDEX runs_model ON runs (model_id)")
    db.execute("CREATE INDEX runs_status ON runs (status)")


def _v3(db: _Conn) -> None:
    # The run history's columns (verdict, shapes, tolerance, median time, runtimes used), kept
    # apart from the result so listing runs never parses every result.
    db.execute("ALTER TABLE runs ADD COLUMN summary TEXT")


def _v4(db: _Conn) -> None:
    # Bundles and --model models are stored models too: their folder under <instance>/bundles.
    db.execute("ALTER TABLE models ADD COLUMN bundle TEXT")


def _v5(db: _Conn) -> None:
    # A stored model's library card (JSON, made from its graph once), so listing the library
    # parses no model: it parsed every stored one, 4 s for 28 models on a fresh server and
    # minutes beside an upload, the library showing "loading..." all that time.
    db.execute("ALTER TABLE models ADD COLUMN card TEXT")


def _v6(db: _Conn) -> None:
    # What a failed run suggests (JSON: the sizes onnxruntime runs, engine/size_probe.py), which
    # the run page offers to run with.
    db.execute("ALTER TABLE runs ADD COLUMN hint TEXT")


#: Schema steps in order; step i brings the store to version i + 1. Append, never edit.
MIGRATIONS: list[Callable[[_Conn], None]] = [_v1, _v2, _v3, _v4, _v5, _v6]


def migrate(database: Database) -> int:
    """Apply the missing migrations (each in its own transaction); the version reached."""
    with database.connect() as db:
        db.execute("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)")
        row = db.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()
    version = int(row["v"] or 0)
    for i in range(version, len(MIGRATIONS)):
        with database.connect() as db:
            # Re-read inside the transaction: another server process may have migrated meanwhile.
            if database.postgres:
                db.execute("LOCK TABLE schema_version IN EXCLUSIVE MODE")
            else:
                db.raw.execute("BEGIN IMMEDIATE")
            now = int(db.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()["v"] or 0)
            if now > i:
                continue
            MIGRATIONS[i](db)
            db.execute("INSERT INTO schema_version (version) VALUES (?)", (i + 1,))
    return len(MIGRATIONS)


def owner_id() -> str:
    """This server process, as written on the runs it starts: ``host:pid:start time``."""
    return f"{socket.gethostname()}:{os.getpid()}:{_started(os.getpid())}"


def _started(pid: int) -> str:
    import psutil
    try:
        return f"{psutil.Process(pid).create_time():.2f}"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "gone"


def _owner_gone(owner: str | None) -> bool:
    """True when the process that started a run is certainly not running any more.

    The process's start time is part of the owner, so a new server that got the old one's
    pid (a container restarting) still counts the old runs as lost."""
    parts = (owner or "").rsplit(":", 2)
    if len(parts) != 3:
        return True
    host, pid, started = parts
    if host != socket.gethostname():
        return False   # another machine's server: its own start-up decides
    try:
        return _started(int(pid)) != started
    except ValueError:
        return True


# ------------------------------------------------------------------ models --
def _stored_card(row: Any) -> dict | None:
    """A models row's library card, None when it has none (yet) or it does not parse."""
    try:
        card = json.loads(row["card"]) if row["card"] else None
    except (ValueError, TypeError):
        return None
    return card if isinstance(card, dict) else None


@dataclass
class ModelEntry:
    id: str
    name: str
    source: str                    # "sample" | "upload" | "preload" | "memory"
    size: int
    path: str | None = None        # the stored file (named by its hash), None for in-memory models
    data: bytes | None = None      # bytes kept for samples and models built in memory
    created: float = field(default_factory=time.time)
    bundle: str | None = None      # a bundle's unpacked folder (the model and its external data)
    _graph: Graph | None = None
    _loader: Callable[[], Graph] | None = None
    _bytes: Callable[[], bytes] | None = None   # a bundle: the model with its external data inline
    card: dict | None = None       # a stored model's library card as stored (ModelStore.card)

    @property
    def graph(self) -> Graph:
        if self._graph is None:
            assert self._loader is not None
            self._graph = self._loader()
        return self._graph

    def model_bytes(self) -> bytes:
        if self.data is not None:
            return self.data
        if self._bytes is not None:
            return self._bytes()
        assert self.path is not None
        with open(self.path, "rb") as f:
            return f.read()


class StoreFull(ApiError):
    def __init__(self, used: int, extra: int, limit: int) -> None:
        super().__init__(f"the store is full: {used} bytes used, {extra} more would pass the limit of {limit} "
                         "bytes; delete models or runs, or raise --store-limit", 507)


class ModelStore:
    """Models by id: samples and memory models in memory, uploads in the database and ``upload_dir``."""

    def __init__(self, upload_dir: str, max_bytes: int, database: Database | None = None,
                 store_limit: int | None = None, max_results: int = 32, bundle_dir: str | None = None,
                 counted_dirs: tuple[str, ...] = ()) -> None:
        self.upload_dir = upload_dir
        #: bundles' folders, one per model id (``app.uploads`` unpacks them there)
        self.bundle_dir = bundle_dir or os.path.join(os.path.dirname(os.path.abspath(upload_dir)), "bundles")
        #: more folders whose files count against --store-limit (unpacked bundles, run inputs)
        self.counted_dirs = counted_dirs
        self.max_bytes = max_bytes
        self.db = database or Database(os.path.join(upload_dir, "models.sqlite3"))
        if database is None:
            migrate(self.db)
        self.store_limit = store_limit
        self.on_delete: list[Callable[[str], None]] = []   # called with the id of a deleted model
        self.on_load: list[Callable[[str, Graph], None]] = []   # a stored model's graph read from disk
        self._memory: dict[str, ModelEntry] = {}
        self._graphs: dict[str, Graph] = {}                 # uploads parsed so far, by id
        self._lock = threading.Lock()
        self._results: OrderedDict[tuple, Any] = OrderedDict()
        self._results_lock = threading.Lock()
        self._max_results = max_results
        _sweep_partial_uploads(upload_dir)

    # ---- models ----
    def load_samples(self) -> list[str]:
        """``sample_models/*.onnx``; built in memory with ``build_all()`` when the files are missing."""
        from partition.onnx_io import load_model
        loaded: list[str] = []
        files = sorted(SAMPLES_DIR.glob("*.onnx"))
        if files:
            for path in files:
                data = path.read_bytes()
                loaded.append(self._add(f"sample-{path.stem}", path.name, load_model(data), "sample", data))
        else:
            from sample_models.generate import build_all
            for name, proto in build_all().items():
                data = proto.SerializeToString()
                loaded.append(self._add(f"sample-{Path(name).stem}", name, load_model(data), "sample", data))
        return loaded

    def _add(self, mid: str, name: str, graph: Graph, source: str, data: bytes) -> str:
        entry = ModelEntry(mid, name, source, len(data), data=data, _graph=graph)
        with self._lock:
            self._memory[mid] = entry
        return mid

    def add_graph(self, name: str, graph: Graph, data: bytes) -> ModelEntry:
        """A model made in memory (tests, benchmarks, the walkthrough): not persisted."""
        mid = secrets.token_hex(8)
        self._add(mid, name, graph, "memory", data)
        return self.get(mid)

    def _loaded(self, mid: str, graph: Graph) -> Graph:
        """A stored model's graph read back from disk: kept, and told to ``on_load`` (the app
        charges it to its memory quota, which evicts through ``forget_graph``; uncharged, every
        model opened since a restart stayed in memory)."""
        with self._lock:
            self._graphs[mid] = graph
        for listener in self.on_load:
            listener(mid, graph)
        return graph

    def forget_graph(self, mid: str) -> None:
        """Drop an uploaded model's imported graph from memory (its client's quota is full); it is
        imported again from its file when next used."""
        with self._lock:
            self._graphs.pop(mid, None)
            entry = self._memory.get(mid)
            if entry is not None and entry._loader is not None:
                entry._graph = None

    def used_bytes(self) -> int:
        """Bytes the store holds on disk: upload files, the database, and every file under
        ``counted_dirs`` (unpacked bundles, stored run inputs)."""
        total = self.db.size()
        if os.path.isdir(self.upload_dir):
            for entry in os.scandir(self.upload_dir):
                if entry.is_file():
                    total += entry.stat().st_size
        for folder in self.counted_dirs:
            for root, _dirs, files in os.walk(folder):
                for name in files:
                    try:
                        total += os.lstat(os.path.join(root, name)).st_size
                    except OSError:
                        pass   # removed meanwhile
        return total

    def check_room(self, extra: int) -> None:
        """Raise ``StoreFull`` (507) when ``extra`` more bytes would pass ``--store-limit``."""
        if self.store_limit is None:
            return
        used = self.used_bytes()
        if used + extra > self.store_limit:
            raise StoreFull(used, extra, self.store_limit)

    def upload(self, filename: str, stream: Any) -> ModelEntry:
        """Store an uploaded file, then load it; a bad file leaves nothing behind."""
        label = _label(filename)
        os.makedirs(self.upload_dir, exist_ok=True)
        room = None if self.store_limit is None else self.store_limit - self.used_bytes()
        fd, tmp = tempfile.mkstemp(prefix=".upload-", suffix=".part", dir=self.upload_dir)
        digest = hashlib.sha256()
        size = 0
        try:
            with os.fdopen(fd, "wb") as out:
                while True:
                    chunk = stream.read(1 << 20)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > self.max_bytes:
                        from partition.errors import ModelTooLargeError
                        raise ModelTooLargeError(f"{label}: over the upload limit of {self.max_bytes} bytes")
                    if room is not None and size > room:
                        raise StoreFull(self.store_limit - room, size, self.store_limit)  # type: ignore[operator]
                    digest.update(chunk)
                    out.write(chunk)
            # Parsed from the stored file; an upload's external data is refused at every level.
            from .uploads import load_upload
            graph = load_upload(tmp, self.max_bytes, label)
        except LensError as exc:
            _unlink(tmp)
            msg = str(exc)
            if msg.startswith("upload:"):
                msg = f"{label}:" + msg[len("upload:"):]
            if isinstance(exc, ApiError):
                raise
            raise type(exc)(msg) from None
        except Exception as exc:  # noqa: BLE001 - any loader failure is the file's fault
            _unlink(tmp)
            raise ApiError(f"{label}: cannot be read as an ONNX model ({type(exc).__name__}: {exc})") from None
        mid = secrets.token_hex(8)
        name = f"{mid}.onnx"
        os.replace(tmp, os.path.join(self.upload_dir, name))   # complete files only under their final name
        with self.db.connect() as db:
            db.execute("INSERT INTO models (id, name, source, size, sha256, file, created) VALUES (?,?,?,?,?,?,?)",
                       (mid, label, "upload", size, digest.hexdigest(), name, time.time()))
        with self._lock:
            self._graphs[mid] = graph
        return self.get(mid)

    def add_bundle(self, mid: str, label: str, model_path: str, graph: Graph, source: str) -> ModelEntry:
        """Record the bundle unpacked in ``<bundle_dir>/<mid>/`` holding ``model_path`` (already loaded as
        ``graph``): a row like an upload's, so it is listed again after a restart with its runs."""
        folder = Path(self.bundle_dir, mid)
        rel = Path(model_path).resolve().relative_to(folder.resolve()).as_posix()
        from .uploads import folder_digest
        size, digest = folder_digest(folder)
        with self.db.connect() as db:
            db.execute("INSERT INTO models (id, name, source, size, sha256, file, created, bundle)"
                       " VALUES (?,?,?,?,?,?,?,?)", (mid, label, source, size, digest, rel, time.time(), mid))
        with self._lock:
            self._graphs[mid] = graph
        return self.get(mid)

    def find_bundle(self, source: str, label: str, digest: str) -> str | None:
        """The id of a stored bundle of ``source`` with this name and content digest, if its folder is there."""
        with self.db.connect() as db:
            rows = db.execute("SELECT id, bundle FROM models WHERE source = ? AND name = ? AND sha256 = ?"
                              " AND bundle IS NOT NULL", (source, label, digest)).fetchall()
        for row in rows:
            if os.path.isdir(os.path.join(self.bundle_dir, row["bundle"])):
                return row["id"]
        return None

    def _bundle_entry(self, row: Any) -> ModelEntry:
        mid = row["id"]
        folder = os.path.join(self.bundle_dir, row["bundle"])
        model_file = Path(folder, row["file"])

        def load() -> Graph:
            from partition.onnx_io import load_model
            with self._lock:
                cached = self._graphs.get(mid)
            if cached is not None:
                return cached
            graph = load_model(model_file, max_bytes=self.max_bytes, data_root=model_file.parent)
            return self._loaded(mid, graph)

        def model_bytes() -> bytes:
            from partition.onnx_io import read_model_proto
            return read_model_proto(model_file, max_bytes=self.max_bytes,
                                    data_root=model_file.parent).SerializeToString()
        with self._lock:
            graph = self._graphs.get(mid)
        return ModelEntry(mid, row["name"], row["source"], int(row["size"]), created=float(row["created"]),
                          bundle=folder, _graph=graph, _loader=load, _bytes=model_bytes,
                          card=_stored_card(row))

    def _entry(self, row: Any) -> ModelEntry:
        if row["bundle"]:
            return self._bundle_entry(row)
        mid = row["id"]
        path = os.path.join(self.upload_dir, row["file"])

        def load() -> Graph:
            from partition.onnx_io import load_model
            with self._lock:
                cached = self._graphs.get(mid)
            if cached is not None:
                return cached
            with open(path, "rb") as f:
                graph = load_model(f.read(), max_bytes=self.max_bytes)
            return self._loaded(mid, graph)
        with self._lock:
            graph = self._graphs.get(mid)
        return ModelEntry(mid, row["name"], row["source"], int(row["size"]), path=path,
                          created=float(row["created"]), _graph=graph, _loader=load, card=_stored_card(row))

    def get(self, mid: str) -> ModelEntry:
        with self._lock:
            entry = self._memory.get(mid)
        if entry is not None:
            return entry
        with self.db.connect() as db:
            row = db.execute("SELECT * FROM models WHERE id = ?", (mid,)).fetchone()
        if row is None:
            raise ApiError(f"no model with id '{mid}'; GET /api/models lists them", 404)
        return self._entry(row)

    def card(self, entry: ModelEntry, make: Callable[[Graph], dict], version: int) -> dict:
        """``entry``'s library card: as stored when its ``version`` matches, else ``make(entry.graph)``
        (parsing the model once), stored for the next listing. Models kept in memory (samples)
        have no row: theirs is made each time from the graph they hold."""
        if entry.card is not None and entry.card.get("version") == version:
            return entry.card
        try:
            graph = entry.graph
        except Exception as exc:  # noqa: BLE001 - one unreadable stored model must not hide the library
            reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
            return {"version": version, "error": f"the stored model cannot be read: {reason}"}
        card = {**make(graph), "version": version}
        if entry.source != "sample" and entry.id not in self._memory:
            with self.db.connect() as db:
                db.execute("UPDATE models SET card = ? WHERE id = ?", (json.dumps(card), entry.id))
        entry.card = card
        return card

    def list(self) -> list[ModelEntry]:
        with self._lock:
            items = list(self._memory.values())
        with self.db.connect() as db:
            rows = db.execute("SELECT * FROM models").fetchall()
        items += [self._entry(r) for r in rows]
        return sorted(items, key=lambda e: (e.source != "sample", e.created, e.name))

    def delete(self, mid: str) -> None:
        """Forget the model, delete its file, tell the listeners (the runner cancels its queued runs)."""
        entry = self.get(mid)
        with self._lock:
            self._memory.pop(mid, None)
            self._graphs.pop(mid, None)
        if entry.path or entry.bundle:
            with self.db.connect() as db:
                db.execute("DELETE FROM models WHERE id = ?", (mid,))
        if entry.path:
            _unlink(entry.path)
        if entry.bundle:
            import shutil
            shutil.rmtree(entry.bundle, ignore_errors=True)
        with self._results_lock:
            for key in [k for k in self._results if k and k[0] == mid]:
                del self._results[key]
        for listener in self.on_delete:
            listener(mid)

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


def _sweep_partial_uploads(upload_dir: str, older_than: float = 3600.0) -> None:
    """Remove uploads a crashed server left half-written (old enough that no live upload owns them)."""
    if not os.path.isdir(upload_dir):
        return
    cutoff = time.time() - older_than
    for entry in os.scandir(upload_dir):
        if entry.name.startswith(".upload-") and entry.name.endswith(".part") and entry.stat().st_mtime < cutoff:
            _unlink(entry.path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -------------------------------------------------------------------- runs --
_META = ("id, model_id, model_name, backend, options, device, executor, status, error, created, finished,"
         " stage, progress, message, repeat_count, inputs, worker, summary, hint")


class RunStore:
    """Every run from submission to its end; any server process sharing the database sees them."""

    def __init__(self, database: Database | str) -> None:
        self.db = database if isinstance(database, Database) else Database(database)
        migrate(self.db)

    def create(self, run: dict[str, Any]) -> None:
        """A new run (status ``queued``), written before it is handed to a worker."""
        with self.db.connect() as db:
            db.execute("INSERT INTO runs (id, model_id, model_name, backend, options, device, executor, status,"
                       " created, stage, progress, message, repeat_count, inputs, owner, updated)"
                       " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                       (run["id"], run["model_id"], run["model_name"], run["backend"], json.dumps(run["options"]),
                        run["device"], run["executor"], run.get("status", "queued"), run["created"],
                        run.get("stage", "queued"), run.get("progress", 0.0), run.get("message"),
                        run.get("repeat"), json.dumps(run.get("inputs")), owner_id(), time.time()))

    def update(self, rid: str, **fields: Any) -> None:
        """Set some of status, stage, progress, message, error, worker, options, finished of a run in
        flight; a run that has ended is never changed (a late progress write cannot undo its end)."""
        allowed = {"status", "stage", "progress", "message", "error", "worker", "finished", "options", "inputs"}
        cols = [k for k in fields if k in allowed]
        if not cols:
            return
        values = [json.dumps(fields[k]) if k in ("options", "inputs") else fields[k] for k in cols]
        with self.db.connect() as db:
            db.execute(f"UPDATE runs SET {', '.join(c + ' = ?' for c in cols)}, updated = ?"
                       " WHERE id = ? AND status IN (?, ?)", (*values, time.time(), rid, *IN_FLIGHT))

    def save(self, run: dict[str, Any], result: dict[str, Any] | None, chrome_trace: Any | None) -> None:
        """The end of a run: its status, error, result and trace (the row is made if missing)."""
        from .serialize import run_summary
        summary = run_summary(result)
        with self.db.connect() as db:
            db.execute(
                "INSERT INTO runs (id, model_id, model_name, backend, options, device, executor, status, error,"
                " created, finished, result, chrome_trace, stage, progress, message, owner, updated, summary, hint)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET"
                " options = excluded.options, status = excluded.status, error = excluded.error, hint = excluded.hint,"
                " finished = excluded.finished, result = excluded.result, chrome_trace = excluded.chrome_trace,"
                " stage = excluded.stage, progress = excluded.progress, message = excluded.message,"
                " updated = excluded.updated, summary = excluded.summary"
                " WHERE runs.status IN (?, ?)",   # an end is final (run_states)
                (run["id"], run["model_id"], run["model_name"], run["backend"], json.dumps(run["options"]),
                 run["device"], run["executor"], run["status"], run.get("error"), run["created"],
                 run.get("finished"), json.dumps(result, default=str) if result is not None else None,
                 json.dumps(chrome_trace) if chrome_trace is not None else None,
                 run.get("stage", run["status"]), run.get("progress", 1.0 if run["status"] == "done" else 0.0),
                 run.get("message"), owner_id(), time.time(),
                 json.dumps(summary, default=str) if summary is not None else None,
                 json.dumps(run["hint"]) if run.get("hint") else None, *IN_FLIGHT))

    def list(self, limit: int = 200) -> list[dict[str, Any]]:
        with self.db.connect() as db:
            rows = db.execute(f"SELECT {_META} FROM runs ORDER BY created DESC LIMIT ?", (limit,)).fetchall()
        runs = [self._meta(r) for r in rows]
        # Runs finished before the summary column existed get theirs once, a few per listing.
        for run in [r for r in runs if r["status"] == "done" and r["summary"] is None][:10]:
            run["summary"] = self._backfill_summary(run["id"])
        return runs

    def _backfill_summary(self, rid: str) -> dict[str, Any] | None:
        from .serialize import run_summary
        with self.db.connect() as db:
            row = db.execute("SELECT result FROM runs WHERE id = ?", (rid,)).fetchone()
            summary = run_summary(json.loads(row["result"])) if row and row["result"] else None
            if summary is not None:
                db.execute("UPDATE runs SET summary = ? WHERE id = ?", (json.dumps(summary, default=str), rid))
        return summary

    def get(self, rid: str) -> dict[str, Any] | None:
        with self.db.connect() as db:
            row = db.execute(f"SELECT {_META}, result FROM runs WHERE id = ?", (rid,)).fetchone()
        if row is None:
            return None
        data = self._meta(row)
        data["result"] = json.loads(row["result"]) if row["result"] else None
        return data

    def mark_interrupted(self) -> list[str]:
        """At start-up: runs left in flight by a server process that is gone end: a running one
        ``interrupted``, a queued one ``failed`` as never started (``run_states.lost_with_server``)."""
        with self.db.connect() as db:
            rows = db.execute("SELECT id, owner, status FROM runs WHERE status IN (?, ?)", IN_FLIGHT).fetchall()
        lost = [r for r in rows if _owner_gone(r["owner"])]
        for row in lost:
            status, error, message = lost_with_server(row["status"])
            self.update(row["id"], status=status, stage=status, finished=time.time(), error=error, message=message)
        return [r["id"] for r in lost]

    def chrome_trace(self, rid: str) -> str | None:
        with self.db.connect() as db:
            row = db.execute("SELECT chrome_trace FROM runs WHERE id = ?", (rid,)).fetchone()
        return row["chrome_trace"] if row else None

    @staticmethod
    def _meta(row: Any) -> dict[str, Any]:
        return {"id": row["id"], "model_id": row["model_id"], "model_name": row["model_name"],
                "backend": row["backend"], "options": json.loads(row["options"] or "{}"),
                "device": row["device"], "executor": row["executor"], "status": row["status"],
                "error": row["error"], "created": row["created"], "finished": row["finished"],
                "stage": row["stage"] or row["status"], "progress": row["progress"],
                "message": row["message"] or "", "repeat": row["repeat_count"],
                "inputs": json.loads(row["inputs"]) if row["inputs"] else None, "worker": row["worker"],
                "summary": json.loads(row["summary"]) if row["summary"] else None,
                "hint": json.loads(row["hint"]) if row["hint"] else None}
