"""Fitting a ranker to a team's own labelled logs, and the ranker file it writes."""
