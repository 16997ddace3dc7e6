"""``Recorder``: where the query service sends the retrievals it audits.

Only ingest writes the event store, so an audited retrieval is recorded by a
``record_retrieval`` command, like any client's write. The adapter sends it over NATS intake on
the query service's own connection; the fake keeps what it was given.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memledger_schemas.commands import CommandBase, RecordRetrieval


@dataclass(frozen=True)
class Recorded:
    retrieval_id: str
    position: int
    """The position of the ``retrieval.performed`` event (read it back with ``min_position``)."""


class RecordingFailed(Exception):
    """The retrieval was not recorded (no connection, no answer in time, or refused)."""


class Recorder(ABC):
    @abstractmethod
    async def record(self, tenant: str, command: RecordRetrieval) -> Recorded:
        """Record ``command`` through ingest and return once it is committed, or raise
        ``RecordingFailed``. Sending the same command again records nothing twice (its
        idempotency key is its retrieval id)."""


class NoRecorder(Recorder):
    """A query service that cannot record (none configured): every audit fails."""

    async def record(self, tenant: str, command: RecordRetrieval) -> Recorded:
        raise RecordingFailed("this query service has no way to record retrievals")


class Sender(Protocol):
    """Sends commands to intake and returns each one's result body (``IntakeClient``)."""

    async def send(self, tenant: str, commands: list[CommandBase]) -> list[dict[str, Any]]: ...


class IntakeRecorder(Recorder):
    """Records over NATS intake, through a sender attached once the service has connected
    (and detached when it disconnects): until then, recording fails."""

    def __init__(self, sender: Sender | None = None) -> None:
        self._sender = sender

    def attach(self, sender: Sender | None) -> None:
        self._sender = sender

    async def record(self, tenant: str, command: RecordRetrieval) -> Recorded:
        if self._sender is None:
            raise RecordingFailed("not connected to NATS (yet)")
        try:
            (body,) = await self._sender.send(tenant, [command])
        except TimeoutError:
            raise RecordingFailed("ingest did not answer in time") from None
        if "error" in body:
            raise RecordingFailed(str(body["error"].get("message", body["error"])))
        return Recorded(str(command.retrieval_id), int(body["position"]))


class MemoryRecorder(Recorder):
    """Keeps every command it records, at made-up positions (for tests)."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, RecordRetrieval]] = []

    async def record(self, tenant: str, command: RecordRetrieval) -> Recorded:
        self.recorded.append((tenant, command))
        return Recorded(str(command.retrieval_id), len(self.recorded))

    @property
    def commands(self) -> Sequence[RecordRetrieval]:
        return [command for _, command in self.recorded]
