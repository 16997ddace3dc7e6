"""The writer's memory of stream states, and folding a stream's events into its state."""

from uuid import UUID

from memledger_ingest.domain.streams import StreamState, evolve
from memledger_platform.eventstore import RecordedEvent


class StateCache:
    """Least-recently-used stream states, held as ints and plain tuples.

    A cache this size (hundreds of thousands of entries) must not be made of objects the
    garbage collector tracks: each full collection would walk all of them while holding the
    GIL, long enough to be the whole p99 of a write (ADR 0003). Ints and tuples of atomic
    values are untracked.
    """

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: dict[int, tuple[int, str, str, int, str | None, str | None,
                                       tuple[tuple[str, str], ...], str | None]] = {}

    def get(self, sid: UUID) -> StreamState | None:
        entry = self._entries.get(sid.int)
        if entry is None:
            return None
        version, space_id, status, policy_version, subject, holder, cardinality, policy = entry
        return StreamState(version, space_id, status, policy_version,  # type: ignore[arg-type]
                           subject, holder, cardinality, policy)

    def put_all(self, states: dict[UUID, StreamState]) -> None:
        for sid, state in states.items():
            self._entries.pop(sid.int, None)  # re-insert: most recent last
            self._entries[sid.int] = (state.version, state.space_id, state.status,
                                      state.policy_version, state.subject, state.holder,
                                      state.cardinality, state.policy)
        while len(self._entries) > self._size:
            del self._entries[next(iter(self._entries))]

    def clear(self) -> None:
        self._entries.clear()


def fold_state(events: list[RecordedEvent]) -> StreamState:
    """The state of a stream from its (non-empty) events, in version order."""
    state: StreamState | None = None
    for event in events:
        fields = event.fields()
        state = evolve(state, event.event_type, fields["space_id"], fields.get("subject_id"),
                       fields.get("payload"))
    assert state is not None
    return state
