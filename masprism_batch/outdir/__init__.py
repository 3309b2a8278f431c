"""The output directory: Parquet parts written atomically, their manifest, the OUTDIR lock."""
