"""The consumer's acknowledgement policy, against a fake JetStream subscription."""

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from memledger_platform.consumer import (
    Batch,
    Consumer,
    Handling,
    Poison,
    Resubscribe,
    Subscription,
    Transient,
)
from memledger_schemas.subjects import HDR_DLQ_REASON, Subjects
from tests.support import eventually

SUBJECTS = Subjects("memledger")


class FakeMsg:
    def __init__(self, seq: int) -> None:
        self.seq = seq
        self.subject = f"memledger.evt.acme.notes.memory.asserted.{seq}"
        self.data = b'{"n": %d}' % seq
        self.headers: dict[str, str] = {}
        self.metadata = SimpleNamespace(sequence=SimpleNamespace(stream=seq), num_pending=0)
        self.settled: list[str] = []

    async def ack(self) -> None:
        self.settled.append("ack")

    async def term(self) -> None:
        self.settled.append("term")

    async def nak(self, delay: float | None = None) -> None:
        self.settled.append(f"nak {delay}")

    async def in_progress(self) -> None:
        self.settled.append("in progress")


class FakeSub:
    def __init__(self, msgs: list[FakeMsg]) -> None:
        self.msgs = msgs

    async def fetch(self, batch: int, timeout: float) -> list[FakeMsg]:  # noqa: ASYNC109
        if not self.msgs:
            await asyncio.sleep(0)
            raise TimeoutError
        taken, self.msgs = self.msgs[:batch], self.msgs[batch:]
        return taken

    async def unsubscribe(self) -> None:
        return None


@dataclass
class FakeJs:
    """Each subscription delivers the next list of ``deliveries``."""

    deliveries: list[list[FakeMsg]]
    published: list[tuple[str, bytes, dict[str, str]]] = field(default_factory=list)
    configs: list[Any] = field(default_factory=list)

    async def pull_subscribe(self, subject: str, durable: str, stream: str, config: Any
                             ) -> FakeSub:
        self.configs.append(config)
        return FakeSub(self.deliveries.pop(0) if self.deliveries else [])

    async def delete_consumer(self, stream: str, durable: str) -> None:
        return None

    async def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        self.published.append((subject, data, headers))


class Recorder(Handling):
    """Handles batches as told: raises the next of ``failures`` (``None``: succeeds)."""

    def __init__(self, *failures: Exception | None, poison: int | None = None) -> None:
        self.failures = list(failures)
        self.poison = poison
        self.seen: list[list[int]] = []

    async def handle(self, batch: Batch) -> None:
        self.seen.append([m.metadata.sequence.stream for m in batch.pending])
        for msg in batch.pending:
            if msg.metadata.sequence.stream == self.poison:
                await batch.dead_letter(msg, "cannot be read")
        if self.failures and (failure := self.failures.pop(0)) is not None:
            raise failure


def spec(**more: Any) -> Subscription:
    return Subscription(name="projector", stream="EVENTS", durable="d", subject="memledger.evt.>",
                        batch=10, retry_seconds=0.001, **more)


async def settle(handler: Recorder, msgs: list[FakeMsg], **more: Any) -> FakeJs:
    js = FakeJs([])
    await Consumer(js, SUBJECTS, spec(**more), handler).handle(msgs)  # type: ignore[arg-type]
    return js


async def test_a_handled_batch_is_acked_after_the_handler_returns() -> None:
    msgs = [FakeMsg(1), FakeMsg(2)]

    await settle(Recorder(), msgs)

    assert [m.settled for m in msgs] == [["ack"], ["ack"]]


async def test_an_ordered_batch_that_fails_for_now_is_kept_and_retried_in_place() -> None:
    msgs = [FakeMsg(1), FakeMsg(2)]
    handler = Recorder(Transient("database away"), Transient("still away"), None)

    await settle(handler, msgs)

    assert handler.seen == [[1, 2], [1, 2], [1, 2]]
    assert [m.settled for m in msgs] == [["in progress", "in progress", "ack"]] * 2


async def test_an_unordered_batch_that_fails_for_now_is_given_back_with_a_delay() -> None:
    msgs = [FakeMsg(1), FakeMsg(2)]

    await settle(Recorder(Transient("model away")), msgs, ordered=False, nak_delay=5.0)

    assert [m.settled for m in msgs] == [["nak 5.0"], ["nak 5.0"]]


async def test_a_poison_message_among_good_ones_is_dead_lettered_and_the_rest_acked() -> None:
    msgs = [FakeMsg(1), FakeMsg(2), FakeMsg(3)]

    js = await settle(Recorder(poison=2), msgs)

    assert [m.settled for m in msgs] == [["ack"], ["term"], ["ack"]]
    [(subject, data, headers)] = js.published
    assert subject == SUBJECTS.dead_letter("projector", "acme")
    assert (data, headers[HDR_DLQ_REASON]) == (b'{"n": 2}', "cannot be read")


async def test_a_retried_batch_does_not_hand_over_a_dead_lettered_message_again() -> None:
    msgs = [FakeMsg(1), FakeMsg(2)]
    handler = Recorder(Transient("database away"), None, poison=1)

    await settle(handler, msgs)

    assert handler.seen == [[1, 2], [2]]
    assert [m.settled for m in msgs] == [["term"], ["in progress", "ack"]]


async def test_a_batch_the_handler_calls_poison_is_dead_lettered_whole() -> None:
    msgs = [FakeMsg(1), FakeMsg(2)]

    js = await settle(Recorder(Poison("refused")), msgs)

    assert [m.settled for m in msgs] == [["term"], ["term"]]
    assert [h[HDR_DLQ_REASON] for _, _, h in js.published] == ["refused", "refused"]


async def test_after_its_last_attempt_a_batch_is_dead_lettered_with_the_reason() -> None:
    msgs = [FakeMsg(1)]

    js = await settle(Recorder(Transient("timed out"), Transient("timed out")), msgs,
                      max_attempts=2)

    assert msgs[0].settled == ["in progress", "term"]
    assert js.published[0][2][HDR_DLQ_REASON] == "gave up after 2 attempts: timed out"


async def test_a_batch_that_skips_messages_resubscribes_from_the_handler_position() -> None:
    positions = iter([3, 3])
    starts: list[int] = []

    async def start() -> int:
        starts.append(position := next(positions))
        return position

    stop = asyncio.Event()
    handler = Recorder()
    # The first subscription redelivers out of order (7 before 4); the second in order.
    js = FakeJs([[FakeMsg(7)], [FakeMsg(4), FakeMsg(5)]])
    consumer = Consumer(js, SUBJECTS, spec(start=start), handler)  # type: ignore[arg-type]
    running = asyncio.create_task(consumer.run(stop))

    async def caught_up() -> None:
        assert handler.seen == [[4, 5]]

    try:
        await eventually(caught_up)
    finally:
        stop.set()
        await running
    assert starts == [3, 3]
    assert [c.opt_start_seq for c in js.configs] == [4, 4]


async def test_a_handler_that_asks_to_resubscribe_starts_again_from_its_position() -> None:
    stop = asyncio.Event()
    handler = Recorder(Resubscribe("index reopened"), None)
    js = FakeJs([[FakeMsg(1)], [FakeMsg(1)]])

    async def start() -> int:
        return 0

    consumer = Consumer(js, SUBJECTS, spec(start=start), handler)  # type: ignore[arg-type]
    running = asyncio.create_task(consumer.run(stop))

    async def handled_twice() -> None:
        assert handler.seen == [[1], [1]]

    try:
        await eventually(handled_twice)
    finally:
        stop.set()
        await running
    assert len(js.configs) >= 2


@pytest.mark.parametrize("ordered", [True, False])
async def test_messages_fetched_as_one_batch_can_be_settled_one_by_one(ordered: bool) -> None:
    msgs = [FakeMsg(1), FakeMsg(2), FakeMsg(3)]
    handler = Recorder(None, Poison("bad"), None)

    await settle(handler, msgs, each=True, ordered=ordered)

    assert sorted(handler.seen) == [[1], [2], [3]]
    assert [m.settled for m in msgs] == [["ack"], ["term"], ["ack"]]



class ArrivingSub(FakeSub):
    """Each message can be fetched from its arrival on (seconds after the first fetch)."""

    def __init__(self, arrivals: list[tuple[float, FakeMsg]]) -> None:
        super().__init__([])
        self.arrivals = arrivals
        self.start: float | None = None

    async def fetch(self, batch: int, timeout: float) -> list[FakeMsg]:  # noqa: ASYNC109
        loop = asyncio.get_running_loop()
        self.start = loop.time() if self.start is None else self.start
        if not self.arrivals:
            await asyncio.sleep(0)
            raise TimeoutError
        first_at = self.start + self.arrivals[0][0]
        if first_at - loop.time() > timeout:
            await asyncio.sleep(timeout)
            raise TimeoutError
        await asyncio.sleep(max(0.0, first_at - loop.time()))
        now = loop.time() - self.start
        taken = [m for at, m in self.arrivals if at <= now][:batch]
        self.arrivals = self.arrivals[len(taken):]
        return taken


async def handled_as_they_arrive(pace: float) -> list[list[int]]:
    """Message 1 at once, 2 soon after, 3 and 4 a while later."""
    sub = ArrivingSub([(0.0, FakeMsg(1)), (0.05, FakeMsg(2)), (0.3, FakeMsg(3)),
                       (0.3, FakeMsg(4))])
    handler, stop, js = Recorder(), asyncio.Event(), FakeJs([])

    async def pull_subscribe(*_: Any, **__: Any) -> ArrivingSub:
        return sub

    js.pull_subscribe = pull_subscribe  # type: ignore[method-assign]
    consumer = Consumer(js, SUBJECTS, spec(pace_seconds=pace), handler)  # type: ignore[arg-type]
    running = asyncio.create_task(consumer.run(stop))

    async def all_handled() -> None:
        assert sum(map(len, handler.seen)) == 4

    try:
        await eventually(all_handled)
    finally:
        stop.set()
        await running
    return handler.seen


async def test_a_batch_soon_after_the_last_waits_out_the_pace_and_takes_what_arrived() -> None:
    # the first, after a quiet spell, is taken at once; the next waits for the others
    assert await handled_as_they_arrive(pace=0.6) == [[1], [2, 3, 4]]


async def test_without_a_pace_a_message_is_taken_as_soon_as_it_arrives() -> None:
    assert await handled_as_they_arrive(pace=0.0) == [[1], [2], [3, 4]]
