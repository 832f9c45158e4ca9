"""`slacker` itself, with a hold point added to the request `slacker migrate` sends (fault injection).

The phase-aimed chaos mode kills the CLI that runs `slacker migrate` like any other process, so the
migration must be started by the real command; the handover's steps last milliseconds, so the
request also asks the agents (started with --fault-injection) to hold at one point for a while.
The hold comes from the environment variable SLACKER_CHAOS_HOLD (JSON, e.g. {"fenced": 1.5});
everything else is the CLI unchanged.

    python bench/chaoslib/held_migrate.py --cluster FILE migrate TENANT --to node-2 ...
"""

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from slacker import cli  # noqa: E402
from slacker.cli import migrate_cmd  # noqa: E402

_body = migrate_cmd.migration_body


def _held_body(*args, **kwargs) -> dict:
    body = _body(*args, **kwargs)
    hold = json.loads(os.environ.get("SLACKER_CHAOS_HOLD") or "{}")
    if hold:
        body["hold_s"] = hold
    return body


migrate_cmd.migration_body = _held_body

if __name__ == "__main__":
    cli.main()
