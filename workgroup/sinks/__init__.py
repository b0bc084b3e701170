"""Sinks that compare fencing tokens, so that a stale holder's late write changes
nothing: :mod:`workgroup.sinks.sql` (PostgreSQL, SQLite)."""
