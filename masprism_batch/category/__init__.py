"""Failure categories of verdicts (what went wrong, beside where) and label-free failure groups."""
