"""The query service: reads the projections (or replays the events) over HTTP."""
