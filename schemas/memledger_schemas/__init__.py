"""memledger's published contracts: event envelope and catalogue, commands, NATS subjects.

Everything here is a wire contract. A published event version never changes; a change is a new
version with an upcaster, a new JSON Schema snapshot under ``schemas/json`` and a CHANGELOG line.
"""

import os

# gRPC's fork handlers restart its threads in every forked child, even one that only execs
# (engines start with a preexec_fn, which forces fork), and such a child can hang before its
# exec. grpc reads this when first imported: every first-party package imports this one first.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
