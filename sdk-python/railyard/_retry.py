"""The retry policy of the SDK (the Rust SDK's, `sdk/src/retry.rs`): exponential
backoff with jitter, and which errors are worth another try."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import grpc


@dataclass(frozen=True)
class RetryPolicy:
    """How often, and how far apart, a call is tried.

    Pause ``k`` (from 0) before try ``k + 2`` is drawn from ``[b, 2b)``, where
    ``b = min(initial_backoff * 2**k, max_backoff / 2)``: the base doubles, jitter adds
    up to as much again, and no pause reaches ``max_backoff``. Clients that failed
    together so do not retry together.
    """

    max_attempts: int = 8
    initial_backoff: float = 0.05
    max_backoff: float = 2.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts: must be at least 1")
        if self.initial_backoff < 0 or self.max_backoff <= 0:
            raise ValueError("initial_backoff, max_backoff: must be positive")

    def bounds(self, k: int) -> tuple[float, float]:
        """The bounds pause ``k`` is drawn from."""
        cap = self.max_backoff / 2
        base = min(min(self.initial_backoff, cap) * 2 ** min(k, 62), cap)
        return base, base * 2

    def delays(self) -> Iterator[float]:
        """The pauses between tries, in order: one fewer than ``max_attempts``."""
        for k in range(self.max_attempts - 1):
            lo, hi = self.bounds(k)
            yield random.uniform(lo, hi) if hi > lo else lo


def is_transient(code: grpc.StatusCode | None, message: str) -> bool:
    """Whether a failed call is worth repeating: the server could not be reached or
    is restarting (``UNAVAILABLE``), or the connection dropped before an answer came.
    ``DEADLINE_EXCEEDED`` is not repeated: the call already waited its whole deadline."""
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    return code == grpc.StatusCode.UNKNOWN and message.startswith("transport error")


def is_stream_break(code: grpc.StatusCode | None, message: str) -> bool:
    """Whether a server stream that ended in this status is worth reopening from where
    it was: besides transient errors, a stream cut by a server restart surfaces as
    ``UNKNOWN``, ``CANCELLED`` or ``INTERNAL``; reopening a read is always safe."""
    return is_transient(code, message) or code in (
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
    )
