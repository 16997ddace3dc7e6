"""Who is calling, and may they: API keys bound to one tenant, with roles and space grants.

A key reads ``mlk_<key_id>_<secret>``; only the SHA-256 of the secret is stored (the secret is
32 random bytes, so a fast hash is enough: there is nothing to guess). Roles nest: ``admin``
may do what ``write`` may, which may do what ``read`` may. A key limited to some spaces sees
only those. Every check happens per request against the key store, so a revoked key is refused
from the next request on.

With authentication off (``MEMLEDGER_AUTH=off``: the embedded mode on a loopback address), the
tenant comes from the ``X-Memledger-Tenant`` header or the default tenant, with every role and
the commands of memledger's own services too.
"""

import hashlib
import hmac
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from memledger_platform.limits import Exceeded, RateLimits, retry_after
from memledger_schemas.types import SLUG_PATTERN

Role = Literal["read", "write", "admin"]
ROLES: tuple[Role, ...] = ("read", "write", "admin")
_RANK = {role: rank for rank, role in enumerate(ROLES)}
_TOKEN = re.compile(r"^mlk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
_TENANT = re.compile(SLUG_PATTERN)
TENANT_HEADER = "X-Memledger-Tenant"
_RATE_SETTINGS = {"tenant": "MEMLEDGER_RATE_LIMIT_PER_SECOND",
                  "key": "MEMLEDGER_RATE_LIMIT_PER_KEY_PER_SECOND",
                  "address": "MEMLEDGER_RATE_LIMIT_UNAUTHENTICATED_PER_SECOND"}


@dataclass(frozen=True)
class Principal:
    tenant: str
    role: Role
    spaces: frozenset[str] | None = None
    """The spaces the key may touch; ``None``: all of the tenant's."""
    key_id: str | None = None
    internal: bool = False
    """May send what only memledger's own services send (``memledger_schemas.commands.
    INTERNAL_COMMANDS``): a service on its intake subject, or anyone with authentication off;
    never an API key, whatever its role."""

    def may(self, role: Role) -> bool:
        return _RANK[self.role] >= _RANK[role]

    def sees(self, space: str) -> bool:
        return self.spaces is None or space in self.spaces


@dataclass(frozen=True)
class KeyRecord:
    key_id: str
    tenant: str
    role: Role
    spaces: frozenset[str] | None
    secret_sha256: str
    label: str | None
    created_at: datetime
    revoked_at: datetime | None


class Denied(Exception):
    """A request the caller may not make: 401 (who are you?), 403 (not you) or 429 (not now)."""

    def __init__(self, status: int, code: str, message: str, path: str,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.path = status, code, message, path
        self.retry_after = retry_after
        """Seconds a rate-limited caller should wait (429)."""


class KeyStore(ABC):
    @abstractmethod
    def find(self, key_id: str) -> KeyRecord | None: ...

    @abstractmethod
    def create_tenant(self, tenant: str) -> bool:
        """Create ``tenant``; ``False`` if it existed."""

    @abstractmethod
    def tenant_exists(self, tenant: str) -> bool: ...

    @abstractmethod
    def add(self, record: KeyRecord) -> None: ...

    @abstractmethod
    def revoke(self, key_id: str, at: datetime) -> bool:
        """Revoke a live key; ``False`` if there is none by that id."""

    @abstractmethod
    def keys(self, tenant: str) -> list[KeyRecord]: ...


class MemoryKeyStore(KeyStore):
    """Keys in a dict: for tests."""

    def __init__(self) -> None:
        self.tenants: set[str] = set()
        self.records: dict[str, KeyRecord] = {}

    def find(self, key_id: str) -> KeyRecord | None:
        return self.records.get(key_id)

    def create_tenant(self, tenant: str) -> bool:
        new = tenant not in self.tenants
        self.tenants.add(tenant)
        return new

    def tenant_exists(self, tenant: str) -> bool:
        return tenant in self.tenants

    def add(self, record: KeyRecord) -> None:
        self.records[record.key_id] = record

    def revoke(self, key_id: str, at: datetime) -> bool:
        record = self.records.get(key_id)
        if record is None or record.revoked_at is not None:
            return False
        self.records[key_id] = replace(record, revoked_at=at)
        return True

    def keys(self, tenant: str) -> list[KeyRecord]:
        return [r for r in self.records.values() if r.tenant == tenant]


def issue(store: KeyStore, tenant: str, role: Role, spaces: Iterable[str] | None,
          now: datetime, label: str | None = None) -> tuple[KeyRecord, str]:
    """A new key for an existing tenant: its record, and the token (shown once, never kept)."""
    if not store.tenant_exists(tenant):
        raise LookupError(f"no tenant {tenant!r}: create it first (memledger admin "
                          f"create-tenant {tenant})")
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    record = KeyRecord(key_id, tenant, role, None if spaces is None else frozenset(spaces),
                       _digest(secret), label, now, None)
    store.add(record)
    return record, f"mlk_{key_id}_{secret}"


class Gate:
    """Turns a request's credentials into a ``Principal`` and checks what it asks for."""

    def __init__(self, keys: KeyStore | None, default_tenant: str | None,
                 limits: RateLimits | None = None) -> None:
        self._keys = keys
        self._default = default_tenant
        self._limits = limits or RateLimits()

    @property
    def required(self) -> bool:
        return self._keys is not None

    def principal(self, authorization: str | None, tenant_header: str | None,
                  client: str | None = None) -> Principal:
        """The caller, once per request: this also takes the request from its tenant's and its
        key's rates. A request without a valid key takes from its client address's (``client``,
        when known), and an address with none left is refused before its key is looked up."""
        _refuse_over(self._limits.address_blocked(client))
        if self._keys is None:
            found = Principal(_open_tenant(tenant_header, self._default), "admin",
                              internal=True)
        else:
            record = self._known(authorization, client)
            if tenant_header is not None and tenant_header != record.tenant:
                raise Denied(403, "forbidden", f"this key belongs to another tenant than "
                             f"{tenant_header!r}", f"header.{TENANT_HEADER}")
            found = Principal(record.tenant, record.role, record.spaces, record.key_id)
        _refuse_over(self._limits.admit(found.tenant, found.key_id))
        return found

    def _known(self, authorization: str | None, client: str | None) -> KeyRecord:
        try:
            return self._record(authorization)
        except Denied:
            self._limits.failed(client)
            raise

    def _record(self, authorization: str | None) -> KeyRecord:
        assert self._keys is not None
        if not authorization:
            raise Denied(401, "unauthenticated", "an API key is required: send "
                         "'Authorization: Bearer mlk_…'", "header.Authorization")
        scheme, _, token = authorization.partition(" ")
        match = _TOKEN.fullmatch(token.strip()) if scheme.lower() == "bearer" else None
        if match is None:
            raise Denied(401, "unauthenticated", "not an API key this service issued (expected "
                         "'Bearer mlk_<id>_<secret>')", "header.Authorization")
        record = self._keys.find(match.group(1))
        if record is None or not hmac.compare_digest(record.secret_sha256,
                                                     _digest(match.group(2))):
            raise Denied(401, "unauthenticated", "unknown API key", "header.Authorization")
        if record.revoked_at is not None:
            raise Denied(401, "unauthenticated", f"API key {record.key_id} was revoked at "
                         f"{record.revoked_at.isoformat()}", "header.Authorization")
        return record


def require(principal: Principal, role: Role, spaces: Iterable[str] = (), *,
            path: str = "space_id") -> None:
    """``Denied`` (403) unless ``principal`` has ``role`` and sees every one of ``spaces``."""
    if not principal.may(role):
        raise Denied(403, "forbidden", f"this key has role {principal.role!r}; "
                     f"{role!r} is needed", "header.Authorization")
    hidden = sorted(s for s in spaces if not principal.sees(s))
    if hidden:
        raise Denied(403, "forbidden", f"this key has no grant for space(s) "
                     f"{', '.join(map(repr, hidden))}", path)


def _refuse_over(exceeded: Exceeded | None) -> None:
    if exceeded is None:
        return
    who = {"tenant": f"tenant {exceeded.name!r} is over its request rate",
           "key": f"API key {exceeded.name} is over its request rate",
           "address": f"{exceeded.name} sent too many requests without a valid API key"}
    raise Denied(429, "rate_limited", f"{who[exceeded.scope]}; retry in "
                 f"{retry_after(exceeded.seconds)} s ({_RATE_SETTINGS[exceeded.scope]})",
                 "header.Authorization", retry_after=exceeded.seconds)


def _open_tenant(header: str | None, default: str | None) -> str:
    tenant = header or default
    if tenant is None:
        raise Denied(422, "invalid_request", "required", f"header.{TENANT_HEADER}")
    if not _TENANT.fullmatch(tenant):
        raise Denied(422, "invalid_request", "not a valid tenant id", f"header.{TENANT_HEADER}")
    return tenant


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
