"""The typed translate helpers behave like hand-written translators."""

from __future__ import annotations

from strata import Dataflow, Input, State, keyed_update, recordwise
from strata.reference import ReferenceExecutor


def test_recordwise_maps_filters_and_flattens():
    df = Dataflow("t")
    words = df.source("lines", "text string")
    split = recordwise(lambda r: [{"word": w} for w in r["text"].split()] or None, "words")
    st = df.stage("split", split, inputs=[words], outputs={"words": "word string"})
    out = ReferenceExecutor().run(st, {"lines": [{"text": "a b"}, {"text": ""}, {"text": "c"}]})
    assert sorted(r["word"] for r in out["words"]) == ["a", "b", "c"]


def test_keyed_update_keeps_one_record_per_key_and_emits_changes():
    def maxval(key, prev, inputs):
        vals = [r["v"] for r in inputs[0]]
        best = max(vals + ([prev["v"]] if prev else []))
        return {"k": key, "v": best}

    df = Dataflow("t")
    src = df.source("vals", "k string, v long")
    st = df.stage("max", keyed_update(maxval, "changes"), inputs=[Input(src, route_by="k")],
                  outputs={"changes": "k string, v long"},
                  state=State("k string, v long", route_by="k", grouping="inner"))
    ex = ReferenceExecutor()
    first = ex.run(st, {"vals": [{"k": "a", "v": 3}, {"k": "b", "v": 1}]})
    second = ex.run(st, {"vals": [{"k": "a", "v": 2}, {"k": "b", "v": 5}]})
    assert sorted(map(str, first["changes"])) == ["{'k': 'a', 'v': 3}", "{'k': 'b', 'v': 1}"]
    assert second["changes"] == [{"k": "b", "v": 5}]  # a did not change
    assert sorted(ex.state_records(st), key=str) == [{"k": "a", "v": 3}, {"k": "b", "v": 5}]
