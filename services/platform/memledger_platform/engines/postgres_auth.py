"""Password authentication for the embedded PostgreSQL: every connection, over TCP or the Unix
socket, must give the superuser's password (SCRAM-SHA-256), which is made once and kept in an
owner-only file beside the cluster.

A cluster made before passwords existed (trust authentication) gets one on its first start
with this code: the password is set in single-user mode, before the server listens, so there
is no moment in which the server is open.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import subprocess
from pathlib import Path

from memledger_platform.engines.credentials import new_password, read_private, write_private
from memledger_platform.engines.process import PG_SUPERUSER, EngineStartError, _RunAs

PASSWORD_FILE = "password"  # noqa: S105 - a file name
"""The superuser's password, beside ``pgdata`` (mode 0600)."""

HBA = """\
# Written by memledger: every connection gives the password (SCRAM-SHA-256); edits are undone.
local   all   all                  scram-sha-256
host    all   all   127.0.0.1/32   scram-sha-256
host    all   all   ::1/128        scram-sha-256
"""

_SCRAM_ITERATIONS = 4096


def stored_password(data_dir: Path) -> str | None:
    """The superuser's password of the cluster on ``data_dir`` (an ``EmbeddedPostgres``'s),
    if it has one."""
    return read_private(data_dir.resolve() / PASSWORD_FILE)


def scram_verifier(password: str, salt: bytes | None = None) -> str:
    """What PostgreSQL stores for ``password`` (RFC 5802 / 7677, as libpq computes it), so the
    password itself never reaches the server, its logs or its process list."""
    salt = salt or os.urandom(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, _SCRAM_ITERATIONS)
    stored_key = hashlib.sha256(hmac.digest(salted, b"Client Key", "sha256")).digest()
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    return (f"SCRAM-SHA-256${_SCRAM_ITERATIONS}:{_b64(salt)}"
            f"${_b64(stored_key)}:{_b64(server_key)}")


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def ensure_password(install: Path, data_dir: Path, pgdata: Path, run_as: _RunAs | None) -> str:
    """The superuser's password, set on the (stopped) cluster and required by its pg_hba.conf.

    Order matters for a crash half-way: the password is set before it is stored, and stored
    before pg_hba.conf demands it, so any interrupted start is redone in full by the next.
    """
    password = stored_password(data_dir)
    hba = pgdata / "pg_hba.conf"
    if password is not None and hba.read_text() == HBA:
        return password
    password = password or new_password()
    _set_password(install, data_dir, pgdata, run_as, password)
    write_private(data_dir / PASSWORD_FILE, password + "\n")
    hba.write_text(HBA)  # in place: the file keeps the owner the server runs as
    return password


def _set_password(install: Path, data_dir: Path, pgdata: Path, run_as: _RunAs | None,
                  password: str) -> None:
    """ALTER ROLE in single-user mode (the server must not be running)."""
    argv = [str(install / "bin" / "postgres"), "--single", "-D", str(pgdata),
            "-c", "exit_on_error=on", "postgres"]
    statement = f"ALTER ROLE \"{PG_SUPERUSER}\" PASSWORD '{scram_verifier(password)}';\n"
    try:
        done = subprocess.run(
            argv, input=statement.encode(), capture_output=True, cwd=data_dir, timeout=120,
            check=False, user=run_as.uid if run_as else None,
            group=run_as.gid if run_as else None, extra_groups=[] if run_as else None)
    except (OSError, subprocess.SubprocessError) as exc:
        raise EngineStartError(f"cannot set the PostgreSQL password: {exc}") from exc
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[-2000:]
        raise EngineStartError(f"setting the PostgreSQL password failed (code "
                               f"{done.returncode}):\n{detail}")
