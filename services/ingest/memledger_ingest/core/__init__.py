"""The write application around the pure domain: the group-commit writer, idempotency, sealing
and erasure."""
