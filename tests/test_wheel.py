"""Installable like any package: build a wheel, install it into a fresh venv, serve from another folder.

No network and a few seconds: the wheel is built with this environment's
setuptools and wheel (``--no-build-isolation``) from a copy of the source
(the checkout stays clean); the fresh venv gets only the wheel (``--no-deps``,
installed with this environment's pip via ``pip --python``), and finds the
third-party dependencies through a ``.pth`` line naming this environment's
site-packages. A path in a ``.pth`` file is appended to ``sys.path`` but the
``.pth`` files inside it are not run, so this environment's editable install
(which points at the checkout) stays invisible: the venv's own site-packages
comes first and holds the installed ``app``, ``engine``, ``partition`` and
``sglens``; the test checks that they were imported from there.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "README.md", "app", "engine", "partition", "sample_models", "sglens", "static",
           "templates")
PACKAGES = ("app", "engine", "partition", "sample_models", "sglens")


def _run(*args: str, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(list(args), capture_output=True, text=True, timeout=240, **kw)
    assert out.returncode == 0, f"{' '.join(args)}\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}"
    return out


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(path, src / name)
    out = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
         str(src))
    (found,) = out.glob("subgraph_lens-*.whl")
    return found


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel: Path) -> Path:
    env_dir = tmp_path_factory.mktemp("venv")
    _run(sys.executable, "-m", "venv", "--without-pip", str(env_dir))
    python = env_dir / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel))
    purelib = _run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    ours = [p for p in site.getsitepackages() if Path(p).is_dir()]
    Path(purelib, "zz_parent_deps.pth").write_text("\n".join(ours) + "\n")
    return env_dir


def test_wheel_holds_every_module_and_the_web_assets(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [str(p.relative_to(ROOT)) for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
               if "__pycache__" not in p.parts and str(p.relative_to(ROOT)) not in names]
    assert not missing, f"not in the wheel (add the package to pyproject's list): {missing}"
    for folder in ("static", "templates"):
        for p in (ROOT / folder).rglob("*"):
            if p.is_file():
                assert f"app/{p.relative_to(ROOT)}" in names
    assert {"partition/data/tensorrt_10.1.json", "partition/data/tensorrt_10.0.json"} <= names


def test_installed_sglens_serves_pages_and_static_files(venv: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONUNBUFFERED"] = "1"
    where = _run(str(venv / "bin" / "python"), "-c",
                 "import app, engine, partition, sglens; print(app.__file__, sglens.__file__)",
                 cwd=tmp_path, env=env).stdout
    assert str(ROOT) not in where and str(venv) in where, where
    proc = subprocess.Popen([str(venv / "bin" / "sglens"), "serve", "--port", "0", "--samples",
                             "--instance", str(tmp_path / "inst")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = _url(proc)
        for path, needle in (("/", "Subgraph Lens"), ("/static/style.css", "{"), ("/static/common.js", "")):
            with urllib.request.urlopen(url + path, timeout=30) as resp:
                body = resp.read().decode()
                assert resp.status == 200 and needle in body, path
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def _url(proc: subprocess.Popen) -> str:
    """The URL ``sglens serve`` prints once it listens (its stderr is drained so it never blocks)."""
    assert proc.stdout is not None and proc.stderr is not None
    errors: list[str] = []
    threading.Thread(target=lambda: errors.append(proc.stderr.read()), daemon=True).start()
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stdout.readline()
        if "http://" in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return line.split()[2].rstrip("/")
        if proc.poll() is not None:
            break
    proc.kill()
    proc.wait(10)
    raise AssertionError(f"sglens serve did not start: {''.join(errors)[-2000:]}")
