"""The ``Embedder`` port and its adapters: the enricher embeds documents with it, query embeds
the query text, so both speak the same model."""
