"""Helpers for integration tests that read what landed in a JetStream stream."""

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy


async def stream_messages(js: JetStreamContext, stream: str, subject: str) -> list[Msg]:
    """Every message now in ``stream`` (under ``subject``), in sequence order."""
    total = (await js.stream_info(stream)).state.messages
    sub = await js.pull_subscribe(subject, stream=stream, config=ConsumerConfig(
        ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL, inactive_threshold=10.0))
    found: list[Msg] = []
    try:
        while len(found) < total:
            found.extend(await sub.fetch(min(500, total - len(found)), timeout=5.0))
    finally:
        await sub.unsubscribe()
    return found


def sequence(msg: Msg) -> int:
    return int(msg.metadata.sequence.stream)


async def message_count(js: JetStreamContext, stream: str) -> int:
    return int((await js.stream_info(stream)).state.messages)
