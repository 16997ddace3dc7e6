"""Users of the embedded nats-server: each logs in with a password made once and kept in an
owner-only file beside the server's data, and may publish and subscribe only where its
permissions say. A client without a user is refused at connect."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from memledger_platform.engines.credentials import read_passwords

NATS_ADMIN = "admin"
"""The user every embedded nats-server has, with every permission (the engine's own probe,
and the operator tools of whoever owns the data directory)."""

PASSWORDS_FILE = "passwords.json"
"""``{user: password}`` under the server's directory (mode 0600)."""


@dataclass(frozen=True)
class NatsPermissions:
    """Subjects (NATS wildcards allowed) a user may publish to and subscribe to; a denied
    subject is refused even where an allowed pattern covers it."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...] = ("_INBOX.>",)
    publish_deny: tuple[str, ...] = ()

    def as_config(self) -> dict[str, object]:
        publish: dict[str, object] = {"allow": list(self.publish)}
        if self.publish_deny:
            publish["deny"] = list(self.publish_deny)
        return {"publish": publish, "subscribe": {"allow": list(self.subscribe)}}


def stored_passwords(data_dir: Path) -> dict[str, str]:
    """The passwords of the users of the server on ``data_dir`` (an ``EmbeddedNats``'s)."""
    return read_passwords(data_dir.resolve() / "nats" / PASSWORDS_FILE)


def authorization(users: Mapping[str, NatsPermissions | None], passwords: Mapping[str, str]
                  ) -> list[str]:
    """The ``authorization`` block of nats.conf: each user, its password, its permissions
    (none: every permission). JSON values, which the config format accepts as they are."""
    lines = ["authorization {", "  users: ["]
    for user, permissions in users.items():
        entry: dict[str, object] = {"user": user, "password": passwords[user]}
        if permissions is not None:
            entry["permissions"] = permissions.as_config()
        lines.append(f"    {json.dumps(entry)}")
    return [*lines, "  ]", "}"]


def user_url(address: str, user: str, password: str) -> str:
    """``nats://<user>:<password>@host:port`` from ``nats://host:port`` (each of them, for
    a cluster's comma-separated addresses)."""
    urls = []
    for one in address.split(","):
        scheme, _, rest = one.strip().partition("://")
        urls.append(f"{scheme}://{user}:{password}@{rest}")
    return ",".join(urls)
