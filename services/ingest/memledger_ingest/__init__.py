"""The ingest service: validates commands and appends their events (the commit), the only
writer of the event store."""
