"""Nested."""
