"""Ints past Python's 4,300-digit limit on int <-> text keep their digits, in logs and args.

Before: a logged 10**5000 was stored with its digits, but the dataframe read the name as a
number column and showed NULL (the value silently gone on read); an arg of 10**5000 was
stored as the text "int of about 5000 digits". Now the digits come back, as text (every
str() or JSON writer of such an int would raise in the reader).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import florwb, recorded_project

from florwb_engine.store.ingest import split_values

SCRIPT = """
import florwb as flor
huge = flor.arg("huge", 10**5000)
small = flor.arg("small", 10**100)
for epoch in flor.loop("epoch", range(2)):
    flor.log("big", 10**5000 + epoch)
    flor.log("neg", -(10**6000))
"""
BIG = "1" + "0" * 5000


def test_huge_ints_keep_their_digits(tmp_path):
    recorded_project(tmp_path, SCRIPT)
    frame = json.loads(florwb(tmp_path, "dataframe", "big", "neg", "--format", "json").stdout)
    assert [row["big"] for row in frame] == [BIG, BIG[:-1] + "1"]
    assert [row["neg"] for row in frame] == ["-1" + "0" * 6000] * 2
    (run,) = json.loads(florwb(tmp_path, "runs", "--json").stdout)
    assert run["args"]["huge"] == BIG
    assert run["args"]["small"] == 10**100  # within the limit: an int, exact
    code = (
        "import florwb as flor; df = flor.dataframe('big'); "
        "print(df['big'].tolist() == ['1' + '0' * 5000, '1' + '0' * 4999 + '1'])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert proc.stdout.strip() == "True", proc.stderr


ROUNDED = """
import florwb as flor
for epoch in flor.loop("epoch", range(3)):
    flor.log("tokens", 2**53 + 1 + epoch)
    flor.log("mixed", [1, 2**62 + 1, -(2**70)][epoch])
    flor.log("step", epoch)
"""


def test_ints_a_float_would_round_keep_every_digit(tmp_path):
    """2**53 + 1 is 9007199254740993; a float says ...992. Ints past 2**53 (token counts,
    seeds, hashes) come back digit for digit, and an int beside them as its digits."""
    recorded_project(tmp_path, ROUNDED)
    out = florwb(tmp_path, "dataframe", "tokens", "mixed", "step", "--format", "json").stdout
    frame = json.loads(out)
    assert [int(row["tokens"]) for row in frame] == [2**53 + 1, 2**53 + 2, 2**53 + 3]
    assert [row["mixed"] for row in frame] == ["1", str(2**62 + 1), str(-(2**70))]
    assert [row["step"] for row in frame] == [0, 1, 2]  # small ints stay ints


def test_an_int_a_float_rounds_to_2_53_keeps_its_digits_alone_in_its_batch():
    """2**53 + 1 as a float is 2**53 exactly, not past it: a batch whose only big int rounds
    there must still take the digit-keeping pass."""
    for batch in ([2**53 + 1], [2**53 + 1, 0.5], [-(2**53 + 1), 3]):
        _number, text, _codes = split_values(batch)
        assert text is not None and text[0] == str(batch[0])
