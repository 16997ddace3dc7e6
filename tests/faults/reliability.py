"""The results table a fault run leaves behind: one row per fault window (the writes
acknowledged from that fault until the next), with how many were lost, how many doubled, and
how long recovery took. Printed at the end of the run, and written into the section of
``docs/reliability.md`` the run owns when ``MEMLEDGER_RELIABILITY_DOC`` names that file
(``make test-faults`` does; the reduced run in ``make test`` leaves the tree alone)."""

import os
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from tests.faults.backlog import FAULTS, Struck
from tests.faults.checker import Observed, lost_or_doubled
from tests.faults.mixed import Ledger, Write

DOC_ENV = "MEMLEDGER_RELIABILITY_DOC"


@dataclass(frozen=True)
class Row:
    fault: str
    acked: int
    """Acknowledged commands (a batch counts each of its commands)."""
    lost: int
    doubled: int
    behind: int | None = None
    """Events acknowledged and not yet in the read models when the fault struck."""
    recovery_seconds: float | None = None


def rows(ledger: Ledger, observed: Observed, struck: list[Struck]) -> list[Row]:
    """A row for the load before the first fault, then one per fault."""
    starts = [s.injected_at for s in struck] + [float("inf")]
    made = [_row("mixed load, no fault", ledger, observed, float("-inf"), starts[0])]
    for fault, end in zip(struck, starts[1:], strict=True):
        row = _row(FAULTS[fault.fault][0], ledger, observed, fault.injected_at, end)
        made.append(replace(row, behind=fault.behind, recovery_seconds=fault.recovery_seconds))
    return made


def _row(name: str, ledger: Ledger, observed: Observed, start: float, end: float) -> Row:
    commands = [c for w in ledger.acked if start <= w.at < end for c in _commands(w)]
    verdicts = [lost_or_doubled(c, ledger, observed) for c in commands]
    return Row(name, len(commands), sum(v[0] for v in verdicts), sum(v[1] for v in verdicts))


def _commands(write: Write) -> list[Write]:
    """A batch as its commands (one event each), any other write as itself."""
    if write.op != "batch":
        return [write]
    return [replace(write, effects=(e,)) for e in write.effects]


def markdown(made: list[Row]) -> str:
    lines = ["| fault | acked | lost | doubled | behind (events) | recovery s |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.fault} | {r.acked} | {r.lost} | {r.doubled} | "
              f"{'-' if r.behind is None else r.behind} | {_seconds(r.recovery_seconds)} |"
              for r in made]
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def run_of() -> str:
    """When this run was, as a section of the page says it."""
    return f"Run of {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC"


def write_section(name: str, text: str) -> None:
    """Replace the text between ``<!-- name:begin -->`` and ``<!-- name:end -->`` in the file
    ``MEMLEDGER_RELIABILITY_DOC`` names (nothing if unset; the markers are added at the end of
    the file when missing)."""
    path = os.environ.get(DOC_ENV)
    if not path:
        return
    doc = Path(path)
    old = doc.read_text() if doc.exists() else ""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{text.strip()}\n{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.DOTALL)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else (
        f"{old.rstrip()}\n\n{block}\n" if old else f"{block}\n")
    doc.write_text(new)
