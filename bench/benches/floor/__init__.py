"""bench/floor as a package (issue 45): the unthrottled live migration against its floor.

    runner.py     the cluster (the setpoint bench's Bench), the tenants, one bare pipeline run, one migration
    analysis.py   pure functions: medians and spread, the time-vs-size fit, the breakdown tables
    plot.py       matplotlib

The floor is the method's own pipeline run by hand on the same server and data:
`mariabackup --backup --stream=xbstream | mbstream -x`, then `mariabackup --prepare`.
"""

from benches.setpoint import log  # noqa: F401  (one log format for every bench)
