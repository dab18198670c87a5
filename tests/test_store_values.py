"""The one decoder of stored values, shared by every reader of args and logs."""

from __future__ import annotations

import pytest

from florwb_engine.store.values import decode_value


@pytest.mark.parametrize(
    "stored, expected",
    [
        ((3.0, None, "int"), 3),
        ((1.0, None, "bool"), True),
        ((0.5, None, "float"), 0.5),
        ((None, "[1, 2]", "json"), [1, 2]),
        ((None, "adam", "str"), "adam"),
        ((None, None, "none"), None),
        # what a hand-edited or damaged catalog may hold: shown, never an exception
        ((None, None, "int"), None),
        ((None, "{not json", "json"), "{not json"),
    ],
)
def test_decode_value(stored, expected):
    value = decode_value(*stored)
    assert value == expected and type(value) is type(expected)
