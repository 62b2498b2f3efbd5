"""Where a corpus is encoded (worker shards, Ray actors, one process per local device) and, on Ray, searched."""
