"""NATS JetStream plumbing shared by services: connection and the streams memledger owns."""

import logging

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import DiscardPolicy, RetentionPolicy, StorageType, StreamConfig

from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)

MAX_PAYLOAD = 8 * 1024 * 1024
_DAY = 24 * 3600.0


async def connect(url: str, name: str) -> Client:
    """A connection that reconnects forever; a service outlives a NATS restart."""
    return await nats.connect(url, name=name, max_reconnect_attempts=-1, reconnect_time_wait=0.5,
                              pending_size=64 * 1024 * 1024)


def stream_configs(subjects: Subjects, replicas: int = 1) -> list[StreamConfig]:
    """The events log (kept: the read models are rebuilt from it, and replayed by consumers),
    the intake work queue (a message leaves once ingest has committed or dead-lettered it) and
    the dead letters (kept 30 days for an operator to inspect)."""
    return [
        StreamConfig(name=subjects.events_stream, subjects=[subjects.all_events],
                     retention=RetentionPolicy.LIMITS, storage=StorageType.FILE,
                     duplicate_window=120.0, num_replicas=replicas, allow_direct=True,
                     discard=DiscardPolicy.OLD),
        StreamConfig(name=subjects.intake_stream, subjects=[subjects.all_intake],
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
            await js.stream_info(config.name or "")
            await js.update_stream(config)
        except nats.js.errors.NotFoundError:
            log.info("creating JetStream stream %s", config.name)
            await js.add_stream(config)
