"""Product-path speed and memory: ingest, attribute, memory caps, pass-2 overlap, counterfactuals, GPU e2e."""
