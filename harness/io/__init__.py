"""Reading and writing: BEIR/TREC formats, verified downloads, the embedding cache."""
