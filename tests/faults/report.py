"""The results: one row per fault (the writes acknowledged from that fault until the next one,
and where they were found), as a table for the terminal and as JSON (to the file named by
``MEMLEDGER_FAULTS_REPORT``, if set)."""

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from tests.faults.audit import PLACES, Copies
from tests.faults.load import Acked, Outcomes, Refused
from tests.faults.scenario import FAULTS, Recovery

REPORT_ENV = "MEMLEDGER_FAULTS_REPORT"


@dataclass(frozen=True)
class Row:
    fault: str
    acked: int
    retried: int
    """Acknowledged only after more than one attempt."""
    found: dict[str, int]
    """Per place: acknowledged writes found there exactly once."""
    duplicated: int
    """Acknowledged writes found more than once somewhere."""
    missing: int
    """Acknowledged writes missing somewhere."""
    refused: int
    refused_found: int
    """Refused writes found anywhere (must be 0)."""
    at: str = ""
    """When the fault was injected (UTC)."""
    first_ack_seconds: float | None = None
    postgres_seconds: float | None = None
    vectors_seconds: float | None = None
    enriched_seconds: float | None = None


def rows(outcomes: Outcomes, copies: Copies, recoveries: list[Recovery]) -> list[Row]:
    """A row for the steady load before the first fault, then one per fault."""
    starts = [r.injected_at for r in recoveries] + [float("inf")]
    made = [_row("steady load", outcomes, copies, float("-inf"), starts[0])]
    for recovery, end in zip(recoveries, starts[1:], strict=True):
        row = _row(FAULTS[recovery.fault][0], outcomes, copies, recovery.injected_at, end)
        made.append(Row(**{**asdict(row), "at": recovery.wall_clock,
                           "first_ack_seconds": recovery.first_ack_seconds,
                           "postgres_seconds": recovery.postgres_seconds,
                           "vectors_seconds": recovery.vectors_seconds,
                           "enriched_seconds": recovery.enriched_seconds}))
    return made


def _row(name: str, outcomes: Outcomes, copies: Copies, start: float, end: float) -> Row:
    acked = [a for a in outcomes.acked if start <= a.at < end]
    refused = [r for r in outcomes.refused if start <= r.at < end]
    counts = [{p: _count(copies, p, a) for p in PLACES} for a in acked]
    return Row(name, len(acked), sum(a.attempts > 1 for a in acked),
               {p: sum(c[p] == 1 for c in counts) for p in PLACES},
               sum(any(n > 1 for n in c.values()) for c in counts),
               sum(any(n == 0 for n in c.values()) for c in counts),
               len(refused), sum(bool(_places(copies, r)) for r in refused))


def _count(copies: Copies, place: str, acked: Acked) -> int:
    return copies.count(place, acked.key, acked.event_id, acked.item_id)


def _places(copies: Copies, refused: Refused) -> list[str]:
    return copies.anywhere(refused.key, refused.item_id)


def problems(outcomes: Outcomes, copies: Copies, recoveries: list[Recovery]) -> list[str]:
    """Everything that breaks the promise, with examples."""
    found = []
    for acked in outcomes.acked:
        wrong = {p: n for p in PLACES if (n := _count(copies, p, acked)) != 1}
        if wrong:
            found.append(f"acknowledged {acked.key} (item {acked.item_id}, position "
                         f"{acked.position}) found {wrong}")
    found += [f"refused {r.key} ({r.status}) found in {places}" for r in outcomes.refused
              if (places := _places(copies, r))]
    found += [f"not settled: {key}" for key in outcomes.unresolved]
    found += [f"events stream: {p}" for p in copies.stream_problems]
    if lost := copies.not_projected():
        found.append(f"{len(lost)} events not in the PostgreSQL read model: "
                     f"{sorted(lost.items())[:20]}")
    found += [f"{r.fault}: no recovery measured ({r})" for r in recoveries
              if None in (r.first_ack_seconds, r.postgres_seconds, r.vectors_seconds,
                          r.enriched_seconds)]
    return found


def table(made: list[Row]) -> str:
    places = " ".join(f"{p[:8]:>8}" for p in PLACES)
    lines = [f"{'fault':<34} {'acked':>6} {'retried':>7} {places} {'dupl':>5} {'miss':>5} "
             f"{'refused':>7} {'ref.found':>9} {'ack s':>6} {'pg s':>6} {'vec s':>6} "
             f"{'enrich s':>8}"]
    for r in made:
        counts = " ".join(f"{r.found[p]:>8}" for p in PLACES)
        times = (f"{_seconds(r.first_ack_seconds):>6} {_seconds(r.postgres_seconds):>6} "
                 f"{_seconds(r.vectors_seconds):>6} {_seconds(r.enriched_seconds):>8}")
        lines.append(f"{r.fault:<34} {r.acked:>6} {r.retried:>7} {counts} {r.duplicated:>5} "
                     f"{r.missing:>5} {r.refused:>7} {r.refused_found:>9} {times}")
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def write_json(made: list[Row], extra: dict[str, Any]) -> None:
    """To the file ``MEMLEDGER_FAULTS_REPORT`` names (nothing if unset)."""
    path = os.environ.get(REPORT_ENV)
    if path:
        document = {"faults": [asdict(r) for r in made], "places": list(PLACES), **extra}
        Path(path).write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2))


def markdown(made: list[Row]) -> str:
    """The table in the shape of ``docs/reliability.md``: lost and doubled writes, and the
    slowest recovery of the fault (the write after it in every read model, embedded)."""
    lines = ["| fault | acked | lost | doubled | recovery s |", "|---|---:|---:|---:|---:|"]
    for r in made:
        times = [t for t in (r.first_ack_seconds, r.postgres_seconds, r.vectors_seconds,
                             r.enriched_seconds) if t is not None]
        lines.append(f"| {r.fault} | {r.acked} | {r.missing} | {r.duplicated} | "
                     f"{_seconds(max(times)) if times else '-'} |")
    return "\n".join(lines)
