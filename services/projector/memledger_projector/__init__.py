"""The projector service: the PostgreSQL read models (current state, bi-temporal), from the
events."""
