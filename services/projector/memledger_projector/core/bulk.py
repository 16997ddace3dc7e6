"""A rebuild's bulk load: part of the log (or all of it) folded in memory and loaded into an
empty projection schema, in the caller's transaction.

Every table but the change log is one COPY once the fold is complete (a row is final only
then). The change log's lines are made as the fold goes, and kept: the rebuild COPYs them
later, on a connection of its own, while its main connection builds the item indexes (the
fold keeps both cores busy; the index phase leaves one idle). Used by the rebuild itself and
by its fold worker (``fold_worker``), each on its own connection and its own part of the log.
"""

import gc
import heapq
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from psycopg import Connection

from memledger_platform.events import VECTOR, decode
from memledger_platform.logshare import Record
from memledger_platform.readmodel.projection import Key, Projection
from memledger_projector.core import copytext, store
from memledger_projector.core.readahead import Pages, read_ahead

Open = Callable[[dict[str, Any]], dict[str, Any]]
"""Opens the sealed fields of a parsed event document (``crypto.Opener``)."""

ChangeLog = list[tuple[int, bytes]]
"""Change-log lines, one chunk per folded batch, with the position of its first event."""


class RebuildStopped(Exception):
    """An event could not be applied; the live projection is untouched."""

    def __init__(self, first: int, last: int, error: Exception) -> None:
        super().__init__(f"rebuild stopped in the batch of positions {first}..{last}: "
                         f"{error!r}; the live projection is unchanged (find the event with "
                         f"`memledger replay --from-position {first} --to-position {last}`)")
        self.first, self.last, self.error = first, last, error


class Loader:
    """Folds batches into a fresh ``Projection`` and loads it into ``target`` (empty) over
    ``conn``, inside the caller's transaction. ``opener`` opens each event's sealed fields as
    it is parsed (none: the records come opened)."""

    def __init__(self, conn: Connection[Any], target: str, opener: Open | None = None
                 ) -> None:
        self.conn, self.target, self.opener = conn, target, opener
        self.projection = Projection(keep_changes=False)
        self.change_log: ChangeLog = []
        """The change log's lines of the batches folded so far."""
        self.reached = 0
        """The last position of the batches folded so far (whichever part of them)."""

    def fold(self, first: int, last: int, records: Sequence[Record]) -> None:
        """Fold ``records`` (part or all of the batch of positions ``first``..``last``, in
        position order) and make their change-log lines."""
        try:
            events = [decode(data, position=position, recorded_at=at, opener=self.opener,
                             skip=VECTOR) for position, at, data in records]
            for event in events:
                self.projection.apply(event)
            if events:
                self.change_log.append(
                    (events[0].position, b"".join([copytext.change_line(e) for e in events])))
        except Exception as error:
            raise RebuildStopped(first, last, error) from error
        self.reached = last

    def item_keys(self) -> set[Key]:
        """The items this part holds, to check two parts never fold the same item."""
        return set(self.projection.items) | set(self.projection.rows)

    def holds_only_items(self) -> bool:
        """Whether this part holds nothing the other part could hold too: items and the
        mentions extracted from them and their reaffirmation signals (``memory.*`` events,
        routed here; a mention or signal row is keyed by its own event's position, so it is
        never folded on both sides)."""
        p = self.projection
        return not (p.spaces or p.agents or p.sessions or p.messages or p.preferences
                    or p.entities or p.relations)

    def write(self) -> None:
        """Write every table but the change log (``write_change_log``)."""
        store.write_rows(self.conn, self.target, self.projection)

    def release(self) -> None:
        """Let go of the fold once written: its objects (millions of them) are freed now, by
        the thread that calls this."""
        self.projection = Projection(keep_changes=False)


def write_change_log(conn: Connection[Any], target: str, *parts: ChangeLog) -> None:
    """COPY the change-log lines of ``parts`` (each a ``Loader.change_log``) into ``target``,
    in ``conn``'s current transaction: chunk by chunk in position order, so the table's rows
    lie about in the order a feed reads them."""
    chunks = heapq.merge(*parts, key=lambda chunk: chunk[0])
    with copytext.copy_into(conn, target, "changes", copytext.CHANGE_COLUMNS) as copy:
        for _, lines in chunks:
            copy.write(lines)


def fold_pages(loader: Loader, pages: Pages,
               seen: Callable[[list[Record]], None] | None = None
               ) -> tuple[int, tuple[int, datetime] | None]:
    """Fold the pages of a log (read a page ahead), each handed to ``seen`` first; return how
    many events, and the last one's position and time (``None``: there were none)."""
    count, last = 0, None
    with read_ahead(pages) as batches:
        for batch in batches:
            if seen is not None:
                seen(batch)
            last = batch[-1]
            loader.fold(batch[0][0], last[0], batch)
            count += len(batch)
    return count, (last[0], last[1]) if last is not None else None


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """A fold holds millions of objects and makes no cycles: the cyclic collector would
    traverse them again and again for nothing (a third of the fold's time)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
