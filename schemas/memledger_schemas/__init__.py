"""memledger's published contracts: event envelope and catalogue, commands, NATS subjects.

Everything here is a wire contract. A published event version never changes; a change is a new
version with an upcaster, a new JSON Schema snapshot under ``schemas/json`` and a CHANGELOG line.
"""
