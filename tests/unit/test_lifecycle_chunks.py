"""A lifecycle tick decides in chunks: the archives of a fold taken a chunk at a time are the
same decisions, in the same order, whatever the chunk size, and the scheduler sends the same
commands with a chunk of 1, of 7 or of everything."""

from datetime import timedelta
from typing import Any, cast
from uuid import UUID

import pytest

from memledger_lifecycle.fold import fold
from memledger_lifecycle.scheduler import Scheduler
from memledger_platform.clock import FixedClock
from memledger_platform.intake_client import IntakeClient
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects
from tests.unit.test_lifecycle_fold import T0, Log

NOW = T0 + timedelta(days=40)


def _log() -> Log:
    """Spaces archiving by retention, by decay and over ``max_items``, one ecosystem item
    (never archived), items of two kinds, out of id order."""
    log = (Log().policy(T0, 1, retention_days={"event": 10})
           .add("space.policy_set", T0, space="decaying", policy_version=1,
                decay_half_life_days={"observation": 5.0}, forget_below=0.2)
           .add("space.policy_set", T0, space="bounded", policy_version=1, max_items=4))
    for n in range(23):
        item = str(UUID(int=(n * 7919) % 97 + 1))
        space = ("main", "decaying", "bounded")[n % 3]
        log.item(item, T0 + timedelta(days=n), kind=("event", "observation")[n % 2],
                 importance=(n % 5) / 5, confidence=1 - (n % 4) / 10,
                 **({"layer": "ecosystem"} if n == 6 else {}), space=space)
    return log


def test_archives_in_chunks_of_1_7_or_all_are_the_same_decisions_in_the_same_order() -> None:
    lifecycle = fold(_log().events)
    whole = lifecycle.archives(NOW)
    assert len(whole) > 7  # more than a chunk: chunking is exercised
    assert {a.rule for a in whole} == {"retention", "decay", "max_items"}
    for size in (1, 7, len(whole)):
        chunks = list(lifecycle.archive_chunks(NOW, size))
        assert all(0 < len(chunk) <= size for chunk in chunks)
        assert [a for chunk in chunks for a in chunk] == whole
    assert whole == sorted(whole, key=lambda a: (a.tenant, a.item_id))


class _Intake:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[c.CommandBase]]] = []

    async def send(self, tenant: str, commands: list[c.CommandBase]) -> list[dict[str, Any]]:
        self.sent.append((tenant, list(commands)))
        return [{} for _ in commands]


async def _sent(chunk: int) -> list[tuple[str, list[c.CommandBase]]]:
    intake = _Intake()
    scheduler = Scheduler(cast(Any, None), Subjects("ml"), cast(IntakeClient, intake),
                          interval_seconds=60, clock=FixedClock(NOW), chunk=chunk)
    for event in _log().events:
        scheduler.fold.apply(event)
        scheduler.forming.apply(event)
    await scheduler.tick()
    return intake.sent


@pytest.mark.parametrize("chunk", [1, 7, 1_000_000])
async def test_a_tick_sends_the_same_commands_whatever_its_chunk(chunk: int) -> None:
    sent = await _sent(chunk)
    assert sent == await _sent(3)
    archived = [cmd for _, batch in sent for cmd in batch if isinstance(cmd, c.ArchiveMemory)]
    assert len(archived) > 7


def test_a_tick_reads_only_the_items_of_spaces_a_policy_governs() -> None:
    log = _log().add("space.policy_set", T0, space="held", policy_version=1, legal_hold=True,
                     retention_days={"event": 1})
    for n in range(30):
        log.item(str(UUID(int=1_000 + n)), T0, kind="event",
                 space=("unpoliced", "held")[n % 2])
    lifecycle = fold(log.events)
    read: list[int] = []
    item = lifecycle.table.item

    def counted(row: int, *, vector: bool = True) -> Any:
        read.append(row)
        return item(row, vector=vector)

    lifecycle.table.item = counted  # type: ignore[method-assign]
    archives = lifecycle.archives(NOW)
    governed = {"main", "decaying", "bounded"}
    assert {a.space for a in archives} <= governed
    assert read
    assert {lifecycle.table.text(r, "space") for r in read} <= governed
