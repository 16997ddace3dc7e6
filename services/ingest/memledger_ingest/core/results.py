"""What a committed command returns, and what an idempotency key remembers of it."""

import hashlib
from dataclasses import dataclass
from typing import Any

from memledger_ingest.domain.decide import Context, Decision
from memledger_ingest.domain.errors import DomainError
from memledger_platform.eventstore import IdempotencyRecord, NewEvent
from memledger_platform.eventstore.port import IdempotentResult
from memledger_schemas.commands import CommandBase, SetSpacePolicy


@dataclass(frozen=True)
class CommandResult:
    """What one accepted command wrote (or, for a retry of an idempotent command, had written)."""

    command: str
    event_ids: tuple[str, ...]
    positions: tuple[int, ...]
    stream_version: int
    ids: dict[str, str]
    duplicate: bool = False

    @property
    def position(self) -> int:
        return self.positions[-1]


class Rejected(Exception):
    """A command of a submission was refused; nothing of the submission was written."""

    def __init__(self, index: int, error: DomainError) -> None:
        super().__init__(f"command {index}: {error}")
        self.index = index
        self.error = error


def command_name(cmd: CommandBase) -> str:
    return str(getattr(cmd, "command", type(cmd).__name__))


def encoded(cmd: CommandBase) -> bytes:
    """The command's JSON (``model_dump_json``'s, as bytes): what a request is hashed as."""
    return cmd.__pydantic_serializer__.to_json(cmd)


def request_hash(cmd: CommandBase, json: bytes | None = None) -> str:
    """What an idempotency key remembers of the request; ``json``: ``encoded(cmd)`` if made
    already (the writer makes it on submission, to size the group: not serialised again)."""
    text = encoded(cmd) if json is None else json
    if isinstance(cmd, SetSpacePolicy):  # a partial update: what it names is the request too
        text += b"|" + ",".join(sorted(cmd.model_fields_set)).encode()
    return hashlib.sha256(text).hexdigest()[:32]


def key_record(ctx: Context, key: str, request_hash: str, events: list[NewEvent],
                cmd: CommandBase, decision: Decision) -> IdempotencyRecord:
    response: dict[str, Any] = {"command": command_name(cmd), "ids": decision.ids,
                                "event_ids": [str(e.event_id) for e in events]}
    return IdempotencyRecord(ctx.tenant, key, request_hash, events[0].stream_id,
                             events[0].stream_version, events[-1].stream_version, response)


def replayed(earlier: IdempotentResult) -> CommandResult:
    record = earlier.record
    return CommandResult(
        command=record.response["command"], event_ids=tuple(record.response["event_ids"]),
        positions=earlier.positions, stream_version=record.last_version,
        ids=record.response["ids"], duplicate=True)
