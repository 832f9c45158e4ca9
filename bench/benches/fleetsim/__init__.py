"""bench/fleetsim's parts: the simulated fleet (model.py), the lower bound (bound.py), the loop that feeds
the rebalancer's planner (slacker/rebalance/planner.py, unchanged) from it (sim.py), and plots (plots.py)."""
