"""Resident memory of every process of a private server, by role, sampled over a soak: the
``memledger up`` process (ingest and query), its relay, projector and enricher, PostgreSQL (the
postmaster and its backends, summed: shared buffers count once per process that touched them)
and nats-server. Reported at start and end, with a least-squares slope in MB per minute."""

import os
import time
from dataclasses import dataclass, field

import psutil

ROLES = ("server", "relay", "projector", "enricher", "postgres", "nats-server")
_MB = 1024 * 1024


def _role(proc: psutil.Process) -> str | None:
    try:
        name, cmdline = proc.name(), proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return None
    if name in ("postgres", "nats-server"):
        return name
    if "memledger_cli" in cmdline and cmdline[-1] in ("up", "relay", "projector", "enricher"):
        return "server" if cmdline[-1] == "up" else cmdline[-1]
    return None


def resident_mb() -> dict[str, float]:
    """RSS per role, of this process's descendants (the private server and all it started)."""
    found = dict.fromkeys(ROLES, 0.0)
    for proc in psutil.Process(os.getpid()).children(recursive=True):
        role = _role(proc)
        try:
            if role is not None:
                found[role] += proc.memory_info().rss / _MB
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@dataclass
class MemoryTrace:
    started: float = field(default_factory=time.monotonic)
    samples: list[tuple[float, dict[str, float]]] = field(default_factory=list)

    def sample(self) -> None:
        self.samples.append(((time.monotonic() - self.started) / 60, resident_mb()))

    def summary(self) -> dict[str, dict[str, float]]:
        """Per role: MB at the first and the last sample, and the slope in MB/min."""
        if not self.samples:
            return {}
        minutes = [m for m, _ in self.samples]
        return {role: {"start_mb": round(self.samples[0][1][role], 1),
                       "end_mb": round(self.samples[-1][1][role], 1),
                       "slope_mb_per_min": round(slope(minutes, [s[role] for _, s in
                                                                 self.samples]), 2)}
                for role in ROLES}


def slope(xs: list[float], ys: list[float]) -> float:
    """The least-squares slope of ``ys`` over ``xs`` (0 with fewer than two distinct xs)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    spread = sum((x - mean_x) ** 2 for x in xs)
    if spread == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
