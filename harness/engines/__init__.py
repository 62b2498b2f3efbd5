"""Where a corpus is encoded (worker shards, Ray actors, one process per local device) and, on Ray, searched."""

ENGINES = ("local", "ray")  # where the corpus is encoded (--engine)
SEARCH_PLACES = ("sharded", "driver")  # where a Ray run searches a flat index (--ray-search)
