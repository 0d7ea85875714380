"""The exceptions of the SDK: one base, :class:`RailyardError`, and a class per gRPC
status a caller may want to tell apart; plus the interruptions a step handler sees,
which derive from :class:`asyncio.CancelledError` so that ``except Exception`` does
not swallow them."""

from __future__ import annotations

import asyncio
import re

import grpc


class RailyardError(Exception):
    """Every error of the SDK. ``code`` is the gRPC status it came from (None for
    errors found on this side, such as a bad setting)."""

    code: grpc.StatusCode | None = None

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    @property
    def transient(self) -> bool:
        """Whether a later try of the same call may succeed."""
        return False


class ConfigurationError(RailyardError, ValueError):
    """A setting that cannot be used: the server URL, the API key, a TLS file."""


class NotFound(RailyardError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(RailyardError):
    code = grpc.StatusCode.ALREADY_EXISTS


# "field: problem", the server's way of naming what is wrong (a JSON path or a field
# name, maybe dotted or indexed).
_FIELD = re.compile(r"^([A-Za-z_$][\w$.\[\]\"-]*): ")


class InvalidArgument(RailyardError):
    """The request was wrong. ``field`` is the field (or JSON path) the server's
    message names first, when it names one."""

    code = grpc.StatusCode.INVALID_ARGUMENT

    def __init__(self, message: str, *, code: grpc.StatusCode | None = None) -> None:
        super().__init__(message, code=code)
        m = _FIELD.match(message)
        self.field: str | None = m.group(1) if m else None


class ContractViolation(InvalidArgument):
    """A step's result refused for breaking its output contract. ``violations`` are
    the server's ``"JSON path: reason"`` lines."""

    def __init__(self, message: str, violations: list[str]) -> None:
        super().__init__(message)
        self.field = None
        self.violations = violations


class PermissionDenied(RailyardError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Unauthenticated(RailyardError):
    code = grpc.StatusCode.UNAUTHENTICATED


class FailedPrecondition(RailyardError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(RailyardError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(RailyardError):
    code = grpc.StatusCode.UNAVAILABLE

    @property
    def transient(self) -> bool:
        return True


class DeadlineExceeded(RailyardError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED

    @property
    def transient(self) -> bool:
        return True


class Cancelled(RailyardError):
    code = grpc.StatusCode.CANCELLED


class Aborted(RailyardError):
    code = grpc.StatusCode.ABORTED


class OutOfRange(RailyardError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(RailyardError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(RailyardError):
    code = grpc.StatusCode.INTERNAL


class Unknown(RailyardError):
    code = grpc.StatusCode.UNKNOWN


class JournalError(RailyardError):
    """A durable step's result that cannot be journaled (not JSON, or past the
    checkpoint's size bound); nothing was written."""


class StepError(RailyardError):
    """Raise it from a step handler to fail the step with this error type (matched
    against the retry policy's ``nonRetryableErrorTypes``) and, with
    ``non_retryable``, without further attempts."""

    def __init__(
        self, message: str, *, error_type: str = "step_error", non_retryable: bool = False
    ) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.non_retryable = non_retryable


class StepInterrupted(asyncio.CancelledError):
    """The step must stop: raised into its handler at an await. Derived from
    :class:`asyncio.CancelledError`, so ``except Exception`` does not catch it;
    clean up in ``finally`` and let it propagate. What the worker reports does not
    depend on what the handler does with it."""


class StepCancelled(StepInterrupted):
    """The run's cancellation was requested: the step is failed as ``canceled``."""


class StepPaused(StepInterrupted):
    """The run was paused: the step is suspended (failed as ``paused`` with its
    journal, using up no attempt) and resumes from the journal when unpaused."""


class LeaseLost(StepInterrupted):
    """The step's lease is gone (it timed out, or the run moved on or closed):
    nothing more is sent for it."""


class WorkerShutdown(StepInterrupted):
    """The worker is shutting down past its grace period: the step is failed back
    as retryable (``worker_shutdown``) with its journal, for another worker."""


_BY_CODE: dict[grpc.StatusCode, type[RailyardError]] = {
    cls.code: cls
    for cls in (
        NotFound,
        AlreadyExists,
        InvalidArgument,
        PermissionDenied,
        Unauthenticated,
        FailedPrecondition,
        ResourceExhausted,
        Unavailable,
        DeadlineExceeded,
        Cancelled,
        Aborted,
        OutOfRange,
        Unimplemented,
        Internal,
        Unknown,
    )
    if cls.code is not None
}

_VIOLATION = re.compile(r"^- (.+)$", re.MULTILINE)


def from_status(code: grpc.StatusCode, message: str) -> RailyardError:
    """The exception for a gRPC status."""
    if code == grpc.StatusCode.INVALID_ARGUMENT and "output contract" in message:
        violations = _VIOLATION.findall(message)
        if violations:
            return ContractViolation(message, violations)
    cls = _BY_CODE.get(code)
    if cls is None:
        return RailyardError(f"{code.name}: {message}", code=code)
    return cls(message, code=code)


def from_rpc_error(e: grpc.RpcError) -> RailyardError:
    """The exception for a failed call (``grpc.RpcError`` or ``grpc.aio.AioRpcError``)."""
    code = e.code() if hasattr(e, "code") else grpc.StatusCode.UNKNOWN
    details = e.details() if hasattr(e, "details") else str(e)
    return from_status(code or grpc.StatusCode.UNKNOWN, details or "")
