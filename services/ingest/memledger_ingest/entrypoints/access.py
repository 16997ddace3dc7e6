"""Who may send which command, and who is recorded as having sent it: the rules every write
entrypoint (HTTP, gRPC, NATS intake) applies before a command reaches the writer.

- The actor of every event comes from the credential, never from the body: ``key:<key_id>``
  for an API key, ``memledger:<service>`` for memledger's own services (the service token of
  their intake subject, which NATS permissions fence), and the transport (``http``, ``grpc``,
  ``nats``) where there is no key (authentication off, a tenant's NATS account). A client's
  ``actor`` is refused (422); a client names its agent with ``agent_id``, kept in a field of its
  own. Only a service may name whom it acts for (the query service: the key whose search it
  records).
- What only memledger's own services send (``INTERNAL_COMMANDS``, and an archive by policy)
  needs ``Principal.internal``: refused (403) from every API key, whatever its role.
- A policy update that names ``legal_hold`` (to set or to clear it) needs the admin role, and
  so does an import (``import_memory``, ``import_revision``: an embedding the server did not
  compute).
"""

from collections.abc import Sequence

from memledger_ingest.entrypoints.problems import Problem, malformed
from memledger_platform.auth import Principal
from memledger_schemas.commands import (
    SERVICE_COMMANDS,
    CommandBase,
    ImportMemory,
    ImportRevision,
    SetSpacePolicy,
    internal_part,
)

ACTOR_REASON = ("set by the server from the credential (the API key), never by a client; "
                "name the agent with agent_id")


def actor_of(principal: Principal, transport: str) -> str:
    """The actor recorded for what ``principal`` writes over ``transport``."""
    return f"key:{principal.key_id}" if principal.key_id else transport


def service_actor(service: str) -> str:
    """The actor recorded for what one of memledger's services writes as itself."""
    return f"memledger:{service}"


def client_refusal(principal: Principal, commands: Sequence[CommandBase], *,
                   batch: bool = False) -> Problem | None:
    """Why a client (an API key, or anyone with authentication off) may not send ``commands``:
    the first command's problem, its path prefixed ``commands.<i>.`` in a ``batch``."""
    for index, command in enumerate(commands):
        prefix = f"commands.{index}." if batch else ""
        if command.actor is not None:
            return malformed(f"{prefix}actor", ACTOR_REASON)
        problem = permission_refusal(principal, command, prefix)
        if problem is not None:
            return problem
    return None


def permission_refusal(principal: Principal, command: CommandBase, prefix: str = ""
                       ) -> Problem | None:
    """403 if ``command`` is one only memledger's services send and ``principal`` is not
    internal, or names a legal hold without the admin role."""
    part = internal_part(command)
    if part is not None and not principal.internal:
        return _forbidden(prefix + part, _internal_reason(command, part))
    if isinstance(command, ImportMemory | ImportRevision) and not principal.may("admin"):
        return _forbidden(f"{prefix}command", f"{command.command} records an embedding the "
                          "server did not compute and needs the admin role (the caller has "
                          f"role {principal.role!r})")
    if (isinstance(command, SetSpacePolicy) and "legal_hold" in command.model_fields_set
            and not principal.may("admin")):
        return _forbidden(f"{prefix}legal_hold", "setting or clearing legal_hold needs the "
                          f"admin role (the caller has role {principal.role!r})")
    return None


def service_refusal(service: str, command: str, path: str = "subject.command"
                    ) -> Problem | None:
    """403 unless ``service`` is one of memledger's own and sends ``command`` (named at
    ``path``)."""
    sends = SERVICE_COMMANDS.get(service)
    if sends is None:
        return _forbidden("subject.service", f"{service!r} is not one of memledger's services "
                          f"({', '.join(sorted(SERVICE_COMMANDS))})")
    if command not in sends:
        return _forbidden(path, f"memledger's {service} does not send {command} "
                          f"(it sends {', '.join(sorted(sends))})")
    return None


def _internal_reason(command: CommandBase, part: str) -> str:
    name = str(type(command).model_fields["command"].default)
    if part != "command":
        return (f"{name} with a {part} is sent only by memledger's lifecycle service; leave "
                f"{part} out to do it by hand")
    sender = next(s for s, names in SERVICE_COMMANDS.items() if name in names)
    return f"{name} is sent only by memledger's {sender}; no API key may send it, whatever its role"


def _forbidden(path: str, reason: str) -> Problem:
    return Problem(403, "forbidden", f"{path}: {reason}", ({"path": path, "reason": reason},))
