"""Instances from GitHub's hourly event archive (GH Archive) and local clones, SWE-RL style.

    events.py    archive files → normalized events (both payload shapes; bad input counted and named)
    store.py     events on disk (SQLite), grouped by repository and pull request, bounded memory
    linking.py   issue references in a pull request's text (closing keywords, #N, owner/name#N, URLs)
    pulls.py     one pull request's events in time order → its state, text and linked issues
    assemble.py  a merged pull request + its clone → an instance, or the filter that drops it
    relevant.py  related but unmodified files: the import heuristic or a policy
    curate.py    the run: archives → OUT/instances.jsonl and OUT/report.json (docs/DATA.md)
"""
