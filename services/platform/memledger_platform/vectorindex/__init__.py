"""The ``VectorIndex`` port (one point per item version) and its adapters."""
