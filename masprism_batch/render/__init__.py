"""Rendering: a trace to its pass-1 and pass-2 prompts, windows over long logs, token buckets."""
