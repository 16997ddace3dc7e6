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
from memledger_schemas.commands import BY_NAME, CommandBase
from memledger_schemas.subjects import (
    HDR_REPLY_TO,
    HDR_TRACEPARENT,
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
            sent = self._parse(msg)
        except _Poison as poison:
            await self._refuse(batch, msg, poison.problem)
            return
        try:
            results = await self._writer.submit(sent.tenant, [sent.command], actor=sent.actor,
                                                traceparent=(msg.headers or {}).get(
                                                    HDR_TRACEPARENT))
        except (Rejected, DomainError) as error:
            await self._refuse(batch, msg, refused(error))
            return
        except Exception as error:
            raise Transient(f"intake will retry {msg.subject}: {error}") from error
        await self._reply(msg, result_body(results[0]))
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
    try:
        return BY_NAME[name].model_validate(body)
    except ValidationError as error:
        raise _Poison(invalid_request(error)) from None


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
