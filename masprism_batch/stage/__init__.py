"""The attribution stage: prefill signals of rendered traces -> candidates -> verdict -> rows."""
