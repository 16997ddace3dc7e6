"""The relay service: the event store's notification log, in order, into the JetStream events
stream (exactly one per stream)."""
