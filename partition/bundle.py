"""Model bundles: an ``.onnx`` file together with its external-data files.

Above 2 GB, and often below, a model is ``model.onnx`` plus ``model.onnx.data`` (or a
folder of weight files). A bundle is how such a model reaches us: several files in
one upload, or one ``.zip`` / ``.tar`` (``.tar.gz``, ``.tgz``) of the model's folder.
Every bundle is unpacked into a fresh folder of its own, and the model is then loaded
with ``data_root`` set to that folder, so its external data can come from nowhere else.

Unpacking is where archives attack: member names with ``..`` or an absolute path
(zip-slip), links pointing out, device files, and bombs that inflate a few KiB into
many GiB. Tar archives go through the standard library's ``data`` extraction filter
(Python >= 3.11.4), which refuses all of those; zip members are checked by name, and
both are counted against a byte and a file budget while they are written, so a bomb
stops at the budget instead of filling the disk.

Headers attack memory before any member is written: tarfile reads a GNU long-name or a
pax header into memory whole, whatever size it declares (a 1.5 KB bzip2 tar can declare a
GiB of zeros), and zipfile reads the whole central directory. So every declared size is
checked before it is read: a tar extended header over ``MAX_HEADER_BYTES`` (or more of them
than ``MAX_HEADER_CHAIN`` in a row, or ``MAX_HEADER_TOTAL`` in all), a name over
``MAX_NAME_BYTES``, a member larger than the budget left, a zip whose central directory
counts more entries than ``MAX_FILES`` or whose declared sizes add up past the budget.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterable

from .errors import ModelError

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
#: Entries of a bundle at most (files and folders).
MAX_FILES = 10_000
#: Largest tar extended header (GNU long name or link, pax): real ones hold a path or two.
MAX_HEADER_BYTES = 64 << 10
#: Extended headers in a row before one member (tarfile reads each chain recursively).
MAX_HEADER_CHAIN = 8
#: Extended header bytes in one archive (global pax headers accumulate).
MAX_HEADER_TOTAL = 4 << 20
#: Longest member name.
MAX_NAME_BYTES = 4096
_CHUNK = 1 << 20
_EXTENDED = frozenset({tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                       tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE})


def is_archive(name: str) -> bool:
    return name.lower().endswith(ARCHIVE_SUFFIXES)


def _safe_relative(name: str) -> PurePosixPath:
    """A member name as a relative path inside the bundle, or a ModelError."""
    path = PurePosixPath(name.replace("\\", "/"))
    if not name or path.is_absolute() or ".." in path.parts or (path.parts and ":" in path.parts[0]):
        raise ModelError(f"bundle member '{name}' points outside the bundle; refused")
    return path


class _Budget:
    def __init__(self, max_bytes: int, max_files: int = MAX_FILES) -> None:
        self.left, self.files_left = max_bytes, max_files

    def file(self, name: str) -> None:
        self.files_left -= 1
        if self.files_left < 0:
            raise ModelError(f"bundle has more than {MAX_FILES} files; refused")
        if len(name.encode("utf-8", "replace")) > MAX_NAME_BYTES:
            raise ModelError(f"bundle member name '{name[:60]}...' is longer than {MAX_NAME_BYTES} bytes; refused")

    def declared(self, name: str, size: int) -> None:
        """A member's size as its header declares it, checked before a byte of it is read."""
        if size > self.left:
            raise ModelError(f"bundle member '{name[:120]}' declares {size} bytes, more than the upload limit "
                             "leaves; refused (raise --max-upload if the model really is that large)")

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise ModelError("bundle unpacks to more than the upload limit; refused "
                             "(raise --max-upload if the model really is that large)")


def _copy(src: BinaryIO, dest: Path, budget: _Budget) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "xb") as out:
        while chunk := src.read(_CHUNK):
            budget.take(len(chunk))
            out.write(chunk)


def stage_files(files: Iterable[tuple[str, BinaryIO]], dest: Path, max_bytes: int) -> Path:
    """Several uploaded files (name, stream) written into ``dest``; returns the model's path."""
    budget = _Budget(max_bytes)
    dest.mkdir(parents=True, exist_ok=True)
    for name, stream in files:
        budget.file(name)
        rel = _safe_relative(name)
        target = dest / rel
        if target.exists():
            raise ModelError(f"bundle has two files named '{rel}'")
        _copy(stream, target, budget)
    return find_model(dest)


def extract_archive(archive: Path, dest: Path, max_bytes: int) -> Path:
    """Unpack a .zip or .tar bundle into ``dest`` (created); returns the model's path."""
    dest.mkdir(parents=True, exist_ok=True)
    budget = _Budget(max_bytes)
    name = archive.name.lower()
    try:
        if name.endswith(".zip"):
            _extract_zip(archive, dest, budget)
        else:
            _extract_tar(archive, dest, budget)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError, zlib.error, NotImplementedError,
            RuntimeError, ValueError) as exc:
        # corrupt deflate data (zlib.error), an unknown compression method (NotImplementedError),
        # an encrypted member (RuntimeError), a bad header field (ValueError): the archive's fault
        shutil.rmtree(dest, ignore_errors=True)
        reason = type(exc).__name__ if isinstance(exc, OSError) else str(exc)[:200]
        raise ModelError(f"'{archive.name}' is not a readable archive ({reason})") from None
    except ModelError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return find_model(dest)


def _zip_entries(archive: Path) -> int | None:
    """The entry count the zip's end record declares (zipfile parses every entry on open)."""
    with open(archive, "rb") as f:
        end = zipfile._EndRecData(f)  # the reader zipfile itself uses; stable since Python 2
    return None if end is None else int(end[zipfile._ECD_ENTRIES_TOTAL])


def _extract_zip(archive: Path, dest: Path, budget: _Budget) -> None:
    entries = _zip_entries(archive)
    if entries is not None and entries > MAX_FILES:
        raise ModelError(f"bundle has {entries} entries, more than {MAX_FILES}; refused")
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()
        declared = sum(i.file_size for i in infos)
        if declared > budget.left:
            raise ModelError(f"bundle's members declare {declared} bytes in all, more than the upload limit; "
                             "refused (raise --max-upload if the model really is that large)")
        for info in infos:
            rel = _safe_relative(info.filename)
            if info.is_dir():
                continue
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise ModelError(f"bundle member '{info.filename}' is a symbolic link; refused")
            budget.file(info.filename)
            with zf.open(info) as src:  # sizes counted as written, not as the header claims
                _copy(src, dest / rel, budget)


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header that refuses, before reading it, an extended header (GNU long name or link,
    pax) over ``MAX_HEADER_BYTES``, a chain of them longer than ``MAX_HEADER_CHAIN``, more than
    ``MAX_HEADER_TOTAL`` of them in one archive, and old GNU sparse members."""

    def _proc_member(self, tf: tarfile.TarFile):  # tarfile's one dispatch point per header
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise ModelError("bundle member is a GNU sparse file; refused (archive the model as plain files)")
        if self.type not in _EXTENDED:
            return super()._proc_member(tf)
        if self.size > MAX_HEADER_BYTES:
            raise ModelError(f"bundle has a tar extended header (long name or pax) that declares {self.size} "
                             f"bytes, over the limit of {MAX_HEADER_BYTES}; refused")
        chain = getattr(tf, "_sglens_chain", 0) + 1
        total = getattr(tf, "_sglens_header_bytes", 0) + self.size
        if chain > MAX_HEADER_CHAIN or total > MAX_HEADER_TOTAL:
            raise ModelError("bundle has too many tar extended headers (long names or pax); refused")
        tf._sglens_chain, tf._sglens_header_bytes = chain, total   # type: ignore[attr-defined]
        try:
            return super()._proc_member(tf)
        finally:
            tf._sglens_chain = chain - 1   # type: ignore[attr-defined]


def _extract_tar(archive: Path, dest: Path, budget: _Budget) -> None:
    with tarfile.open(archive, tarinfo=_BoundedTarInfo) as tf:
        for member in tf:
            budget.file(member.name)   # folders count too: tarfile keeps every header in memory
            _safe_relative(member.name)
            if member.issym() or member.islnk():
                raise ModelError(f"bundle member '{member.name}' is a link; refused")
            if member.isdir():
                continue
            if not member.isfile():
                raise ModelError(f"bundle member '{member.name}' is not a regular file; refused")
            budget.declared(member.name, member.size)
            checked = tarfile.data_filter(member, str(dest))  # the standard library's own guard
            src = tf.extractfile(checked)
            if src is None:
                continue
            with src:
                _copy(src, dest / _safe_relative(checked.name), budget)


#: .onnx files named in the message about a folder holding several
_NAMED = 10


def find_model(folder: Path, advice: str = "upload one model per bundle") -> Path:
    """The one ``.onnx`` file in an unpacked bundle or a model folder (at any depth).

    The walk is bounded: it stops once it has seen more ``.onnx`` files than the message
    names, and refuses a folder of more than ``MAX_FILES`` files -- a command line given a
    home directory had walked all of it. Links are not followed (``os.walk``'s default)."""
    found: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()   # a deterministic order: the same folder names the same files
        for name in sorted(files):
            seen += 1
            if seen > MAX_FILES:
                raise ModelError(f"more than {MAX_FILES} files under the folder; give the model's "
                                 ".onnx file itself")
            path = Path(root) / name
            if name.endswith(".onnx") and path.is_file() and not path.is_symlink():
                found.append(path)
        if len(found) > _NAMED:
            break
    if not found:
        raise ModelError("bundle has no .onnx file; include the model with its data files")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found[:_NAMED])
        count = f"more than {_NAMED}" if len(found) > _NAMED else str(len(found))
        raise ModelError(f"bundle has {count} .onnx files ({names}); {advice}")
    return found[0]


def open_model_path(path: str | Path, max_bytes: int, unpack_to: Path | None = None) -> tuple[Path, Path]:
    """(the .onnx file, the folder its external data may come from) for a model given on the
    command line as a ``.onnx`` file, a model folder, or a ``.zip``/``.tar`` bundle.

    An archive is unpacked into ``unpack_to`` (created), else into a temp folder removed when
    the process exits. A folder or an archive must hold exactly one ``.onnx`` file.
    """
    p = Path(path)
    if p.is_dir():
        try:
            return find_model(p, "give the model's .onnx file itself"), p
        except ModelError as exc:
            raise ModelError(f"{p}: is a directory, and a model folder must hold one .onnx file: {exc}") from None
    if is_archive(p.name):
        if not p.is_file():
            raise ModelError(f"{p}: no such archive")
        if unpack_to is None:
            import atexit
            import tempfile
            unpack_to = Path(tempfile.mkdtemp(prefix="sglens-bundle-"))
            atexit.register(shutil.rmtree, unpack_to, True)
        model = extract_archive(p, unpack_to, max_bytes)
        return model, model.parent
    return p, p.parent
