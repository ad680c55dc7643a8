"""Reading a typed answer's JSON out of a model's text (prompted and native modes): the
model's text is untrusted input, so a hostile or confused answer is a reason to ask
again, never a crash of the run or a wrong pick."""

from __future__ import annotations

import pytest

import harnessnb as hn
from harnessnb.loop._output import OutputSpec, Valid, parse_json


def test_the_last_top_level_object_is_the_answer_not_one_inside_it() -> None:
    # Read right to left, the object inside the answer was taken for the answer.
    text = 'Here it is: {"value": {"x": 1}, "sentence": "one"} and that is all.'
    assert parse_json(text) == Valid({"value": {"x": 1}, "sentence": "one"})
    two = 'First {"value": 1} then, corrected, {"value": 2, "deep": {"k": 3}}'
    assert parse_json(two) == Valid({"value": 2, "deep": {"k": 3}})


def test_json_nested_too_deep_is_a_reason_not_a_recursion_error() -> None:
    for text in ("[" * 100_000, '{"a":' * 50_000, "Answer: " + '{"a":' * 50_000):
        got = parse_json(text)
        assert got == ["the answer's JSON is nested too deeply to read"], text[:20]
    spec = OutputSpec.of({"type": "object", "properties": {"a": {"type": "integer"}}})
    assert spec.check_text("[" * 100_000) == ["the answer's JSON is nested too deeply to read"]


def test_a_schema_too_deep_or_that_never_ends_is_a_config_error_or_a_reason() -> None:
    deep: dict[str, object] = {"type": "integer"}
    for _ in range(5000):
        deep = {"type": "object", "properties": {"a": deep}, "required": ["a"]}
    with pytest.raises(hn.ConfigError, match="nested too deeply"):
        OutputSpec.of(deep)
    # {"$ref": "#"} is the schema itself: checking any answer against it never ends.
    endless = OutputSpec.of({"$ref": "#"})
    assert endless.check_text('{"a": 1}') == [
        "the arguments or the schema are nested too deeply to check"
    ]
