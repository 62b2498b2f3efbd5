"""Results: their identity (variant), files, published numbers, tables and plots."""
