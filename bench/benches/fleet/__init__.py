"""bench/fleet's parts: a netns cluster on etcd with a router and loaded tenants (cluster.py), the drain and
the two-moves-off-one-source experiments (runs.py), the table and plot (report.py)."""
