"""The verdict on a mixed load: given what the load was told (the ledger) and what the engines
hold (an ``Observed``, read by ``observe``), which acknowledged writes are lost, which doubled,
which refused ones were found, and where an erased subject's plaintext still is. Pure: a unit
test feeds it doctored observations to show it sees each failure.

Where an acknowledged write must be, once:
- every event: the event store and the events stream (by event id); the changes feed (one row
  per event) unless its subject was erased;
- a memory item's event: the items table (its row), the bi-temporal table and the vector index
  (the rows it made, at least one, as many in the one as in the other, none made twice);
- a message: the messages table and the vector index (its point);
- feedback: the signals table (its row).
An erased subject's writes are then in the store and the stream only (sealed), and its
plaintext is in no table, tuple or file scanned.
"""

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.faults.mixed import Effect, Ledger, Write

EVENT_PLACES = ("store", "stream", "changes")


@dataclass
class Observed:
    """How often each thing was found in each place."""

    events: dict[str, Counter[str]] = field(default_factory=dict)
    """store, stream, changes → counts by event id."""
    rows: dict[str, Counter[tuple[str, int]]] = field(default_factory=dict)
    """bitemporal, vectors → rows (points) by (item id, position that made them)."""
    twice: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    """bitemporal, vectors → (item id, position) of rows found twice alike (same valid range)."""
    items: Counter[str] = field(default_factory=Counter)
    messages: dict[str, Counter[str]] = field(default_factory=dict)
    """messages (the table), message-vectors → counts by message id."""
    signals: Counter[int] = field(default_factory=Counter)
    """Feedback rows by position."""
    stored_keys: Counter[str] = field(default_factory=Counter)
    """Idempotency keys as the event store holds them."""
    refused_items: Counter[str] = field(default_factory=Counter)
    """Refused writes' item ids, found in any read model."""
    plaintext: dict[str, list[str]] = field(default_factory=dict)
    """Erased token → where it was still found."""


@dataclass(frozen=True)
class Verdict:
    lost: list[str]
    doubled: list[str]
    refused_found: list[str]
    plaintext: list[str]

    def problems(self) -> list[str]:
        return self.lost + self.doubled + self.refused_found + self.plaintext


def judge(ledger: Ledger, observed: Observed, stored_key: Callable[[str], str] = str) -> Verdict:
    """``stored_key``: how the event store holds an idempotency key (``Cluster.stored_key``)."""
    lost, doubled = [], []
    for write in ledger.acked:
        for effect in write.effects:
            for place, count in _counts(write, effect, ledger, observed).items():
                if count == 0:
                    lost.append(f"{write.op} {write.key} @{effect.position}: not in {place}")
                elif count > 1:
                    doubled.append(f"{write.op} {write.key} @{effect.position}: {count} in "
                                   f"{place}")
    refused = [f"refused {r.op} {r.key} found" for r in ledger.refused
               if observed.stored_keys[stored_key(r.key)] or observed.refused_items[r.item_id]]
    plaintext = [f"erased {token} still in {places}"
                 for token, places in observed.plaintext.items() if places]
    return Verdict(lost, doubled, refused, plaintext)


def lost_or_doubled(write: Write, ledger: Ledger, observed: Observed) -> tuple[bool, bool]:
    """Whether one acknowledged write is missing somewhere, and whether it is doubled."""
    counts = [n for e in write.effects for n in _counts(write, e, ledger, observed).values()]
    return any(n == 0 for n in counts), any(n > 1 for n in counts)


def _counts(write: Write, effect: Effect, ledger: Ledger, observed: Observed
            ) -> dict[str, int]:
    """Copies of one event of ``write`` per place it must be in once."""
    erased = bool(write.subject) and write.subject in ledger.erased
    found = {p: observed.events.get(p, Counter())[effect.event_id] for p in EVENT_PLACES
             if not (erased and p == "changes")}
    if erased or write.op == "erase":
        return found
    if effect.item_id:
        found |= _item_counts(effect, observed)
    if effect.message_id:
        found |= {p: c[effect.message_id] for p, c in observed.messages.items()}
    if effect.signal:
        found["signals"] = observed.signals[effect.position]
    return found


def _item_counts(effect: Effect, observed: Observed) -> dict[str, int]:
    """The item's row once; its rows in the bi-temporal table and the vector index at least
    once, alike in number (more in one: doubled there), none twice alike."""
    found = {"items": observed.items[effect.item_id]}
    at = (effect.item_id, effect.position)
    rows = {p: observed.rows.get(p, Counter())[at] for p in ("bitemporal", "vectors")}
    least = min(rows.values())
    for place, n in rows.items():
        twice = at in observed.twice.get(place, set()) or n > least
        found[place] = 2 if n and twice else min(n, 1)
    return found
