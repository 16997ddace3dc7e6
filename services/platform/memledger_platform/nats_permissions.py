"""What each memledger service may do on NATS: the permissions of its NATS user.

The same lists as the MEMLEDGER account's users in ``deploy/nats/accounts.conf`` (for the
prefix ``memledger``; a test holds the two together), here for any subject prefix: the
embedded nats-server of ``memledger up`` runs each service as such a user.
"""

from memledger_platform.engines import NatsPermissions
from memledger_schemas.commands import SERVICE_COMMANDS
from memledger_schemas.subjects import SERVICE_MANY, Subjects

CLIENT = "client"
"""The embedded mode's user for local clients: commands to intake, results and events of
every tenant (its one account has no tenant fence; the distributed mode's accounts do)."""

OPERATOR = "operator"
"""``memledger status``: reads stream and consumer state, changes nothing."""

SERVICES = ("ingest", "relay", "projector", "vectors", "enricher", "lifecycle", "query")
"""The services, each of which connects as the user of its own name."""

_PROJECTOR = "projector-postgres"


def embedded_users(subjects: Subjects) -> dict[str, NatsPermissions]:
    """Every user of the embedded nats-server beside its admin: the services, the operator
    and the local client."""
    return {**service_permissions(subjects), CLIENT: _client(subjects)}


def service_permissions(subjects: Subjects) -> dict[str, NatsPermissions]:
    """The permissions of each service's user and of the operator's."""
    return {"ingest": _ingest(subjects), "relay": _relay(subjects),
            "projector": _projector(subjects), "vectors": _vectors(subjects),
            "enricher": _enricher(subjects),
            "lifecycle": _lifecycle(subjects), "query": _query(subjects),
            OPERATOR: _operator(subjects)}


def _events(s: Subjects) -> tuple[str, ...]:
    """The events streams: one, or one per partition (docs/adr/0016)."""
    return tuple(p.events_stream for p in s.every_partition())


def _all_events(s: Subjects) -> tuple[str, ...]:
    return tuple(p.all_events for p in s.every_partition())


def _get(s: Subjects) -> tuple[str, ...]:
    """Reading an events stream's messages by sequence (where a stream stands)."""
    return tuple(f"$JS.API.STREAM.MSG.GET.{stream}" for stream in _events(s))


def _streams(s: Subjects) -> tuple[str, ...]:
    """Every service may look up, create and update memledger's streams (``ensure_streams``)."""
    return tuple(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE")
                 for stream in (*_events(s), s.intake_stream, s.dead_letter_stream))


def _events_consumer(s: Subjects, name: str, *verbs: str, ack: bool = True
                     ) -> tuple[str, ...]:
    """``_consumer`` on each events stream."""
    return tuple(grant for stream in _events(s) for grant in _consumer(stream, name, *verbs,
                                                                        ack=ack))


def _consumer(stream: str, name: str, *verbs: str, ack: bool = True) -> tuple[str, ...]:
    """Use of one durable pull consumer: the API ``verbs`` on it, creating it (with or without
    a filter subject), fetching and, with ``ack``, acknowledging its messages."""
    api = tuple(f"$JS.API.CONSUMER.{verb}.{stream}.{name}" for verb in ("INFO", *verbs))
    return (*api, f"$JS.API.CONSUMER.CREATE.{stream}.{name}",
            f"$JS.API.CONSUMER.CREATE.{stream}.{name}.>",
            f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{name}",
            *((f"$JS.ACK.{stream}.{name}.>",) if ack else ()))


def _not_the_projectors(s: Subjects) -> tuple[str, ...]:
    """The PostgreSQL projector's consumer is not another service's to read or remove."""
    return tuple(grant for stream in _events(s) for grant in (
        f"$JS.API.CONSUMER.*.{stream}.{_PROJECTOR}",
        f"$JS.API.CONSUMER.*.{stream}.{_PROJECTOR}.>",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{_PROJECTOR}"))


def _ingest(s: Subjects) -> NatsPermissions:
    # Answers on the reply subject a command names: a tenant's, or a service's inbox.
    return NatsPermissions((
        *_streams(s), *_get(s),
        *_consumer(s.intake_stream, s.intake_consumer),
        f"{s.prefix}.dlq.intake.>", f"{s.prefix}.reply.>", "_INBOX.>"))


def _relay(s: Subjects) -> NatsPermissions:
    return NatsPermissions((*_streams(s), *_get(s), *_all_events(s)))


def _projector(s: Subjects) -> NatsPermissions:
    return NatsPermissions((*_streams(s), *_events_consumer(s, _PROJECTOR, "DELETE"),
                            f"{s.prefix}.dlq.projector.>"))


def _commands(s: Subjects, service: str) -> tuple[str, ...]:
    """A service sends its own commands only, on its own intake subjects (ingest takes the
    service token there as the sender), one at a time or several in a message (ingest
    refuses one holding a command not its own)."""
    return tuple(s.service_intake(service, "*", command)
                 for command in (*sorted(SERVICE_COMMANDS[service]), SERVICE_MANY))


def _enricher(s: Subjects) -> NatsPermissions:
    # Dead letters: what an extractor's model could not make sense of, with the reason.
    return NatsPermissions((*_streams(s), *_events_consumer(s, "*"),
                            *_commands(s, "enricher"), f"{s.prefix}.dlq.enricher.>"),
                           publish_deny=_not_the_projectors(s))


def _lifecycle(s: Subjects) -> NatsPermissions:
    return NatsPermissions((
        *_streams(s), *_events_consumer(s, "lifecycle", "DELETE", ack=False),
        *_commands(s, "lifecycle")))


def _vectors(s: Subjects) -> NatsPermissions:
    # its durable is named for the embedding model (projector-vectors-<model>): any name
    # but the PostgreSQL projector's
    return NatsPermissions((
        *_streams(s), *_events_consumer(s, "*", "DELETE"),
        f"{s.prefix}.dlq.vectors.>"), publish_deny=_not_the_projectors(s))


def _query(s: Subjects) -> NatsPermissions:
    return NatsPermissions((*_streams(s), *_commands(s, "query")))


def _operator(s: Subjects) -> NatsPermissions:
    streams = (*_events(s), s.intake_stream, s.dead_letter_stream)
    return NatsPermissions((
        "$JS.API.INFO", *(f"$JS.API.STREAM.INFO.{stream}" for stream in streams), *_get(s),
        *(f"$JS.API.CONSUMER.LIST.{stream}" for stream in (*_events(s), s.intake_stream))))


def _client(s: Subjects) -> NatsPermissions:
    return NatsPermissions((s.all_intake,), subscribe=(
        "_INBOX.>", *_all_events(s), f"{s.prefix}.reply.>", s.all_dead_letters))
