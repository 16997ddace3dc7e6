"""The checker of ``bench scale``: every acknowledged write listed exactly once in its space,
and no as-of read that answered other content."""

from collections import Counter
from dataclasses import dataclass
from typing import Any

SHOWN = 5
"""Examples of each problem the result shows."""


@dataclass(frozen=True)
class Acked:
    """A write the bench was told is committed (or a seed it wrote)."""

    space: str
    item_id: str
    position: int
    content: str


def check(acked: list[Acked], listed: dict[str, list[str]], wrong: list[str]) -> dict[str, Any]:
    """``listed``: each space's item ids as a query replica lists them after the load."""
    expected = Counter((a.space, a.item_id) for a in acked)
    found = Counter((space, item) for space, items in listed.items() for item in items)
    lost = sorted(f"{s}/{i}" for (s, i) in expected if found[(s, i)] == 0)
    repeated = sorted(f"{s}/{i}" for (s, i), n in found.items() if n > 1 or expected[(s, i)] > 1)
    unexpected = sorted(f"{s}/{i}" for (s, i) in found if expected[(s, i)] == 0)
    # An item no acknowledgement named is a write whose answer was lost (a timeout): reported,
    # not a failure, since its client was never told it was committed.
    return {"ok": not (lost or repeated or wrong), "acked": len(acked),
            "lost": len(lost), "repeated": len(repeated), "unexpected": len(unexpected),
            "wrong_reads": len(wrong),
            "examples": {"lost": lost[:SHOWN], "repeated": repeated[:SHOWN],
                         "unexpected": unexpected[:SHOWN], "wrong_reads": wrong[:SHOWN]}}
