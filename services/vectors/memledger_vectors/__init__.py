"""The vectors service: the vector projector (events to the vector index, exactly one writer per
index) and, in the embedded mode, the index process it owns."""
