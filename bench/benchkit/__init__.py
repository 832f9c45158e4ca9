"""What the benches share: statistics (stats), a cluster with a loaded tenant and the checks on it
(migration), the fault scenario (faults), the simulated plant (plant), and the repository's paths.

Tests import the same modules (pytest puts bench/ on the path: pyproject.toml), so a helper exists once.
"""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
