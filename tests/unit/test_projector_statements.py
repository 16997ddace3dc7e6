"""The projector's statements are composed once per set of names, and read as composed."""

from psycopg import sql

from memledger_projector.core.statements import rendered


def test_a_statement_is_composed_once_for_its_names_and_reads_as_composed() -> None:
    composed: list[tuple[str, str]] = []

    @rendered
    def select(s: str, table: str) -> sql.Composed:
        composed.append((s, table))
        return sql.SQL("SELECT * FROM {}.{}").format(sql.Identifier(s), sql.Identifier(table))

    assert select("rm_1", "items") == b'SELECT * FROM "rm_1"."items"'
    assert select("rm_1", "items") == b'SELECT * FROM "rm_1"."items"'
    assert select('rm "2', "items") == b'SELECT * FROM "rm ""2"."items"'
    assert composed == [("rm_1", "items"), ('rm "2', "items")]
