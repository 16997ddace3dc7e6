"""The lifecycle fold's items as columns: one row per item, each attribute one numpy array
(names as small integer codes), so an item costs tens of bytes beside its id, not a Python
object per attribute; its vector is a handle into a ``VectorSpill``.

``Item`` is a snapshot of one row, made on demand (``ItemTable.item``): what a decision or a
caller reads; a change goes through the table.
"""

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import numpy.typing as npt

from memledger_lifecycle.spill import VectorSpill
from memledger_platform.vectorindex.port import Vector

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STATUSES = ("active", "retracted", "superseded", "archived")
_COLUMNS: dict[str, Any] = {
    "tenant": np.int32, "space": np.int32, "kind": np.int32, "layer": np.int32,
    "session": np.int32, "subject": np.int32, "status": np.int8, "created": np.int64,
    "reinforced": np.int64, "importance": np.float64, "confidence": np.float64,
    "version": np.int32, "content_version": np.int32, "dims": np.int32, "record": np.int64}
"""``reinforced``: microseconds since the epoch (UTC); ``dims`` 0: no vector."""


@dataclass(frozen=True)
class Item:
    tenant: str
    space: str
    item_id: str
    kind: str
    layer: str
    session: str | None
    created_position: int
    reinforced_at: datetime
    importance: float
    confidence: float
    version: int
    content_version: int
    status: str
    vector: Vector | None
    subject: str | None
    """The data subject of its content: erasing it drops the vector."""


class Names:
    """Strings as codes (0 is None), each string held once."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}
        self._names: list[str | None] = [None]

    def code(self, name: str | None) -> int:
        if name is None:
            return 0
        found = self._codes.get(name)
        if found is None:
            found = self._codes[name] = len(self._names)
            self._names.append(name)
        return found

    def find(self, name: str | None) -> int:
        """The code of ``name``, or -1 if it was never coded."""
        return 0 if name is None else self._codes.get(name, -1)

    def name(self, code: int) -> str | None:
        return self._names[code]


def micros(at: datetime) -> int:
    return (at - EPOCH) // timedelta(microseconds=1)


def moment(us: int) -> datetime:
    return EPOCH + timedelta(microseconds=us)


class ItemTable:
    """Rows of items by (tenant, item id)."""

    def __init__(self, vectors: VectorSpill, columns: dict[str, Any] | None = None) -> None:
        self.names = Names()
        self.vectors = vectors
        self.rows: dict[str, dict[str, int]] = {}
        """By tenant, then item id."""
        self.ids: list[str] = []
        self.count = 0
        self.columns = columns or _COLUMNS
        self.col = {name: np.zeros(16, dtype=kind) for name, kind in self.columns.items()}

    def row(self, tenant: str, item_id: str) -> int | None:
        return self.rows.get(tenant, {}).get(item_id)

    def add(self, tenant: str, item_id: str, **values: Any) -> int:
        """A new row (or the same item's row again: its values replaced)."""
        row = self.row(tenant, item_id)
        if row is None:
            row = self._grow()
            self.rows.setdefault(tenant, {})[item_id] = row
            self.ids.append(item_id)
        for name in self.columns:
            self.col[name][row] = 0
        self.set(row, tenant=self.names.code(tenant), **values)
        return row

    def set(self, row: int, **values: Any) -> None:
        for name, value in values.items():
            self.col[name][row] = value

    def _grow(self) -> int:
        if self.count == len(self.col["tenant"]):
            self.col = {name: np.concatenate([array, np.zeros_like(array)])
                        for name, array in self.col.items()}
        self.count += 1
        return self.count - 1

    def code(self, name: str | None) -> int:
        return self.names.code(name)

    def text(self, row: int, column: str) -> str | None:
        return self.names.name(int(self.col[column][row]))

    def status(self, row: int) -> str:
        return STATUSES[int(self.col["status"][row])]

    def vector(self, row: int) -> Vector | None:
        dims = int(self.col["dims"][row])
        return self.vectors.get(dims, int(self.col["record"][row])) if dims else None

    def item(self, row: int, *, vector: bool = True) -> Item:
        """A snapshot of ``row``; ``vector``: read its vector from the spill too."""
        c = {name: array[row] for name, array in self.col.items()}
        return Item(
            self.text(row, "tenant") or "", self.text(row, "space") or "", self.ids[row],
            self.text(row, "kind") or "", self.text(row, "layer") or "",
            self.text(row, "session"), int(c["created"]), moment(int(c["reinforced"])),
            float(c["importance"]), float(c["confidence"]), int(c["version"]),
            int(c["content_version"]), STATUSES[int(c["status"])],
            self.vector(row) if vector else None,
            self.text(row, "subject"))

    def live(self) -> npt.NDArray[np.int64]:
        """The rows in use."""
        return np.arange(self.count, dtype=np.int64)

    def column(self, name: str) -> npt.NDArray[Any]:
        """A column's rows in use (a view)."""
        return self.col[name][:self.count]


class ItemsView(Mapping[tuple[str, str], Item]):
    """The items as a read-only mapping of (tenant, item id) to snapshots."""

    def __init__(self, table: ItemTable) -> None:
        self._table = table

    def __getitem__(self, key: tuple[str, str]) -> Item:
        row = self._table.row(*key)
        if row is None:
            raise KeyError(key)
        return self._table.item(row)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        for tenant, rows in self._table.rows.items():
            for item_id in rows:
                yield tenant, item_id

    def __len__(self) -> int:
        return self._table.count
