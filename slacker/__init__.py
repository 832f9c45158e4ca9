"""Slacker: latency-aware live migration of MySQL/MariaDB tenants."""

__version__ = "0.1.0"
