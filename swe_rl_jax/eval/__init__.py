"""Evaluation: subtask metrics through the sampler and the rewards."""
