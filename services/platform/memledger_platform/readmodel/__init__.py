"""The PostgreSQL read models' shared contract: their schema and checkpoint, the bi-temporal
rectangles and the pure fold that both the projector and the replay path run (ADR 0005)."""
