"""A pipeline spread over several modules: it imports a sibling module and a package
that sit beside it, as real pipelines do. `strata run` must ship them to the workers."""

import helpers
from wordtools.counting import add_counts

from strata.model import Dataflow, Input, State


def word_key(record: dict) -> str:
    return helpers.normalize(record["word"])


dataflow = Dataflow("wordcount")
words = dataflow.source("words", "word string")
dataflow.stage(
    "count",
    add_counts,
    inputs=[Input(words, route_by=word_key)],
    outputs={"counts": "word string, count long"},
    state=State("word string, count long", route_by="word"),
)
