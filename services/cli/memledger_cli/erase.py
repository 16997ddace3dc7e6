"""``memledger erase --subject S``: crypto-shred a data subject and print the receipt: the keys
destroyed, the ``subject.erased`` event, and what every read model purged (once each has
applied the erasure; ``--wait`` bounds how long to wait for them)."""

import argparse
import asyncio
import json
import sys
from typing import Any

from memledger_cli.embedded import attach
from memledger_ingest.core.erasure import Erasure, LegalHold
from memledger_ingest.core.writer import GroupCommitWriter
from memledger_platform import receipts
from memledger_platform.eventstore.postgres import PostgresEventStore, datastore_from_dsn
from memledger_platform.keyring_postgres import keyring_for, with_home_master_key
from memledger_platform.settings import Settings


def add_erase_parser(commands: Any) -> None:
    erase = commands.add_parser("erase", help="erase a data subject (crypto-shredding) and "
                                "print the receipt")
    erase.add_argument("--subject", required=True, help="the data subject id")
    erase.add_argument("--tenant", help="its tenant (default: the default tenant)")
    erase.add_argument("--reason", help="why (recorded with the erasure)")
    erase.add_argument("--wait", type=float, default=60.0,
                       help="seconds to wait for every read model to report (default 60)")
    erase.set_defaults(handler=run_erase)


def run_erase(args: argparse.Namespace, settings: Settings) -> int:
    settings = with_home_master_key(settings)
    tenant = args.tenant or settings.tenant_fallback
    if tenant is None:
        print("memledger erase: --tenant is required in distributed mode", file=sys.stderr)
        return 2
    with attach(settings) as endpoints:
        keyring, pool = keyring_for(settings, endpoints.postgres_dsn)
        if keyring is None or pool is None:
            print("memledger erase: no master key (MEMLEDGER_MASTER_KEY): nothing is sealed, so "
                  "nothing can be shredded", file=sys.stderr)
            return 2
        store = PostgresEventStore(datastore_from_dsn(
            endpoints.postgres_dsn, schema=settings.postgres_schema, pool_size=2))
        try:
            receipt = asyncio.run(_erase(store, keyring, tenant, args.subject, args.reason))
        except LegalHold as hold:
            print(f"memledger erase: {hold}", file=sys.stderr)
            return 3
        finally:
            store.close()
            pool.close()
        receipt["purged"], receipt["complete"] = receipts.wait_for(
            endpoints.postgres_dsn, settings.postgres_schema, tenant, args.subject,
            receipt["position"], args.wait)
    print(json.dumps(receipt, indent=2))
    return 0 if receipt["complete"] else 1


async def _erase(store: PostgresEventStore, keyring: Any, tenant: str, subject: str,
                 reason: str | None) -> dict[str, Any]:
    writer = GroupCommitWriter(store, keyring=keyring)
    writer.start()
    try:
        return await Erasure(store, keyring, writer).erase(tenant, subject, reason,
                                                          actor="memledger erase")
    finally:
        writer.stop()
