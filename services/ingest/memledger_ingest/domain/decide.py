"""Decide: a command plus the current state of the streams it touches → events for one stream.

Pure: the caller passes the tenant, a fresh id (for commands that create something without
naming it), the actor, and a ``lookup`` of stream states. Every refusal is a ``DomainError``.
"""

from memledger_ingest.domain.errors import Conflict, Invalid, NotFound
from memledger_ingest.domain.handlers import handle
from memledger_ingest.domain.streams import StreamRef, StreamState
from memledger_ingest.domain.targets import (
    Context,
    Decision,
    Lookup,
    reads_of,
    target_of,
)
from memledger_schemas import commands as c

__all__ = ["Context", "Decision", "Lookup", "decide", "reads_of", "target_of"]


def decide(cmd: c.CommandBase, ctx: Context, lookup: Lookup) -> Decision:
    """Check the command against current state and return what happened, or raise."""
    target = target_of(cmd, ctx)
    current = lookup(target)
    _check_open_interval(cmd, ctx)
    if cmd.expected_version is not None:
        _same_space(cmd, target, current)
        version = current.version if current else 0
        if version != cmd.expected_version:
            raise Conflict(f"expected version {cmd.expected_version}, stream is at {version}",
                           version)
    return handle(cmd, ctx, lookup, current)


# --- checks ---------------------------------------------------------------------------------

# Named as the handlers name them, so a refusal reads the same with or without a version.
_WHAT = {"item": "memory item", "enrichment": "memory item", "preference": "preference source"}


def _check_open_interval(cmd: c.CommandBase, ctx: Context) -> None:
    # valid_from defaults to the recording time, so a valid_to alone must lie after it.
    valid_to = getattr(cmd, "valid_to", None)
    if valid_to is not None and getattr(cmd, "valid_from", None) is None and (
            ctx.now is not None and valid_to <= ctx.now):
        raise Invalid("valid_to", "must be after valid_from, which defaults to now; give "
                      "valid_from for an interval in the past")


def _same_space(cmd: c.CommandBase, target: StreamRef, current: StreamState | None) -> None:
    # Checked before a version comparison: a conflict would reveal that the stream exists in
    # another space, and its version.
    space = getattr(cmd, "space_id", None)
    if current is not None and space is not None and current.space_id != space:
        raise NotFound(_WHAT.get(target.kind, target.kind), target.key)
