"""Query's read side: plain read functions over the read models, ranking, semantic search,
context packing and replay."""
