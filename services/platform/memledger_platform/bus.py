"""NATS JetStream plumbing shared by services: connection and the streams memledger owns."""

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import nats
import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)

MAX_PAYLOAD = 8 * 1024 * 1024
_DRAIN_SECONDS = 0.005
_DAY = 24 * 3600.0


def servers(url: str) -> list[str]:
    """The servers of ``url``: one URL, or several separated by commas (a cluster's nodes)."""
    return [part.strip() for part in url.split(",") if part.strip()]


async def connect(url: str, name: str) -> Client:
    """A connection that reconnects forever, to any of the servers ``url`` names (one, or a
    cluster's, comma-separated); a service outlives a NATS restart and a node's loss."""
    return await nats.connect(servers(url), name=name, max_reconnect_attempts=-1,
                              reconnect_time_wait=0.5, pending_size=64 * 1024 * 1024)


def stream_configs(subjects: Subjects, replicas: int = 1) -> list[StreamConfig]:
    """The events log (kept: the read models are rebuilt from it, and replayed by consumers),
    the intake work queue (a message leaves once ingest has committed or dead-lettered it: the
    tenants' commands and memledger's services') and the dead letters (kept 30 days for an
    operator to inspect). The events log is one stream per partition, if partitioned."""
    return [
        *(StreamConfig(name=events.events_stream, subjects=[events.all_events],
                       retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                       duplicate_window=120.0, num_replicas=replicas, allow_direct=True,
                       discard=DiscardPolicy.OLD) for events in subjects.every_partition()),
        StreamConfig(name=subjects.intake_stream,
                     subjects=[subjects.all_intake, subjects.all_service_intake],
                     retention=RetentionPolicy.WORK_QUEUE, storage=StorageType.FILE,
                     duplicate_window=120.0, num_replicas=replicas),
        StreamConfig(name=subjects.dead_letter_stream, subjects=[subjects.all_dead_letters],
                     retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                     max_age=30 * _DAY, num_replicas=replicas),
    ]


async def ensure_streams(js: JetStreamContext, subjects: Subjects, replicas: int = 1) -> None:
    """Create memledger's streams, or bring an existing one's config up to date."""
    for config in stream_configs(subjects, replicas):
        try:
            info = await js.stream_info(config.name or "")
            # the metadata is not ours to drop: it names the stream's deployment
            config.metadata = info.config.metadata
            await js.update_stream(config)
        except nats.js.errors.NotFoundError:
            log.info("creating JetStream stream %s", config.name)
            await js.add_stream(config)


@dataclass(frozen=True)
class Ack:
    stream: str
    seq: int
    duplicate: bool


class PublishRefused(Exception):
    """JetStream answered a publish with an error (e.g. a failed Expected-Last-Sequence)."""


class PipelinedPublisher:
    """JetStream publishes sent back to back, each with a future for its ack.

    Used instead of nats-py's ``publish_async``, whose reply handler raises (rather than
    failing the future) when JetStream answers with an error: the caller then waits forever.
    Here an error ack fails its future, and ``settle`` bounds the wait.
    """

    def __init__(self, nc: Client) -> None:
        self._nc = nc
        self._prefix = ""
        self._next = 0
        self._pending: dict[str, asyncio.Future[Ack]] = {}
        self._sub: Subscription | None = None

    async def start(self) -> None:
        self._prefix = f"{self._nc.new_inbox()}."
        self._sub = await self._nc.subscribe(f"{self._prefix}*", cb=self._on_ack)

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]
                      ) -> "asyncio.Future[Ack]":
        self._next += 1
        token = str(self._next)
        future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()
        self._pending[token] = future
        await self._nc.publish(subject, payload, reply=self._prefix + token, headers=headers)
        return future

    async def settle(self, futures: Sequence["asyncio.Future[Ack]"], limit_seconds: float
                     ) -> list[Ack | BaseException]:
        """Every ack or error, in order; one unanswered after ``limit_seconds`` is a timeout."""
        done, _ = await asyncio.wait(futures, timeout=limit_seconds) if futures else (set(), set())
        outcomes: list[Ack | BaseException] = []
        for future in futures:
            if future in done:
                outcomes.append(future.exception() or future.result())
            else:
                future.cancel()
                outcomes.append(TimeoutError(f"no JetStream ack within {limit_seconds}s"))
        self._pending = {k: f for k, f in self._pending.items() if not f.done()}
        return outcomes

    async def close(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()

    async def _on_ack(self, msg: Msg) -> None:
        future = self._pending.pop(msg.subject[len(self._prefix):], None)
        if future is None or future.done():
            return
        if not msg.data:  # a status message, e.g. 503 "no responders": no such stream
            status = (msg.headers or {}).get("Status", "?")
            future.set_exception(PublishRefused(f"no stream answered (status {status})"))
            return
        body = orjson.loads(msg.data)
        if "error" in body:
            future.set_exception(PublishRefused(str(body["error"])))
        else:
            future.set_result(Ack(body["stream"], body["seq"], body.get("duplicate", False)))


async def fetch_ready(sub: JetStreamContext.PullSubscription, batch: int, wait: float,
                      until: float = 0.0) -> list[Msg]:
    """The next messages of a pull consumer, as soon as there is one: wait up to ``wait`` for
    the first, then take what is already there (up to ``batch``) without lingering; but not
    before ``until`` (``time.monotonic``), so that what arrives meanwhile is taken too.

    (``sub.fetch(batch)`` alone lingers until ``batch`` messages arrive or its timeout ends:
    under light load every message would wait the whole timeout.)"""
    try:
        first = await sub.fetch(1, timeout=wait)
    except TimeoutError:
        return []
    if batch <= 1:
        return first
    if (early := until - time.monotonic()) > 0:
        await asyncio.sleep(early)
    return first + await fetch_more(sub, batch - 1)


async def fetch_more(sub: JetStreamContext.PullSubscription, batch: int) -> list[Msg]:
    """Up to ``batch`` messages of a pull consumer that are there now (or within a moment)."""
    try:
        return await sub.fetch(batch, timeout=_DRAIN_SECONDS)
    except TimeoutError:
        return []
