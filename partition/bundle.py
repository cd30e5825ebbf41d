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
"""

from __future__ import annotations

import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterable

from .errors import ModelError

ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
MAX_FILES = 10_000
_CHUNK = 1 << 20


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
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        reason = type(exc).__name__ if isinstance(exc, OSError) else str(exc)[:200]
        raise ModelError(f"'{archive.name}' is not a readable archive ({reason})") from None
    except ModelError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return find_model(dest)


def _extract_zip(archive: Path, dest: Path, budget: _Budget) -> None:
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            rel = _safe_relative(info.filename)
            if info.is_dir():
                continue
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise ModelError(f"bundle member '{info.filename}' is a symbolic link; refused")
            budget.file(info.filename)
            with zf.open(info) as src:  # sizes counted as written, not as the header claims
                _copy(src, dest / rel, budget)


def _extract_tar(archive: Path, dest: Path, budget: _Budget) -> None:
    with tarfile.open(archive) as tf:
        for member in tf:
            _safe_relative(member.name)
            if member.issym() or member.islnk():
                raise ModelError(f"bundle member '{member.name}' is a link; refused")
            if member.isdir():
                continue
            if not member.isfile():
                raise ModelError(f"bundle member '{member.name}' is not a regular file; refused")
            budget.file(member.name)
            checked = tarfile.data_filter(member, str(dest))  # the standard library's own guard
            src = tf.extractfile(checked)
            if src is None:
                continue
            with src:
                _copy(src, dest / _safe_relative(checked.name), budget)


def find_model(folder: Path) -> Path:
    """The one ``.onnx`` file in an unpacked bundle (at any depth)."""
    found = sorted(p for p in folder.rglob("*.onnx") if p.is_file() and not p.is_symlink())
    if not found:
        raise ModelError("bundle has no .onnx file; include the model with its data files")
    if len(found) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in found[:10])
        raise ModelError(f"bundle has {len(found)} .onnx files ({names}); upload one model per bundle")
    return found[0]
