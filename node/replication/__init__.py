"""Replication: the master side and backlog, the replica's link, applying a command stream, and the replication commands."""
