"""Batch engines (local and Ray Data), installed as `masprism_batch.pipelines`."""
