"""The per-node daemon: HTTP API, tenant supervisor, migrations, metrics."""
