"""A writer that keeps publishing to a JetStream stream as a client does (each message with its
own ``Nats-Msg-Id``, sent again until acknowledged), and an audit of what the stream holds."""

import asyncio
import contextlib
import functools
import time
from collections import Counter
from dataclasses import dataclass, field

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StreamInfo

from memledger_schemas.subjects import HDR_MSG_ID
from tests.support import eventually


@dataclass
class Writer:
    """Publishes ``<prefix>-<n>`` for n = 0, 1, ... to ``subject``, one at a time, until
    stopped; records when each was acknowledged and how many tries failed."""

    js: JetStreamContext
    subject: str
    prefix: str = "w"
    acked: dict[str, float] = field(default_factory=dict)
    """Message id -> ``time.monotonic()`` of its acknowledgement."""
    failed_tries: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        n = 0
        while not self._stop.is_set():
            msg_id = f"{self.prefix}-{n}"
            if await self._try(msg_id):
                self.acked[msg_id] = time.monotonic()
                n += 1
            else:
                await asyncio.sleep(0.05)

    async def _try(self, msg_id: str) -> bool:
        try:
            await self.js.publish(self.subject, msg_id.encode(), timeout=2.0,
                                  headers={HDR_MSG_ID: msg_id})
        except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as error:
            self.failed_tries += 1
            self.errors[type(error).__name__] += 1
            return False
        return True

    def acks_after(self, moment: float) -> int:
        return sum(1 for at in self.acked.values() if at > moment)

    def stop(self) -> None:
        self._stop.set()


async def running(writer: Writer) -> "asyncio.Task[None]":
    return asyncio.create_task(writer.run())


async def stopped(writer: Writer, task: "asyncio.Task[None]") -> None:
    writer.stop()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(task, 30)


async def stored_ids(js: JetStreamContext, stream: str) -> Counter[str]:
    """How many times each message id is in ``stream`` (every sequence read back). A node just
    started again may leave JetStream answering 503 for a moment (under load, seconds): each
    read is asked again until it answers, up to a minute."""
    last = (await eventually(lambda: _info(js, stream), timeout=60)).state.last_seq
    seen: Counter[str] = Counter()
    for seq in range(1, last + 1):
        headers = await eventually(functools.partial(_headers, js, stream, seq), timeout=60)
        if headers is not None:
            seen[headers.get(HDR_MSG_ID, "")] += 1
    return seen


async def _headers(js: JetStreamContext, stream: str, seq: int) -> dict[str, str] | None:
    """The headers of message ``seq`` (``None``: it is not in the stream); JetStream
    unavailable or silent is "not yet"."""
    try:
        msg = await js.get_msg(stream, seq=seq)
    except nats.js.errors.NotFoundError:
        return None
    except (nats.js.errors.ServiceUnavailableError, nats.errors.TimeoutError) as error:
        raise AssertionError(f"no answer for message {seq}: {error!r}") from None
    return dict(msg.headers or {})


async def _info(js: JetStreamContext, stream: str) -> StreamInfo:
    """The stream's info; no answer (a leader being elected) is "not yet"."""
    try:
        return await js.stream_info(stream)
    except (nats.errors.Error, nats.js.errors.Error, TimeoutError) as error:
        raise AssertionError(f"no stream info: {error!r}") from None


async def stream_leader(js: JetStreamContext, stream: str) -> str:
    info = await _info(js, stream)
    assert info.cluster is not None
    assert info.cluster.leader, "the stream has no leader yet"
    return info.cluster.leader


async def all_replicas_current(js: JetStreamContext, stream: str) -> None:
    """Passes once the stream has a leader and every other replica is current with it."""
    info = await _info(js, stream)
    assert info.cluster is not None
    assert info.cluster.leader
    replicas = info.cluster.replicas or []
    assert len(replicas) == 2, replicas
    assert all(r.current and not r.offline for r in replicas), replicas
