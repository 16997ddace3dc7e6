"""The ingest service: validates commands and appends their events (the commit), the only
writer of the event store."""

import memledger_schemas  # noqa: F401  (gRPC's fork setting, before grpc is imported)
