"""The collection: every fetched version kept as WARC records, behind a small interface."""
