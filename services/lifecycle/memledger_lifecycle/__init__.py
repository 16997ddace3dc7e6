"""The lifecycle service: space policies, decay and consolidation, decided from the events and
sent to ingest as commands."""
