"""The projector's work: folding events into the PostgreSQL read models, bulk rebuilds, erasure."""
