"""The enricher service: embeddings and extraction, sent back to ingest as commands."""
