"""The query service: reads the read models and the vector index (or replays the events) over
HTTP and gRPC; it keeps nothing of its own, so any number of replicas can serve."""

import memledger_schemas  # noqa: F401  (gRPC's fork setting, before grpc is imported)
