# The sample repositories contain their own test suites (tests/test_*.py), which import
# packages that are not installed; they are data for the builder, not tests of this project
# (synth/repos/ holds clones of them when `synthesize --sample` writes there).
collect_ignore = ["repos", "history", "synth"]
