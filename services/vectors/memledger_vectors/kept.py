"""Items of the vector fold kept compactly once its item cache lets them go: each as a few
hundred bytes (its rows and point ids, which content versions have a vector and from when,
whether it is archived), without its dense vectors, which the index holds already and are read
back, many items' at once, only for the points a later event writes again.

Why: a bulk load revises every item in turn, so a history of more items than the cache holds
missed it on every revision, each miss a filtered read of the item's points (vectors
included) from the index. Kept here, an item is taken back for a few microseconds; its
vectors, when a point needs one, come with one read by point id for the whole batch.
"""

import marshal
import uuid
import zlib
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from memledger_platform.readmodel.temporal import Version
from memledger_platform.vectorindex.port import OPEN, SparseVector, Vector

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ENTRY_BYTES = 256
"""What an entry costs beside its bytes (its key, the dict's slot), counted in the budget."""

Key = tuple[str, str]
"""(tenant, item id)."""


@dataclass
class Item:
    rows: list[tuple[Version, str]]
    """Every row of the item with its point id, closed ones included."""
    vectors: dict[int, Sequence[float]] = field(default_factory=dict)
    """Dense vector per content version (the item's stream version that set the content)."""
    embedded_from: dict[int, float] = field(default_factory=dict)
    """The position each content version's vector came at (``EMBEDDED_FROM``)."""
    keywords: dict[int, SparseVector] = field(default_factory=dict)
    """The keyword vector of each content version's text: a revision writes again the
    points of the content before it (closed, and cut in valid time), not made again."""
    archived_from: float = OPEN
    unread: dict[int, list[str]] = field(default_factory=dict)
    """Content versions whose vector the index holds but ``vectors`` does not (the item was
    kept compactly): the points that hold it, read when a point of that version is written."""


class Kept:
    """Compacted items by key, up to ``budget`` bytes. Full, it keeps what it holds and takes
    no more: a cycle through more items than fit (a bulk load revising each in turn) would
    otherwise drop every item just before it comes round again."""

    def __init__(self, budget: int) -> None:
        self._blobs: dict[Key, bytes] = {}
        self._subjects: dict[tuple[str, str], set[Key]] = {}
        """(tenant, subject id) → the kept items holding rows of it (an erasure drops them)."""
        self._budget = budget
        self.used = 0
        """Bytes held, each entry counted with ``ENTRY_BYTES``."""

    def __len__(self) -> int:
        return len(self._blobs)

    def keep(self, key: Key, item: Item) -> None:
        """Keep ``item`` if it fits (and can be written compactly)."""
        if self.used >= self._budget:
            return
        blob = compact(item)
        if blob is None:
            return
        self._drop(key)
        self._blobs[key] = blob
        self.used += len(blob) + ENTRY_BYTES
        for subject in _subjects(item):
            self._subjects.setdefault((key[0], subject), set()).add(key)

    def take(self, key: Key) -> Item | None:
        """The item kept under ``key``, no longer kept (it goes back to the cache)."""
        blob = self._blobs.get(key)
        if blob is None:
            return None
        self._drop(key)
        item = expand(blob)
        for subject in _subjects(item):
            self._subjects.get((key[0], subject), set()).discard(key)
        return item

    def forget_subject(self, tenant: str, subject_id: str) -> None:
        for key in self._subjects.pop((tenant, subject_id), set()):
            self._drop(key)

    def clear(self) -> None:
        self._blobs.clear()
        self._subjects.clear()
        self.used = 0

    def _drop(self, key: Key) -> None:
        blob = self._blobs.pop(key, None)
        if blob is not None:
            self.used -= len(blob) + ENTRY_BYTES


def compact(item: Item) -> bytes | None:
    """``item`` without its dense and keyword vectors, or ``None`` if some value of it has no
    compact form (then it is not kept, and read back from the index when needed again)."""
    ids = [p for _, p in item.rows]
    try:
        packed = b"".join(uuid.UUID(p).bytes for p in ids)
        if any(str(uuid.UUID(p)) != p for p in ids):
            return None
        rows = tuple((_micros(r.valid_from), None if r.valid_to is None else _micros(r.valid_to),
                      r.sys_from, r.sys_to, r.attrs, r.cause) for r, _ in item.rows)
        vectored = tuple(sorted(set(item.vectors) | set(item.unread)))
        document = marshal.dumps((rows, packed, tuple(item.embedded_from.items()), vectored,
                                  item.archived_from))
    except ValueError:  # a point id that is no UUID, a value marshal does not write
        return None
    return zlib.compress(document, 1)


def expand(blob: bytes) -> Item:
    """The item ``compact`` wrote, its vectors to be read from the points named in
    ``unread``."""
    # only ever bytes ``compact`` wrote in this process
    document = marshal.loads(zlib.decompress(blob))  # noqa: S302
    rows, packed, embedded_from, vectored, archived_from = document
    item = Item(rows=[], embedded_from=dict(embedded_from), archived_from=archived_from)
    for n, (valid_from, valid_to, sys_from, sys_to, attrs, cause) in enumerate(rows):
        row = Version(_instant(valid_from), None if valid_to is None else _instant(valid_to),
                      sys_from, sys_to, attrs, cause)
        point_id = str(uuid.UUID(bytes=packed[n * 16:(n + 1) * 16]))
        item.rows.append((row, point_id))
    wanted = set(vectored)
    for row, point_id in item.rows:
        version = dict(row.attrs).get("content_version")
        if isinstance(version, int) and version in wanted:
            item.unread.setdefault(version, []).append(point_id)
    return item


def fill_vectors(item: Item, version: int, found: Mapping[str, Vector]) -> None:
    """Set ``version``'s vector from the points read (any of them holding it): a point the
    index no longer holds leaves it unset, as reading the item back would."""
    for point_id in item.unread.pop(version, ()):
        vector = found.get(point_id)
        if vector is not None:
            item.vectors[version] = array("f", vector.astype(np.float32, copy=False).tobytes())
            return


def _subjects(item: Item) -> set[str]:
    found = {dict(row.attrs).get("subject_id") for row, _ in item.rows}
    return {s for s in found if isinstance(s, str)}


def _micros(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def _instant(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)
