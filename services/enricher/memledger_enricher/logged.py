"""``LoggedEmbeddings``: which item versions the event store holds an embedding of already, of
the enricher's model (an import's, on the item's enrichment stream). Asked for the item
versions whose embedding was not in their fetched batch: one read of their enrichment streams
(most are empty or short, the item being new or revised a few times), so an import is never
embedded again."""

from collections.abc import Sequence
from uuid import UUID

from memledger_enricher.plan import EMBEDDED, Embedded, Source, embedding_of
from memledger_platform.crypto import Opener
from memledger_platform.events import VECTOR, decode
from memledger_platform.eventstore import EventStore
from memledger_schemas.streams import stream_id


class LoggedEmbeddings:
    def __init__(self, store: EventStore, opener: Opener) -> None:
        self._store = store
        self._open = opener

    def of(self, sources: Sequence[Source], model: str) -> set[Embedded]:
        """The (tenant, item, version) of ``sources`` with an embedding of ``model`` in the
        log (blocking: a round trip to the store)."""
        streams: dict[UUID, str] = {
            stream_id(s.tenant, "enrichment", str(s.item_id)): s.tenant for s in sources}
        found: set[Embedded] = set()
        for stream, events in self._store.read_streams(list(streams)).items():
            for recorded in events:
                if recorded.event_type != EMBEDDED:
                    continue
                event = decode(recorded.data, position=recorded.position,
                               recorded_at=recorded.recorded_at, opener=self._open, skip=VECTOR)
                embedded = embedding_of(event, model)
                if embedded is not None and event.tenant_id == streams[stream]:
                    found.add(embedded)
        return found
