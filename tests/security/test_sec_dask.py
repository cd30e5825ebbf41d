"""The Dask ports of a default ``sglens serve`` (issue 21: "anyone on the machine runs code as the
server"): another local process, without the server's credentials, must get no connection to the
scheduler, the nannies or the workers, and so run nothing; and the ``--scheduler`` flags refuse a
plain TCP cluster off loopback.

Before TLS, ``distributed.Client("tcp://127.0.0.1:<scheduler port>")`` from any process ran
``submit`` on the worker and ``run_on_scheduler`` inside the web server itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from sec_server import ROOT, SGLENS, start_server, stop_server

pytestmark = pytest.mark.slow

ATTACKER = textwrap.dedent('''
    import json, os, sys
    from concurrent.futures import ThreadPoolExecutor, wait
    from distributed import Client
    from distributed.security import Security

    marker_dir, ports = sys.argv[1], json.loads(sys.argv[2])

    def touch(tag):
        import os
        with open(os.path.join(marker_dir, f"{tag}-{os.getpid()}"), "w") as f:
            f.write("ran as the server's cluster")
        return os.getpid()

    def attack(address, security):
        try:
            client = Client(address, security=security, timeout=5)
        except Exception as exc:
            return "refused: " + type(exc).__name__
        done = []
        for how, call in (("submit", lambda: client.submit(touch, "submit", pure=False).result(timeout=10)),
                          ("run", lambda: client.run(touch, "run")),
                          ("run_on_scheduler", lambda: client.run_on_scheduler(touch, "scheduler"))):
            try:
                done.append(f"{how} -> {call()}")
            except Exception as exc:
                done.append(f"{how} failed: {type(exc).__name__}")
        return "connected: " + "; ".join(done)

    own = Security.temporary()          # a certificate of the attacker's own making
    attempts = {f"{scheme}://127.0.0.1:{port} {name}": (f"{scheme}://127.0.0.1:{port}", security)
                for port in ports
                for scheme, name, security in (("tcp", "no-cert", None), ("tls", "no-cert", None),
                                               ("tls", "own-cert", own))}
    with ThreadPoolExecutor(len(attempts)) as pool:
        futures = {key: pool.submit(attack, *args) for key, args in attempts.items()}
        # one deadline for all (they run at once): a wait of 30 s per silent port, one after the
        # other, added up past the parent's timeout on a loaded CI machine
        wait(futures.values(), timeout=60)
        results = {}
        for key, future in futures.items():
            if future.done():
                results[key] = future.result()
            else:                        # a port that never answers the handshake
                results[key] = "refused: no answer (TimeoutError)"
        print(json.dumps(results), flush=True)
        os._exit(0)                      # threads stuck on a silent port are not waited for
''')


def _listening_ports(pid: int, exclude: int) -> list[int]:
    """TCP ports the server process and its children (nannies, workers) listen on."""
    root = psutil.Process(pid)
    ports = set()
    for proc in [root, *root.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="tcp")
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        ports |= {c.laddr.port for c in conns if c.status == psutil.CONN_LISTEN}
    return sorted(ports - {exclude})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("dask_served")
    srv = start_server(cwd, "--samples", "--instance", str(cwd / "instance"), "--worker-memory", "1GiB")
    yield srv
    stop_server(srv)


def _wait_run(srv, rid: str, timeout: float = 180) -> dict:
    end = time.time() + timeout
    while time.time() < end:
        run = srv.request("GET", f"/api/runs/{rid}").json()
        if run["status"] in ("done", "failed", "cancelled", "interrupted"):
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {rid} did not end")


def test_a_local_process_without_the_credentials_runs_nothing_on_the_cluster(served, tmp_path):
    srv = served
    # a run first: the worker is up and known to be on TLS
    reply = srv.request("POST", "/api/runs", {"model": "sample-trt_cycle", "backend": "tensorrt"})
    assert reply.status == 202, reply.body
    run = _wait_run(srv, reply.json()["id"])
    assert run["status"] == "done" and run["worker"].startswith("tls://127.0.0.1:"), run
    ports = _listening_ports(srv.proc.pid, srv.port)
    assert len(ports) >= 3, ports      # the scheduler, a nanny and a worker at least (no dashboards)
    markers = tmp_path / "markers"
    markers.mkdir()
    out = subprocess.run([sys.executable, "-c", ATTACKER, str(markers), json.dumps(ports)], capture_output=True,
                         text=True, timeout=240, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stderr[-3000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(results) == 3 * len(ports)
    assert all(v.startswith("refused") for v in results.values()), results
    assert list(markers.iterdir()) == []               # nothing ran: not on a worker, not in the server
    # and the server's own runs still go through
    reply = srv.request("POST", "/api/runs", {"model": "sample-trt_cycle", "backend": "default", "ops": ["Relu"]})
    assert _wait_run(srv, reply.json()["id"])["status"] == "done"


@pytest.mark.parametrize("flags, says", [
    (["--scheduler", "tcp://10.20.30.40:8786"], "is plain TCP off this machine"),
    (["--scheduler", "tcp://[2001:db8::1]:8786"], "is plain TCP off this machine"),
    (["--scheduler", "tls://10.20.30.40:8786"], "pass --tls-ca-file"),
    (["--scheduler", "tls://10.20.30.40:8786", "--tls-ca-file", "ca.pem", "--tls-cert", "c.pem",
      "--tls-key", "k.pem"], "--tls-ca-file ca.pem: not a readable file"),
    (["--scheduler", "tls://10.20.30.40:8786", "--tls-cert", "c.pem"], "needs all of --tls-ca-file"),
    (["--tls-ca-file", "ca.pem"], "go with --scheduler ADDRESS"),
    (["--insecure-scheduler"], "go with --scheduler ADDRESS"),
])
def test_an_unsafe_or_incomplete_scheduler_setting_is_one_line_and_exit_2(tmp_path, flags, says):
    out = subprocess.run([*SGLENS, "serve", "--port", "0", *flags], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 2, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglens serve: ") and says in lines[0], out.stderr


# ------------------------------------------------------ a tls:// scheduler --
def _make_tls_files(folder: Path) -> tuple[str, str, str]:
    """A CA, and one certificate + key it signed (scheduler, workers and the server share it here;
    docs/deploy.md makes the same with openssl)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("sglens test CA")).issuer_name(name("sglens test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder().subject_name(name("sglens cluster")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "cert.pem", folder / "key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    paths[2].chmod(0o600)
    return tuple(str(p) for p in paths)  # type: ignore[return-value]


def test_a_tls_scheduler_with_certificate_files_runs_and_refuses_strangers(tmp_path):
    ca, cert, key = _make_tls_files(tmp_path)
    tls = ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]
    dask_cli = str(Path(sys.executable).with_name("dask"))
    env = {**os.environ, "DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "0", "PYTHONPATH": str(ROOT)}
    sched_file = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([dask_cli, "scheduler", "--protocol", "tls", "--host", "127.0.0.1", "--port", "0",
                               "--no-dashboard", "--scheduler-file", str(sched_file), *tls], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    srv = None
    try:
        address = None
        deadline = time.time() + 60
        while address is None and time.time() < deadline:
            try:
                address = json.loads(sched_file.read_text())["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)
        assert address and address.startswith("tls://127.0.0.1:"), address
        procs.append(subprocess.Popen([dask_cli, "worker", address, "--nthreads", "1", "--no-dashboard", *tls],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        srv = start_server(tmp_path, "--samples", "--instance", str(tmp_path / "instance"),
                           "--scheduler", address, *tls)
        reply = srv.request("POST", "/api/runs", {"model": "sample-trt_cycle", "backend": "tensorrt"})
        assert reply.status == 202, reply.body
        run = _wait_run(srv, reply.json()["id"])
        assert run["status"] == "done" and run["worker"].startswith("tls://127.0.0.1:"), run
        markers = tmp_path / "markers"
        markers.mkdir()
        port = int(address.rsplit(":", 1)[1])
        out = subprocess.run([sys.executable, "-c", ATTACKER, str(markers), json.dumps([port])], capture_output=True,
                             text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
        results = json.loads(out.stdout.strip().splitlines()[-1])
        assert len(results) == 3 and all(v.startswith("refused") for v in results.values()), results
        assert list(markers.iterdir()) == []
    finally:
        if srv is not None:
            stop_server(srv)
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
