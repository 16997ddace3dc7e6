"""Infrastructure shared by memledger services: settings, clock, ids, event store, engines."""

import memledger_schemas  # noqa: F401  (gRPC's fork setting, before grpc is imported)
