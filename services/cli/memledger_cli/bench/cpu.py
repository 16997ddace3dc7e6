"""CPU time of a private server's processes, by role, so a bench can report what each stage
costs per operation (user + system seconds; the cores are shared, wall time is not cost)."""

import contextlib
from collections import defaultdict

import psutil

ROLES = ("relay", "projector", "enricher", "lifecycle", "vectors", "query", "ingest")


def role(proc: psutil.Process) -> str:
    """``up`` (ingest, query and the vector projector in one process), a service's name,
    ``vector-index`` (the index's own process), ``postgres`` or ``nats-server``."""
    name, cmdline = proc.name(), " ".join(proc.cmdline())
    if "postgres" in name or "postgres" in cmdline.split(" ")[0]:
        return "postgres"
    if "nats-server" in name or "nats-server" in cmdline:
        return "nats-server"
    if "vectorindex" in cmdline:
        return "vector-index"
    for service in ROLES:
        if f"memledger_cli {service}" in cmdline:
            return service
    return "up" if "memledger_cli up" in cmdline else name


def cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU seconds so far of ``pid`` and its descendants, by role."""
    found: dict[str, float] = defaultdict(float)
    with contextlib.suppress(psutil.NoSuchProcess):
        root = psutil.Process(pid)
        for proc in [root, *root.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                times = proc.cpu_times()
                found[role(proc)] += times.user + times.system
    return dict(found)


def ms_per_operation(before: dict[str, float], after: dict[str, float], operations: int
                     ) -> dict[str, float]:
    """CPU milliseconds per operation of each role between two ``cpu_seconds`` readings."""
    return {r: round((after[r] - before.get(r, 0.0)) * 1000 / max(1, operations), 3)
            for r in sorted(after)}
