"""Training data: SoRFT subtasks and SWE-RL tasks from (issue, repository, patch) triples
(`build-data`, docs/DATA.md), and their TFDS / seqio packaging."""
