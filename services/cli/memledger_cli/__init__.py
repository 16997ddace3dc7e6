"""The `memledger` command: runs the services, the embedded engines, and operator tools."""

import memledger_schemas  # noqa: F401  (gRPC's fork setting, before grpc is imported)
