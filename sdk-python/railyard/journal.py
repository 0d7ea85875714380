"""The step journal (docs/step-journal.md): a step's checkpoint as JSON lines, read at
the start of an attempt and extended as durable calls finish; and the digest chain a
heartbeat's ``checkpoint_append`` names its base by (``wire/src/checkpoint.rs``)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from railyard.errors import JournalError

HEADER = b'{"journal":"railyard/1"}\n'
MAX_BYTES = 8 * 1024 * 1024
EMPTY_DIGEST = bytes(32)


def extend(base: bytes, data: bytes) -> bytes:
    """The digest after appending ``data`` to a checkpoint whose digest is ``base``."""
    return hashlib.sha256(base + data).digest()


def full(data: bytes) -> bytes:
    """The digest of a checkpoint written whole."""
    return extend(EMPTY_DIGEST, data)


def encode(record: dict[str, Any], entry: str) -> bytes:
    """One record's line; :class:`JournalError` naming ``entry`` when it is not JSON."""
    try:
        text = json.dumps(record, allow_nan=False, separators=(",", ":"), ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise JournalError(
            f"{entry}: the result is not JSON ({e}); nothing was journaled"
        ) from None
    return text.encode() + b"\n"


@dataclass
class Plan:
    """How the journal goes on the wire with the next heartbeat."""

    whole: bytes | None = None
    append: bytes = b""
    base_length: int = 0
    base_digest: bytes = b""
    # The digest the server should answer once it has stored it.
    expected: bytes = b""
    length: int = 0


class Journal:
    """A step attempt's journal: what the task's checkpoint held and what this
    attempt added, and what of it the server has acknowledged."""

    def __init__(self, checkpoint: bytes = b"", digest: bytes = b"") -> None:
        self.runs: dict[tuple[str, int], Any] = {}
        self.spawns: dict[tuple[str, int], list[str]] = {}
        self.outcomes: dict[tuple[str, int], Any] = {}
        self.state: Any = None
        self.has_state = False
        # Whether the task's checkpoint was a journal (else this attempt starts one).
        self.resumed = checkpoint.startswith(HEADER)
        self.data = bytearray(HEADER)
        # Bytes of ``data`` the server holds, as far as this attempt needs to know (a
        # journal not yet written counts as held, so that nothing is sent until a
        # record is); and, when the server reported digests, the base the next append
        # extends (none: the next write goes whole).
        self.stored = len(HEADER)
        self.base: tuple[int, bytes] | None = None
        if not self.resumed:
            return
        pos = len(HEADER)
        while True:
            nl = checkpoint.find(b"\n", pos)
            if nl < 0:
                break
            try:
                record = json.loads(checkpoint[pos:nl])
            except ValueError:
                break
            if not isinstance(record, dict):
                break
            self._index(record)
            pos = nl + 1
        self.data = bytearray(checkpoint[:pos])
        self.stored = pos
        if pos == len(checkpoint) and len(digest) == 32:
            self.base = (pos, digest)

    @property
    def records(self) -> int:
        """Whether anything beyond the header is in it."""
        return len(self.data) - len(HEADER)

    def _index(self, r: dict[str, Any]) -> None:
        k, name, seq = r.get("k"), r.get("name"), r.get("seq")
        if k == "state" and "value" in r:
            self.state, self.has_state = r["value"], True
        if not isinstance(name, str) or not isinstance(seq, int):
            return
        if k == "run" and "value" in r:
            self.runs[(name, seq)] = r["value"]
        elif k == "spawn" and isinstance(r.get("run_ids"), list):
            self.spawns[(name, seq)] = [str(i) for i in r["run_ids"]]
        elif k == "outcomes" and "value" in r:
            self.outcomes[(name, seq)] = r["value"]

    def add(self, record: dict[str, Any], entry: str) -> int:
        """Adds a record (not yet sent); answers the journal's length with it."""
        line = encode(record, entry)
        if len(self.data) + len(line) > MAX_BYTES:
            raise JournalError(
                f"{entry}: the journal would be {len(self.data) + len(line)} bytes, more than "
                f"the checkpoint's bound of {MAX_BYTES}; nothing was journaled"
            )
        # Indexed from its encoded form, so a replay in this attempt sees what a later
        # attempt will read.
        self._index(json.loads(line))
        self.data += line
        return len(self.data)

    def plan(self) -> Plan | None:
        """What the next heartbeat carries; None when the server has it all."""
        length = len(self.data)
        if self.stored == length:
            return None
        if self.base is not None and self.base[0] <= length:
            base_len, base_digest = self.base
            tail = bytes(self.data[base_len:])
            return Plan(
                append=tail,
                base_length=base_len,
                base_digest=base_digest,
                expected=extend(base_digest, tail),
                length=length,
            )
        whole = bytes(self.data)
        return Plan(whole=whole, expected=full(whole), length=length)

    def acknowledged(self, plan: Plan, length: int, digest: bytes) -> None:
        """The server stored what ``plan`` sent and answered ``length`` and ``digest``."""
        self.stored = plan.length
        ok = length == plan.length and digest == plan.expected
        self.base = (plan.length, plan.expected) if ok else None

    def refused(self) -> None:
        """The server refused an append's base: send it whole next."""
        self.base = None
        self.stored = 0

    def whole(self) -> bytes:
        """The journal to send with a failure, a pause or a wait: empty when the task
        carried another format's checkpoint and this attempt journaled nothing (so it
        is not replaced by an empty journal)."""
        if not self.resumed and not self.records:
            return b""
        return bytes(self.data)
