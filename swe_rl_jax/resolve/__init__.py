"""`resolve`: Agentless-style inference on SWE-bench instances, batched across instances, on any
policy (policies/), resumable and sharded (docs/EVAL.md). One module per step: localization,
repair, candidates (and the vote), the per-instance pipeline, the batched driver, the output files."""
