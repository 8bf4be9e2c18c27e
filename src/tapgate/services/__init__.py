"""Use cases: one transaction per call, no HTTP and no SQL."""
