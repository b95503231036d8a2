"""A small package beside pipeline.py."""
