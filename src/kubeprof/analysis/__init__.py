"""Analysis: pure functions from stored records to numbers and findings (no I/O here)."""
