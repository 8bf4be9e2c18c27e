"""Adapters: one per technology, each implementing a port."""
