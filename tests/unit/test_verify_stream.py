"""``memledger verify`` reads the events stream through an ephemeral consumer: in a JetStream
cluster a pull made before the new consumer has a leader answers "no responders", which is a
wait, not a failure; one that never stops answering so still fails."""

from types import SimpleNamespace
from typing import Any

import pytest
from nats.js.errors import ServiceUnavailableError

from memledger_cli import verify_stream
from memledger_schemas.subjects import Subjects


class Pulls:
    """A pull subscription that answers "no responders" ``unavailable`` times, then every
    message in one batch."""

    def __init__(self, messages: list[Any], unavailable: int) -> None:
        self.messages, self.unavailable, self.pulls = messages, unavailable, 0

    async def fetch(self, batch: int, timeout: float) -> list[Any]:  # noqa: ASYNC109
        self.pulls += 1
        if self.pulls <= self.unavailable:
            raise ServiceUnavailableError
        return self.messages[:batch]

    async def unsubscribe(self) -> None:
        return None


class Stream:
    """What ``_messages`` asks of JetStream: the stream's state, and a pull subscription."""

    def __init__(self, pulls: Pulls) -> None:
        self.pulls = pulls

    async def stream_info(self, name: str) -> Any:
        count = len(self.pulls.messages)
        return SimpleNamespace(state=SimpleNamespace(last_seq=count, messages=count))

    async def pull_subscribe(self, *args: Any, **kwargs: Any) -> Pulls:
        return self.pulls


def _message(seq: int, count: int) -> Any:
    return SimpleNamespace(headers={}, metadata=SimpleNamespace(
        sequence=SimpleNamespace(stream=seq), num_pending=count - seq))


async def _read(stream: Stream) -> list[Any]:
    return [m async for m in verify_stream._messages(stream, Subjects())]  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verify_stream, "UNAVAILABLE_PAUSE_SECONDS", 0)


async def test_pulls_answered_no_responders_are_made_again_until_the_consumer_answers() -> None:
    messages = [_message(seq, 3) for seq in (1, 2, 3)]
    pulls = Pulls(messages, unavailable=5)
    assert await _read(Stream(pulls)) == messages
    assert pulls.pulls == 6


async def test_a_consumer_that_never_answers_still_fails() -> None:
    pulls = Pulls([_message(1, 1)], unavailable=verify_stream.UNAVAILABLE_RETRIES + 1)
    with pytest.raises(ServiceUnavailableError):
        await _read(Stream(pulls))
    assert pulls.pulls == verify_stream.UNAVAILABLE_RETRIES + 1
