"""The view store and the projection engine: documents per (organization, key) with a
tracking position, written in batches that commit with it (base, sqlite, postgres, engine)."""
