"""The embedded engines' passwords are made once and kept owner-only; a data directory is made
private, links not followed."""

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from memledger_platform.engines import make_private
from memledger_platform.engines.credentials import ensure_passwords, read_passwords


@pytest.fixture
def open_umask() -> Iterator[None]:
    """A umask that takes nothing away, so only the code under test can make a file private."""
    before = os.umask(0)
    yield
    os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.mark.usefixtures("open_umask")
def test_passwords_are_made_once_per_user_and_kept_by_their_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "passwords.json"
    first = ensure_passwords(path, ["ingest", "relay"])
    assert ensure_passwords(path, ["ingest"]) == first
    more = ensure_passwords(path, ["ingest", "query"])
    assert more["ingest"] == first["ingest"]
    assert more["relay"] == first["relay"], "a user not named keeps its password"
    assert len({*more.values()}) == 3
    assert all(len(password) >= 40 for password in more.values())
    assert read_passwords(path) == more
    assert _mode(path) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["passwords.json"]


@pytest.mark.usefixtures("open_umask")
def test_a_data_directory_is_made_its_owners_only_without_following_links(tmp_path: Path
                                                                         ) -> None:
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / "vectors" / "shard").mkdir(parents=True, mode=0o755)
    outside.mkdir(mode=0o755)
    (home / "vectors" / "shard" / "payload.dat").write_text("plaintext")
    (home / "vectors" / "shard" / "payload.dat").chmod(0o664)
    (home / "run.sh").write_text("#!/bin/sh\n")
    (home / "run.sh").chmod(0o755)
    (home / "elsewhere").symlink_to(outside)

    make_private(home)

    assert {str(p.relative_to(home)): _mode(p) for p in home.rglob("*")
            if not p.is_symlink()} == {
        "vectors": 0o700, "vectors/shard": 0o700, "vectors/shard/payload.dat": 0o600,
        "run.sh": 0o700}
    assert _mode(home) == 0o700
    assert _mode(outside) == 0o755, "a link's target is not the home's"
