"""API keys: issuing, resolving a request's principal, roles and space grants (a fake store)."""

from datetime import UTC, datetime

import pytest

from memledger_platform.auth import Denied, Gate, MemoryKeyStore, Principal, issue, require

NOW = datetime(2026, 11, 22, tzinfo=UTC)


@pytest.fixture
def store() -> MemoryKeyStore:
    keys = MemoryKeyStore()
    keys.create_tenant("acme")
    return keys


def test_an_issued_token_resolves_to_its_tenant_role_and_spaces(store: MemoryKeyStore) -> None:
    record, token = issue(store, "acme", "write", ["main"], NOW)
    who = Gate(store, None).principal(f"Bearer {token}", None)
    assert who == Principal("acme", "write", frozenset({"main"}), record.key_id)
    assert record.secret_sha256 not in token  # only the hash is kept


def test_a_key_is_issued_only_for_an_existing_tenant(store: MemoryKeyStore) -> None:
    with pytest.raises(LookupError, match="create-tenant"):
        issue(store, "nobody", "read", None, NOW)


@pytest.mark.parametrize(("authorization", "reason"), [
    (None, "required"), ("Basic abc", "not an API key"), ("Bearer mlk_short", "not an API key"),
    ("Bearer mlk_0123456789abcdef_" + "x" * 43, "unknown API key"),
])
def test_bad_credentials_are_401_naming_the_header(store: MemoryKeyStore,
                                                   authorization: str | None,
                                                   reason: str) -> None:
    with pytest.raises(Denied) as denied:
        Gate(store, None).principal(authorization, None)
    assert (denied.value.status, denied.value.path) == (401, "header.Authorization")
    assert reason in denied.value.message


def test_a_wrong_secret_for_a_real_key_id_is_refused(store: MemoryKeyStore) -> None:
    _, token = issue(store, "acme", "read", None, NOW)
    forged = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    with pytest.raises(Denied, match="unknown API key"):
        Gate(store, None).principal(f"Bearer {forged}", None)


def test_revocation_takes_effect_on_the_next_request(store: MemoryKeyStore) -> None:
    record, token = issue(store, "acme", "admin", None, NOW)
    gate = Gate(store, None)
    gate.principal(f"Bearer {token}", None)
    store.revoke(record.key_id, NOW)
    with pytest.raises(Denied, match="revoked"):
        gate.principal(f"Bearer {token}", None)


def test_naming_another_tenant_than_the_keys_is_403(store: MemoryKeyStore) -> None:
    _, token = issue(store, "acme", "admin", None, NOW)
    with pytest.raises(Denied) as denied:
        Gate(store, None).principal(f"Bearer {token}", "globex")
    assert denied.value.status == 403


@pytest.mark.parametrize(("role", "need", "allowed"), [
    ("read", "read", True), ("read", "write", False), ("write", "read", True),
    ("write", "admin", False), ("admin", "write", True), ("admin", "admin", True)])
def test_roles_nest(role: str, need: str, allowed: bool) -> None:
    who = Principal("acme", role)  # type: ignore[arg-type]
    if allowed:
        require(who, need)  # type: ignore[arg-type]
    else:
        with pytest.raises(Denied):
            require(who, need)  # type: ignore[arg-type]


def test_space_grants_name_what_is_missing() -> None:
    who = Principal("acme", "admin", frozenset({"main"}))
    require(who, "read", ["main"])
    with pytest.raises(Denied, match="'side'") as denied:
        require(who, "read", ["main", "side"], path="body.spaces")
    assert (denied.value.status, denied.value.path) == (403, "body.spaces")


def test_without_a_key_store_the_header_or_default_tenant_is_used() -> None:
    assert Gate(None, "default").principal(None, None).tenant == "default"
    assert Gate(None, "default").principal(None, "acme").tenant == "acme"
    with pytest.raises(Denied) as denied:
        Gate(None, None).principal(None, None)
    assert denied.value.status == 422
    with pytest.raises(Denied):
        Gate(None, None).principal(None, "Not A Tenant!")
