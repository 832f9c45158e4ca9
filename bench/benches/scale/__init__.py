"""bench/scale's parts: the cluster it brings up and the processes it watches (cluster.py), the light
load (load.py), the measurements at each size (measure.py) and the report (report.py)."""
