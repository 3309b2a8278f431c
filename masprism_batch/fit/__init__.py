"""Fitting a ranker to a team's own labelled logs, the ranker file it writes, and the verdict policy a run
reads once from that file and fallback.json (policy.py)."""
