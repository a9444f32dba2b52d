"""Ahead-of-time plans of a run's programs for a target: per-chip memory, fit, roofline.

chips.py (the chip table), targets.py (cpu:N, TPU topologies), programs.py (the SFT step, RL
actor and critic updates and the rollout, built with abstract inputs), roofline.py (analytic
FLOPs and bytes), report.py (compile, judge, hint). Deliberately import-free: `train.metrics`
reads the chip table.
"""
