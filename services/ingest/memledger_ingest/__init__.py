"""The ingest service: validates commands, appends events (the commit), relays them."""
