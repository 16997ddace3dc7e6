"""The NATS permissions the embedded mode gives each service are those the distributed mode ships
in deploy/nats/accounts.conf, for any subject prefix."""

import re
from pathlib import Path

from memledger_platform.nats_permissions import (
    CLIENT,
    OPERATOR,
    SERVICES,
    embedded_users,
    service_permissions,
)
from memledger_schemas.subjects import Subjects

ACCOUNTS = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "accounts.conf"


def _shipped() -> dict[str, dict[str, set[str]]]:
    """Each MEMLEDGER user's publish allow and deny lists and subscribe allow list."""
    users = {}
    for block in re.split(r"\n      \{\n", ACCOUNTS.read_text()):
        user = re.search(r"^\s*user: (\w+)$", block, re.M)
        if user is None or "permissions:" not in block:
            continue
        publish = block[block.index("publish:"):block.index("subscribe:")]
        users[user.group(1)] = {
            "publish": _strings(re.search(r"allow: \[(.*?)\]", publish, re.S)),
            "deny": _strings(re.search(r"deny: \[(.*?)\]", publish, re.S)),
            "subscribe": _strings(re.search(r"subscribe: \{ allow: \[(.*?)\]", block, re.S))}
    return users


def _strings(found: re.Match[str] | None) -> set[str]:
    return set(re.findall(r'"([^"]+)"', found.group(1))) if found else set()


def test_each_service_and_the_operator_have_the_permissions_shipped_for_their_user() -> None:
    shipped = _shipped()
    assert set(shipped) == {*SERVICES, OPERATOR}
    for user, permissions in service_permissions(Subjects()).items():
        assert set(permissions.publish) == shipped[user]["publish"], user
        assert set(permissions.publish_deny) == shipped[user]["deny"], user
        assert set(permissions.subscribe) == shipped[user]["subscribe"], user


def test_another_subject_prefix_renames_every_subject_and_stream() -> None:
    for user, permissions in embedded_users(Subjects("acme")).items():
        subjects = [*permissions.publish, *permissions.publish_deny, *permissions.subscribe]
        assert not [s for s in subjects if "memledger" in s.lower()], user
        assert any("acme" in s.lower() for s in subjects), user


def test_the_local_client_sends_commands_and_reads_but_publishes_no_event() -> None:
    client = embedded_users(Subjects())[CLIENT]
    assert client.publish == ("memledger.in.>",)
    assert set(client.subscribe) == {"_INBOX.>", "memledger.evt.>", "memledger.reply.>",
                                     "memledger.dlq.>"}
