"""Who may talk to the Dask cluster that runs our runs: Dask's own TLS with mutual authentication.

Anyone who can open a connection to a Dask scheduler without credentials can run any Python
code on its workers (``submit``, ``run``) and in the scheduler's process (``run_on_scheduler``);
the local cluster's scheduler lives in the web server's process, next to the access token, the
store and every upload (issue 21). So:

- the local cluster (``sglens serve`` without ``--scheduler``) uses ``Security.temporary()``:
  a fresh CA and certificate made in memory at each start, held by this process and handed to
  the workers it spawns. Every connection is TLS and both ends must present a certificate of
  that CA; nobody else has it, so nobody else's client gets a connection.
- ``--scheduler tls://HOST:PORT`` takes the cluster's CA file and this server's certificate and
  key (``--tls-ca-file``, ``--tls-cert``, ``--tls-key``); ``docs/deploy.md`` shows how to make them.
- ``--scheduler tcp://HOST:PORT`` is plain TCP: accepted on loopback (the same machine's users
  are then trusted, and a warning says so), refused off loopback unless ``--insecure-scheduler``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from partition.errors import LensError


class SchedulerSecurityError(LensError):
    """The ``--scheduler`` address and the TLS flags do not make a safe, complete configuration."""


@dataclass(frozen=True)
class TlsFiles:
    """PEM files for a ``tls://`` scheduler: the cluster's CA, this client's certificate and key."""

    ca_file: str
    cert: str
    key: str

    def security(self) -> Any:
        from distributed.security import Security
        return Security(tls_ca_file=self.ca_file, tls_client_cert=self.cert, tls_client_key=self.key,
                        require_encryption=True)


def local_security() -> Any:
    """Credentials for the local cluster: a temporary CA and certificate, in memory only."""
    from distributed.security import Security
    try:
        return Security.temporary()
    except ImportError as exc:   # Security.temporary needs the `cryptography` package
        raise SchedulerSecurityError(f"the local Dask cluster needs TLS credentials and cannot make them: {exc}; "
                                     "install the 'cryptography' package") from None


def _loopback(host: str) -> bool:
    from .security import is_loopback
    return host == "localhost" or is_loopback(host)


def scheduler_security(address: str, tls: TlsFiles | None, insecure: bool) -> tuple[Any, list[str]]:
    """The ``Security`` for ``--scheduler address`` (None = plain TCP) and warnings to print,
    or ``SchedulerSecurityError`` naming what to change."""
    scheme, host = urlsplit(address).scheme, urlsplit(address).hostname or ""
    if scheme == "tls":
        if tls is None:
            raise SchedulerSecurityError(
                f"--scheduler {address} is TLS: pass --tls-ca-file (the cluster's CA), --tls-cert and "
                "--tls-key (this server's certificate and key); docs/deploy.md shows how to make them")
        for flag, path in (("--tls-ca-file", tls.ca_file), ("--tls-cert", tls.cert), ("--tls-key", tls.key)):
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                raise SchedulerSecurityError(f"{flag} {path}: not a readable file")
        return tls.security(), []
    if tls is not None:
        raise SchedulerSecurityError(f"--tls-ca-file/--tls-cert/--tls-key are for a tls:// scheduler; "
                                     f"--scheduler {address} is plain TCP: use tls://{address.split('://', 1)[-1]}")
    if _loopback(host):
        return None, [f"sglens serve: warning: --scheduler {address} is plain TCP: every user of this machine "
                      "can run code on its workers; use tls:// (docs/deploy.md)"]
    if not insecure:
        raise SchedulerSecurityError(
            f"--scheduler {address} is plain TCP off this machine: anyone who can reach it runs code on its "
            "workers and reads every model sent to them. Use tls:// with --tls-ca-file, --tls-cert and "
            "--tls-key (docs/deploy.md), or pass --insecure-scheduler on a network only you can reach")
    return None, [f"sglens serve: warning: --insecure-scheduler: {address} is plain TCP; anyone who can reach it "
                  "runs code on its workers"]
