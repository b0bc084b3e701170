"""A small HTTP service whose shards are workgroup resources (see service.py)."""
