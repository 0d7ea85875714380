"""The journal format (docs/step-journal.md) and the checkpoint digest chain, without
a server."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from railyard import JournalError
from railyard.journal import EMPTY_DIGEST, HEADER, MAX_BYTES, Journal, extend, full
from railyard.step import _outcomes_in


def test_digests_are_the_servers() -> None:
    # Pinned in wire/src/checkpoint.rs: every end must agree on these bytes.
    assert full(b"").hex() == "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
    assert full(b"abc") == hashlib.sha256(EMPTY_DIGEST + b"abc").digest()
    assert extend(full(b"ab"), b"c") == hashlib.sha256(full(b"ab") + b"c").digest()
    assert extend(full(b"ab"), b"c") != full(b"abc")


def test_reading_stops_at_the_first_incomplete_line() -> None:
    lines = [
        b'{"k":"run","name":"m","seq":0,"value":"a"}\n',
        b'{"k":"future","x":1}\n',
        b'{"k":"state","value":{"s":1}}\n',
        b'{"k":"spawn","name":"kids","seq":0,"run_ids":["c1","c2"]}\n',
        b'{"k":"run","name":"m","seq":1,"value":"b"}\n',
        b'{"k":"run","name":"m","seq":2,"val',
    ]
    checkpoint = HEADER + b"".join(lines)
    j = Journal(checkpoint, full(checkpoint))
    assert j.runs == {("m", 0): "a", ("m", 1): "b"}
    assert j.state == {"s": 1} and j.spawns == {("kids", 0): ["c1", "c2"]}
    # The unknown record is kept; the torn one is not, and the next write goes whole.
    assert bytes(j.data) == HEADER + b"".join(lines[:-1])
    j.add({"k": "run", "name": "m", "seq": 2, "value": "c"}, "m 2")
    plan = j.plan()
    assert plan is not None and plan.whole == bytes(j.data)


def test_a_whole_journal_with_a_digest_is_appended_to() -> None:
    checkpoint = HEADER + b'{"k":"run","name":"m","seq":0,"value":1}\n'
    j = Journal(checkpoint, full(checkpoint))
    assert j.plan() is None, "nothing new: nothing to send"
    j.add({"k": "run", "name": "m", "seq": 1, "value": 2}, "m 1")
    plan = j.plan()
    assert plan is not None and plan.whole is None
    assert plan.base_length == len(checkpoint) and plan.base_digest == full(checkpoint)
    assert plan.append == b'{"k":"run","name":"m","seq":1,"value":2}\n'
    assert plan.expected == extend(full(checkpoint), plan.append)
    j.acknowledged(plan, plan.length, plan.expected)
    assert j.plan() is None
    j.refused()
    again = j.plan()
    assert again is not None and again.whole == bytes(j.data)


def test_another_format_is_replaced_only_when_something_is_journaled() -> None:
    transcript = b'{"role":"user","content":"hi"}\n'
    j = Journal(transcript, full(transcript))
    assert j.plan() is None and j.whole() == b""
    j.add({"k": "state", "value": 1}, "state")
    plan = j.plan()
    assert plan is not None and plan.whole == HEADER + b'{"k":"state","value":1}\n'
    # An answer without the expected digest (an older server): whole from then on.
    j.acknowledged(plan, 0, b"")
    j.add({"k": "state", "value": 2}, "state")
    later = j.plan()
    assert later is not None and later.whole is not None


def test_results_that_are_not_json_are_refused_naming_the_entry() -> None:
    j = Journal()
    for bad in ({1, 2}, float("nan"), object()):
        with pytest.raises(JournalError, match=r"^fetch call 3: the result is not JSON"):
            j.add({"k": "run", "name": "fetch", "seq": 3, "value": bad}, "fetch call 3")
    with pytest.raises(JournalError, match="more than the checkpoint's bound"):
        j.add({"k": "run", "name": "big", "seq": 0, "value": "x" * MAX_BYTES}, "big call 0")
    assert bytes(j.data) == HEADER and j.plan() is None


SHARED = Path(__file__).resolve().parents[2] / "tests" / "journal"


def test_the_shared_journal_reads_and_rewrites_as_in_every_sdk() -> None:
    # tests/journal/: the same journal and reading the TypeScript SDK's tests check.
    checkpoint = (SHARED / "shared.jsonl").read_bytes()
    expected = json.loads((SHARED / "shared.json").read_text())
    j = Journal(checkpoint, full(checkpoint))
    assert bytes(j.data) == checkpoint and j.plan() is None
    assert j.runs == {(n, s): v for n, s, v in expected["runs"]}
    assert j.has_state and j.state == expected["state"]
    assert j.spawns == {(n, s): v for n, s, v in expected["spawns"]}
    assert j.outcomes == {(n, s): v for n, s, v in expected["outcomes"]}
    rewritten = Journal()
    for line in checkpoint.splitlines()[1:]:
        rewritten.add(json.loads(line), "shared")
    assert bytes(rewritten.data) == checkpoint
    name, seq, value = expected["outcomes"][0]
    assert _outcomes_in(expected["resumeMessages"], j.spawns[(name, seq)]) == value
