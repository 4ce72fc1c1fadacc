"""Persistence: snapshots, the append-only file, and the RDB value format of DUMP/RESTORE."""
