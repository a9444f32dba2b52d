"""The main job: issues → subtask data → rejection-sampled SFT → RL → export → before/after eval."""
