"""The projector service: builds the PostgreSQL read models (current state, bi-temporal) from the events."""
