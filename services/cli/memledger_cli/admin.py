"""``memledger admin``: tenants and API keys. Attaches to a running ``memledger up`` (or
starts the embedded engines itself), or uses ``MEMLEDGER_POSTGRES_DSN`` in distributed mode.
A token is printed once, when issued; only its hash is kept."""

import argparse
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import ConnectionPool

from memledger_cli.embedded import attach
from memledger_platform.auth import ROLES, KeyRecord, issue
from memledger_platform.auth_postgres import PostgresKeyStore
from memledger_platform.settings import Settings
from memledger_schemas.types import SLUG_PATTERN


def add_admin_parser(commands: Any) -> None:
    admin = commands.add_parser("admin", help="create tenants; issue, list and revoke API keys")
    actions = admin.add_subparsers(dest="action", required=True, metavar="ACTION")
    tenant = actions.add_parser("create-tenant", help="create a tenant (keys are bound to one)")
    tenant.add_argument("tenant")
    key = actions.add_parser("issue-key", help="issue an API key; prints the token once")
    key.add_argument("--tenant", required=True)
    key.add_argument("--role", choices=ROLES, required=True,
                     help="read < write < admin (each may do what the one before may)")
    key.add_argument("--space", action="append", dest="spaces", metavar="SPACE",
                     help="limit the key to this space (repeat for more; default: all)")
    key.add_argument("--label", help="what the key is for")
    revoke = actions.add_parser("revoke-key", help="revoke a key (from the next request on)")
    revoke.add_argument("key_id")
    listing = actions.add_parser("list-keys", help="a tenant's keys (never their secrets)")
    listing.add_argument("--tenant", required=True)
    for sub in (tenant, key, revoke, listing):
        sub.set_defaults(handler=run_admin)


def run_admin(args: argparse.Namespace, settings: Settings) -> int:
    with _keys(settings) as keys:
        if args.action == "create-tenant":
            return _create_tenant(keys, args.tenant)
        if args.action == "issue-key":
            return _issue(keys, args)
        if args.action == "revoke-key":
            if not keys.revoke(args.key_id, datetime.now(UTC)):
                return _fail(f"no live key {args.key_id!r}")
            print(json.dumps({"revoked": args.key_id}))
            return 0
        print(json.dumps([_shown(k) for k in keys.keys(args.tenant)], indent=2))
        return 0


def _create_tenant(keys: PostgresKeyStore, tenant: str) -> int:
    if not re.fullmatch(SLUG_PATTERN, tenant):
        return _fail(f"tenant: {tenant!r} is not a valid tenant id ({SLUG_PATTERN})")
    print(json.dumps({"tenant": tenant, "created": keys.create_tenant(tenant)}))
    return 0


def _issue(keys: PostgresKeyStore, args: argparse.Namespace) -> int:
    try:
        record, token = issue(keys, args.tenant, args.role, args.spaces, datetime.now(UTC),
                              args.label)
    except LookupError as missing:
        return _fail(str(missing.args[0]))
    print(json.dumps({**_shown(record), "token": token}))
    print("memledger: the token is shown only now; store it safely", file=sys.stderr)
    return 0


def _shown(record: KeyRecord) -> dict[str, Any]:
    return {"key_id": record.key_id, "tenant": record.tenant, "role": record.role,
            "spaces": None if record.spaces is None else sorted(record.spaces),
            "label": record.label, "created_at": record.created_at.isoformat(),
            "revoked_at": record.revoked_at and record.revoked_at.isoformat()}


def _fail(message: str) -> int:
    print(f"memledger admin: {message}", file=sys.stderr)
    return 2


@contextmanager
def _keys(settings: Settings) -> Iterator[PostgresKeyStore]:
    with attach(settings) as endpoints, ConnectionPool(
            endpoints.postgres_dsn, min_size=1, max_size=1, open=True,
            kwargs={"autocommit": True}) as pool:
        yield PostgresKeyStore(pool, settings.postgres_schema)
