"""Catching a migration target up with its source: GTID positions, binlog sizes, appliers."""
