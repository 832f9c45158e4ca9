"""`slacker rebalance`: find a hot node, pick a tenant and a target, move it live (see docs/rebalance.md).

`planner` decides (pure logic); `runner` reads the agents and the directory and carries a plan out.
"""

from .planner import Move, NodeInput, Plan, Sample, Settings, State, plan

__all__ = ["Move", "NodeInput", "Plan", "Sample", "Settings", "State", "plan"]
