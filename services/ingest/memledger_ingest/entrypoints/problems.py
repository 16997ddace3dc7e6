"""How a refusal is told to a client, the same way over HTTP and NATS intake.

Shape: ``{"error": {"status", "code", "message", "fields": [{"path", "reason"}], ...}}`` where
``path`` is a dotted field path into the request body (``commands.3.content``).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from memledger_ingest.core.commit_watch import CommitTimedOut, WriterStopping
from memledger_ingest.core.writer import CommandResult, Rejected
from memledger_ingest.domain.errors import Conflict, DomainError, Invalid, NotFound
from memledger_schemas.commands import BY_NAME


@dataclass(frozen=True)
class Problem:
    status: int
    code: str
    message: str
    fields: tuple[dict[str, str], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        error = {"status": self.status, "code": self.code, "message": self.message,
                 "fields": list(self.fields), **self.extra}
        return {"error": error}


def invalid_request(error: ValidationError, prefix: Sequence[str | int] = ()) -> Problem:
    """422 listing every field at fault."""
    fields = tuple({"path": _path([*prefix, *problem["loc"]]), "reason": problem["msg"]}
                   for problem in error.errors(include_url=False))
    summary = "; ".join(f"{f['path'] or 'body'}: {f['reason']}" for f in fields[:5])
    return Problem(422, "invalid_request", summary, fields)


def malformed(path: str, reason: str) -> Problem:
    return Problem(422, "invalid_request", f"{path}: {reason}", ({"path": path,
                                                                    "reason": reason},))


def repeated(path: str) -> Problem:
    """422 for a key an object of the body holds twice (parsers differ on which value wins)."""
    return malformed(path, "this key appears twice in one JSON object; send it once")


def not_json(content_type: str) -> Problem:
    """415 for a body labelled as something other than JSON."""
    reason = f"{content_type!r} is not JSON: send the body as application/json"
    return Problem(415, "unsupported_media_type", reason,
                   ({"path": "header.Content-Type", "reason": reason},))


def refused(error: Rejected | DomainError, batch: bool = False) -> Problem:
    """The response for a command refused by the domain (``batch``: say which command)."""
    index = error.index if isinstance(error, Rejected) else 0
    cause = error.error if isinstance(error, Rejected) else error
    where = {"command_index": index} if batch else {}
    prefix = f"commands.{index}." if batch else ""
    if isinstance(cause, NotFound):
        return Problem(404, "not_found", str(cause), extra=where)
    if isinstance(cause, Conflict):
        return Problem(409, "conflict", str(cause),
                       extra={"current_version": cause.current_version, **where})
    if isinstance(cause, Invalid):
        path = prefix + cause.field
        return Problem(422, "invalid_request", f"{path}: {cause.reason}",
                       ({"path": path, "reason": cause.reason},), extra=where)
    return Problem(400, "refused", str(cause), extra=where)


def unavailable(error: BaseException) -> Problem:
    """503, to be retried: the writer gave up on the commit, or the event store failed."""
    if isinstance(error, CommitTimedOut | WriterStopping):
        code = "commit_timeout" if isinstance(error, CommitTimedOut) else "stopping"
        return Problem(503, code, str(error),
                       extra={"retry_after_seconds": error.retry_after_seconds})
    return Problem(503, "unavailable", f"the event store is not available: {error}")


def result_body(result: CommandResult) -> dict[str, Any]:
    # Tuples as they are: orjson writes them as arrays without a copy.
    return {"command": result.command, "event_ids": result.event_ids,
            "position": result.position, "positions": result.positions,
            "stream_version": result.stream_version, "ids": result.ids,
            "duplicate": result.duplicate}


def batch_body(results: Sequence[CommandResult]) -> dict[str, Any]:
    return {"position": max(r.position for r in results),
            "results": [result_body(r) for r in results]}


def _path(loc: Sequence[str | int]) -> str:
    # Drop the discriminator tag pydantic inserts after a list index ("commands.0.assert_memory").
    parts = [str(p) for i, p in enumerate(loc)
             if not (isinstance(p, str) and p in BY_NAME and i > 0 and isinstance(loc[i - 1], int))]
    return ".".join(parts)
