"""NATS intake: commands published to ``<prefix>.in.<tenant>.<command>`` by a tenant's clients,
and to ``<prefix>.svc.<service>.<tenant>.<command>`` by memledger's own services.

Messages land in a durable work-queue stream; this consumer validates each, submits it to the
writer like an HTTP call would, and acks only after the commit. Who sent it is the subject's
(``access``): a tenant's subject writes with the write role, as actor ``nats``, and may not send
what only memledger's services send; a service's subject (which NATS permissions let only that
service publish on) may send its own commands only, as actor ``memledger:<service>`` unless it
names whom it acts for. Acknowledgement policy:

- committed (or an idempotent repeat)  → reply with the result, ack;
- invalid or refused (poison)          → dead-letter subject with the reason, reply, term;
- transient (event store unavailable)  → nak with a delay, to be redelivered.

A message without an ``idempotency_key`` gets one derived from its stream sequence, so a
redelivery after a commit whose ack was lost is answered from the first commit, not applied twice.

A service may send several commands in one message (``SERVICE_MANY``): one fetch, ack and
reply for all of them rather than one each, what made the enricher's embeddings cost ingest as
much CPU as the writes they were for. Each is submitted on its own (the writer still commits
them together) and refused on its own: a refused one is dead-lettered with its own body, the
others commit. One that cannot be committed now naks the message; a redelivery answers the
committed ones from their idempotency keys (each derived from the stream sequence and its place
when absent). A malformed message, or one holding a command the service may not send, is
refused whole.
"""

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

import orjson
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from pydantic import ValidationError

from memledger_ingest.core.writer import GroupCommitWriter, Rejected
from memledger_ingest.domain.errors import DomainError
from memledger_ingest.entrypoints.access import (
    client_refusal,
    permission_refusal,
    service_actor,
    service_refusal,
)
from memledger_ingest.entrypoints.problems import (
    Problem,
    invalid_request,
    malformed,
    refused,
    repeated,
    result_body,
)
from memledger_platform.auth import Principal
from memledger_platform.consumer import Batch, Consumer, Handling, Subscription, Transient
from memledger_platform.jsonbody import repeated_key
from memledger_schemas.commands import BY_NAME, MAX_BATCH, CommandBase
from memledger_schemas.subjects import (
    HDR_REPLY_TO,
    HDR_TRACEPARENT,
    SERVICE_MANY,
    Subjects,
)
from memledger_schemas.types import SLUG_PATTERN

log = logging.getLogger(__name__)

_TENANT = re.compile(SLUG_PATTERN)
NAK_DELAY_SECONDS = 2.0
TRANSPORT = "nats"
"""The actor of a command on a tenant's subject (a NATS account is no API key)."""


class Intake:
    """NATS intake: a ``Consumer`` of the intake work queue with ``Commands``, one message at
    a time (a fetched batch is settled message by message, all at once)."""

    def __init__(self, nc: Client, js: JetStreamContext, writer: GroupCommitWriter,
                 subjects: Subjects, *, batch: int = 256) -> None:
        # Created or updated: a consumer made before the services had subjects of their own
        # filtered the tenants' subjects only, and would leave the services' commands queued.
        self._consumer = Consumer(js, subjects, Subscription(
            name="intake", stream=subjects.intake_stream, durable=subjects.intake_consumer,
            subject=subjects.all_intake,
            filter_subjects=(subjects.all_intake, subjects.all_service_intake), batch=batch,
            ack_wait=30.0, max_ack_pending=batch * 8, ordered=False, each=True, queue=True,
            nak_delay=NAK_DELAY_SECONDS, traced=False, dead_letter_level=logging.WARNING),
            Commands(nc, writer, subjects))

    @property
    def dead_letters(self) -> int:
        return self._consumer.dead_letters.count

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set."""
        await self._consumer.run(stop)

    async def handle(self, msg: Msg) -> None:
        """Apply one intake message and settle it (ack, term or nak), never raising."""
        await self._consumer.handle([msg])


class Commands(Handling):
    """Validates an intake message, submits its command to the writer like an HTTP call
    would, and replies (the consumer's handler)."""

    def __init__(self, nc: Client, writer: GroupCommitWriter, subjects: Subjects) -> None:
        self._nc = nc
        self._writer = writer
        self._subjects = subjects

    async def handle(self, batch: Batch) -> None:
        for msg in batch.pending:
            await self._apply(batch, msg)

    async def _apply(self, batch: Batch, msg: Msg) -> None:
        try:
            many = self._many(msg)
            sent = self._parse(msg) if many is None else None
        except _Poison as poison:
            await self._refuse(batch, msg, poison.problem)
            return
        if many is not None:
            await self._apply_many(batch, msg, many)
            return
        assert sent is not None
        outcome = await self._submit(sent, msg)
        if isinstance(outcome, Problem):
            await self._refuse(batch, msg, outcome)
            return
        await self._reply(msg, outcome)

    async def _submit(self, sent: "_Sent", msg: Msg) -> dict[str, Any] | Problem:
        """The committed result's body, or the problem it was refused with; ``Transient``
        if it could not be committed now."""
        try:
            results = await self._writer.submit(sent.tenant, [sent.command], actor=sent.actor,
                                                traceparent=(msg.headers or {}).get(
                                                    HDR_TRACEPARENT))
        except (Rejected, DomainError) as error:
            return refused(error)
        except Exception as error:
            raise Transient(f"intake will retry {msg.subject}: {error}") from error
        return result_body(results[0])

    async def _apply_many(self, batch: Batch, msg: Msg, many: list["_Sent"]) -> None:
        # All at once: the writer commits what is queued together, each refused on its own.
        outcomes = await asyncio.gather(*(self._submit(sent, msg) for sent in many),
                                        return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome  # given back whole: the committed ones repeat their keys
        bodies: list[dict[str, Any]] = []
        for sent, outcome in zip(many, outcomes, strict=True):
            assert not isinstance(outcome, BaseException)
            if isinstance(outcome, Problem):
                await batch.dead_letters.send(msg, outcome.message, tenant=sent.tenant,
                                              data=_kept(sent.command, outcome))
            bodies.append(outcome.body() if isinstance(outcome, Problem) else outcome)
        await self._reply(msg, {"results": bodies})

    def _many(self, msg: Msg) -> list["_Sent"] | None:
        """The commands of a service's message of several (``None``: not one)."""
        by_service = self._subjects.parse_service_intake(msg.subject)
        if by_service is None or by_service[2] != SERVICE_MANY:
            return None
        service, tenant, _ = by_service
        if _invalid_tenant(tenant):
            raise _Poison(malformed("subject.tenant", f"{tenant!r} is not a valid tenant id"))
        listed = _body(msg).get("commands")
        if not isinstance(listed, list) or not 1 <= len(listed) <= MAX_BATCH:
            raise _Poison(malformed("commands", f"must be a list of 1 to {MAX_BATCH} commands"))
        many = []
        for place, body in enumerate(listed):
            path = f"commands.{place}"
            name = body.get("command") if isinstance(body, dict) else None
            if not isinstance(name, str) or name not in BY_NAME:
                raise _Poison(malformed(f"{path}.command", "unknown command; one of "
                                        + ", ".join(sorted(BY_NAME))))
            _raise(service_refusal(service, name, f"{path}.command"))
            if body.get("idempotency_key") is None:  # as for one: its place in the message
                body["idempotency_key"] = (
                    f"nats-intake:{msg.metadata.sequence.stream}:{place}")
            command = _validated(name, body, ("commands", place))
            _raise(permission_refusal(_service(tenant), command, f"{path}."))
            many.append(_Sent(tenant, command, command.actor or service_actor(service)))
        return many

    def _parse(self, msg: Msg) -> "_Sent":
        service, tenant, name = self._address(msg.subject)
        if _invalid_tenant(tenant):
            raise _Poison(malformed("subject.tenant", f"{tenant!r} is not a valid tenant id"))
        if name not in BY_NAME:
            raise _Poison(malformed("subject.command", f"unknown command {name!r}; one of "
                                    + ", ".join(sorted(BY_NAME))))
        if service is not None:
            _raise(service_refusal(service, name))
        command = _command(msg, name)
        if service is None:
            _raise(client_refusal(_tenant_client(tenant), [command]))
            return _Sent(tenant, command, TRANSPORT)
        _raise(permission_refusal(_service(tenant), command))
        # A service may name whom it acts for (the query service: the key a search was
        # served to); the command stays as sent, so its idempotency record's hash does too.
        return _Sent(tenant, command, command.actor or service_actor(service))

    def _address(self, subject: str) -> tuple[str | None, str, str]:
        """``(service or None, tenant, command)`` of an intake subject."""
        by_service = self._subjects.parse_service_intake(subject)
        if by_service is not None:
            return by_service
        parsed = self._subjects.parse_intake(subject)
        if parsed is None:
            expected = self._subjects.intake("<tenant>", "<command>")
            raise _Poison(malformed("subject", f"expected {expected}"))
        return None, *parsed

    async def _refuse(self, batch: Batch, msg: Msg, problem: Problem) -> None:
        """Dead-letter ``msg`` with the problem, and answer with it."""
        try:
            tenant = self._address(msg.subject)[1]
        except _Poison:
            tenant = "_invalid"
        tenant = "_invalid" if _invalid_tenant(tenant) else tenant
        # What was learned from an erased subject's text is refused, and not kept either: the
        # dead letter then says why, without the body.
        erased = any(f.get("path", "").endswith("source_key_id") for f in problem.fields)
        await batch.dead_letter(msg, problem.message, tenant=tenant,
                                data=b'{"redacted": "source subject erased"}' if erased else None)
        await self._reply(msg, problem.body())

    async def _reply(self, msg: Msg, body: dict[str, Any]) -> None:
        reply_to = (msg.headers or {}).get(HDR_REPLY_TO)
        if reply_to:
            await self._nc.publish(reply_to, orjson.dumps(body))


class _Poison(Exception):
    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.message)
        self.problem = problem


@dataclass(frozen=True)
class _Sent:
    """An intake message as the writer takes it."""

    tenant: str
    command: CommandBase
    actor: str


def _tenant_client(tenant: str) -> Principal:
    """A tenant's NATS account: it writes, but holds no admin role (it is no API key)."""
    return Principal(tenant, "write")


def _service(tenant: str) -> Principal:
    return Principal(tenant, "write", internal=True)


def _raise(problem: Problem | None) -> None:
    if problem is not None:
        raise _Poison(problem)


def _command(msg: Msg, name: str) -> CommandBase:
    body = _body(msg)
    if body.setdefault("command", name) != name:
        raise _Poison(malformed("command", f"body says {body['command']!r}, subject {name!r}"))
    if body.get("idempotency_key") is None:  # absent or null: derive one, so that a
        # redelivery after a lost ack is answered from the first commit
        body["idempotency_key"] = f"nats-intake:{msg.metadata.sequence.stream}"
    return _validated(name, body, ())


def _validated(name: str, body: dict[str, Any], prefix: tuple[str | int, ...]) -> CommandBase:
    try:
        return BY_NAME[name].model_validate(body)
    except ValidationError as error:
        raise _Poison(invalid_request(error, prefix)) from None


def _kept(command: CommandBase, problem: Problem) -> bytes:
    """What a refused command of several leaves in the dead letters: its body, unless it was
    learned from an erased subject's text (then only why)."""
    if any(f.get("path", "").endswith("source_key_id") for f in problem.fields):
        return b'{"redacted": "source subject erased"}'
    return command.model_dump_json(exclude_unset=True).encode()


def _invalid_tenant(tenant: str) -> bool:
    return _TENANT.fullmatch(tenant) is None


def _body(msg: Msg) -> dict[str, Any]:
    try:
        body = orjson.loads(msg.data)
    except orjson.JSONDecodeError as error:
        raise _Poison(malformed("body", f"not valid JSON: {error}")) from None
    if not isinstance(body, dict):
        raise _Poison(malformed("body", "must be a JSON object"))
    twice = repeated_key(msg.data, body)
    if twice is not None:
        raise _Poison(repeated(twice))
    return body
