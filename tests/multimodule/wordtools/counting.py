"""The stage's translate, in a package module that uses the sibling helpers module."""

import helpers


def add_counts(word, state, words, *, out):
    seen = sum(1 for w in words if helpers.normalize(w["word"]) == word)
    prev = next(state, None)
    record = {"word": word, "count": seen + (prev["count"] if prev else 0)}
    out.state(record)
    out.write("counts", record)
