"""CPU time of a private server's processes, by role, read from ``/proc``.

``memledger up`` starts its services and engines as child processes, each named by its command
line: a snapshot maps every descendant of the server to its role and CPU ticks, and the
difference of two snapshots is the CPU each role used in between. Without ``/proc`` every
snapshot is empty (a bench then reports no CPU figures rather than wrong ones).
"""

import os
from dataclasses import dataclass
from pathlib import Path

from memledger_cli.bench.settle import parse_stat, reaped_ticks

_PROC = Path("/proc")

ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("relay", ("memledger_cli relay", "memledger_relay")),
    ("projector", ("memledger_cli projector", "memledger_projector")),
    ("enricher", ("memledger_cli enricher", "memledger_enricher")),
    ("lifecycle", ("memledger_cli lifecycle", "memledger_lifecycle")),
    ("vector_index", ("vectorindex.process", "vectorindex.aside")),
    ("vectors", ("memledger_cli vectors", "memledger_vectors")),
    ("ingest", ("memledger_cli up", "memledger_cli ingest", "memledger up")),
)
"""Each role and what its command line holds (the first match wins): ``ingest`` is the
``memledger up`` process itself, which also serves queries and feeds the vector index;
``vector_index`` the vectors service's Qdrant Edge process (upserts) and its graph builders."""

REAPING = ("vectorindex.process",)
"""Processes whose reaped children's CPU counts as their own: a graph builder of the vector
index may start and end between two snapshots, and would otherwise be lost with its ticks."""

ENGINES = {"postgres": "postgres", "postgres:": "postgres", "nats-server": "nats"}
"""The engines, by their program's name (a PostgreSQL backend names itself ``postgres:``)."""


def role_of(cmdline: str) -> str:
    """The role of a process of a private server, from its command line (an engine by its
    program alone: a path naming it in an argument does not make a process one)."""
    program = Path(cmdline.split(" ", 1)[0]).name
    if program in ENGINES:
        return ENGINES[program]
    for role, marks in ROLES:
        if any(mark in cmdline for mark in marks):
            return role
    return "other"


@dataclass(frozen=True)
class Proc:
    pid: int
    parent: int
    ticks: int
    cmdline: str


Snapshot = dict[int, tuple[str, int]]
"""pid → (role, CPU ticks so far)."""


def tree(root: int, procs: list[Proc]) -> Snapshot:
    """Every process of the tree under ``root``, ``root`` included."""
    children: dict[int, list[Proc]] = {}
    for proc in procs:
        children.setdefault(proc.parent, []).append(proc)
    found = {p.pid: (role_of(p.cmdline), p.ticks) for p in procs if p.pid == root}
    todo = [root]
    while todo:
        for proc in children.get(todo.pop(), ()):
            found[proc.pid] = (role_of(proc.cmdline), proc.ticks)
            todo.append(proc.pid)
    return found


def used(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """CPU seconds by role between two snapshots (a process started in between counts from
    zero; one that ended in between is lost with its ticks)."""
    seconds: dict[str, float] = {}
    hz = os.sysconf("SC_CLK_TCK")
    for pid, (role, ticks) in after.items():
        start = before.get(pid, (role, 0))[1]
        seconds[role] = seconds.get(role, 0.0) + (ticks - start) / hz
    return seconds


def per_fact_ms(seconds: dict[str, float], facts: float) -> dict[str, float]:
    """CPU milliseconds per fact, by role, and their ``total``; empty without facts."""
    if facts <= 0 or not seconds:
        return {}
    by_role = {role: round(s * 1000 / facts, 3) for role, s in sorted(seconds.items())}
    return {**by_role, "total": round(sum(seconds.values()) * 1000 / facts, 3)}


def resident_mb(root: int) -> dict[str, dict[str, float]]:
    """Memory of the processes under ``root`` now, by role: ``now`` the proportional resident
    set summed (a page shared by n processes counted 1/n in each: PostgreSQL's backends share
    its buffers), ``peak`` the largest resident set any one process of the role has had."""
    now: dict[str, float] = {}
    peak: dict[str, float] = {}
    for pid, (role, _) in snapshot(root).items():
        found = _memory_kb(pid)
        if found is not None:
            now[role] = now.get(role, 0.0) + found[0] / 1024
            peak[role] = max(peak.get(role, 0.0), found[1] / 1024)
    return {role: {"now": round(now[role], 1), "peak": round(peak[role], 1)}
            for role in sorted(now)}


def _memory_kb(pid: int) -> tuple[int, int] | None:
    """(proportional resident set, peak resident set) of ``pid`` in KiB; ``None`` if it ended
    while we looked."""
    try:
        status = _fields((_PROC / str(pid) / "status").read_text())
        rollup = _PROC / str(pid) / "smaps_rollup"
        proportional = _fields(rollup.read_text()).get("Pss") if rollup.exists() else None
    except OSError:
        return None
    return (proportional or status.get("VmRSS", 0)), status.get("VmHWM", 0)


def _fields(text: str) -> dict[str, int]:
    """``Name:   123 kB`` lines as {name: 123}."""
    found = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        value = rest.split()
        if len(value) == 2 and value[1] == "kB" and value[0].isdigit():
            found[name] = int(value[0])
    return found


def snapshot(root: int) -> Snapshot:
    """The processes under ``root`` now (empty without ``/proc``)."""
    if not _PROC.is_dir():
        return {}
    return tree(root, processes())


def processes() -> list[Proc]:
    """Every process now (empty without ``/proc``)."""
    if not _PROC.is_dir():
        return []
    found = []
    for entry in _PROC.iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                pid, parent, ticks = parse_stat(stat)
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(
                    errors="replace")
                if any(mark in cmdline for mark in REAPING):
                    ticks += reaped_ticks(stat)
            except (OSError, ValueError, IndexError):
                continue  # the process ended while we looked
            found.append(Proc(pid, parent, ticks, cmdline))
    return found
