"""VACUUM that says whether it ran: PostgreSQL skips a table the role may not vacuum with only
a warning, so the role's right is asked first (an erasure's receipt must not claim a vacuum
that did not happen)."""

import re
import time
from typing import Any, LiteralString

from psycopg import Connection, sql

CLEAN = "INDEX_CLEANUP ON"
"""Index entries too, however few rows died: without it, a VACUUM that finds dead rows on under
2% of pages leaves their index entries (keys included)."""


def vacuum(conn: Connection[Any], table: sql.Composable, options: LiteralString = CLEAN
           ) -> bool:
    """VACUUM ``table`` (a qualified name; ``conn`` in autocommit) with ``options``; whether it
    ran (``False``: the role is neither a superuser nor the table's owner)."""
    if not may_vacuum(conn, table):
        return False
    conn.execute(sql.SQL("VACUUM (" + options + ") {}").format(table))
    return True


def may_vacuum(conn: Connection[Any], table: sql.Composable) -> bool:
    row = conn.execute("SELECT current_setting('is_superuser') = 'on' OR pg_has_role(relowner, "
                       "'USAGE') FROM pg_class WHERE oid = %s::regclass",
                       (table.as_string(conn),)).fetchone()
    return bool(row and row[0])


_KEPT = (re.compile(r"(\d+) are dead but not yet removable"),  # PostgreSQL 14 and later
         re.compile(r"(\d+) dead row versions cannot be removed yet"))  # before
"""How VACUUM VERBOSE says how many dead row versions it had to keep."""


def vacuum_until_removed(conn: Connection[Any], table: sql.Composable, seconds: float = 30.0,
                         options: LiteralString = CLEAN) -> bool:
    """VACUUM ``table`` (with ``options``) until it keeps no dead row version (one that a
    snapshot still running may see: another session's transaction that began before the rows
    died), at most ``seconds``; whether it ran and kept none. A destroyed key's old row
    versions hold its wrapped key, and a scrubbed row's its text, so a receipt may claim them
    gone only when VACUUM removed them."""
    if not may_vacuum(conn, table):
        return False
    notices: list[str] = []

    def heard(diagnostic: Any) -> None:
        notices.append(str(diagnostic.message_primary or ""))

    deadline = time.monotonic() + seconds
    conn.add_notice_handler(heard)
    try:
        while True:
            notices.clear()
            conn.execute(sql.SQL("VACUUM (VERBOSE, " + options + ") {}").format(table))
            if _kept(notices) == 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
    finally:
        conn.remove_notice_handler(heard)


def _kept(notices: list[str]) -> int:
    return sum(int(m.group(1)) for text in notices for pattern in _KEPT
               for m in pattern.finditer(text))
