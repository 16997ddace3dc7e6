"""VACUUM that says whether it ran: PostgreSQL skips a table the role may not vacuum with only
a warning, so the role's right is asked first (an erasure's receipt must not claim a vacuum
that did not happen)."""

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
