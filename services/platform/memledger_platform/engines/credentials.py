"""Secrets the embedded engines make once and keep beside their data, in owner-only files."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import IO


def new_password() -> str:
    """A random password: 256 bits, URL-safe characters only (it goes into URLs as is)."""
    return secrets.token_urlsafe(32)


def write_private(path: Path, text: str) -> None:
    """Replace ``path`` with ``text``, readable by its owner only (mode 0600, whatever the
    umask); a reader sees the old content or the new, never a part."""
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def open_private_log(path: Path) -> IO[bytes]:
    """``path`` opened for appending; made mode 0600 if new (a server log can quote data)."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600), "ab")


def read_private(path: Path) -> str | None:
    """The stripped content of ``path``, or None when it does not exist (or is empty)."""
    with contextlib.suppress(FileNotFoundError):
        return path.read_text().strip() or None
    return None


def read_passwords(path: Path) -> dict[str, str]:
    """The ``{user: password}`` object stored in ``path`` (empty if there is none)."""
    text = read_private(path)
    if text is None:
        return {}
    stored = json.loads(text)
    return {str(user): str(password) for user, password in stored.items()}


def ensure_passwords(path: Path, users: Iterable[str]) -> dict[str, str]:
    """The password of each of ``users``: the stored one, or a new one (then stored, beside
    those of users not named here, which keep theirs)."""
    stored = read_passwords(path)
    missing = [user for user in users if user not in stored]
    if missing:
        stored.update({user: new_password() for user in missing})
        write_private(path, json.dumps(stored, indent=2, sort_keys=True) + "\n")
    return stored
