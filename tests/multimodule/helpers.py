"""Helpers imported by pipeline.py (a sibling module, not installed anywhere)."""


def normalize(word: str) -> str:
    return word.strip().lower()
