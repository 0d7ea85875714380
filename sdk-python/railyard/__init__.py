"""Railyard's Python SDK: a client for the gRPC API (:class:`Client`,
:class:`AsyncClient`) and a step worker for Python agents (:class:`StepWorker`)."""

from railyard._connect import ApiKey
from railyard._retry import RetryPolicy
from railyard.client import AsyncClient
from railyard.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    ConfigurationError,
    ContractViolation,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    JournalError,
    LeaseLost,
    NotFound,
    OutOfRange,
    PermissionDenied,
    RailyardError,
    ResourceExhausted,
    StepCancelled,
    StepError,
    StepInterrupted,
    StepPaused,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    Unknown,
    WorkerShutdown,
)
from railyard.step import ChildOutcome, ChildRun, Step, StepResult, current_step, durable
from railyard.sync import Client
from railyard.v1.common_pb2 import RunStatus
from railyard.worker import StepWorker

__version__ = "0.1.0"

__all__ = [
    "Aborted",
    "AlreadyExists",
    "ApiKey",
    "AsyncClient",
    "Cancelled",
    "ChildOutcome",
    "ChildRun",
    "Client",
    "ConfigurationError",
    "ContractViolation",
    "DeadlineExceeded",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "JournalError",
    "LeaseLost",
    "NotFound",
    "OutOfRange",
    "PermissionDenied",
    "RailyardError",
    "ResourceExhausted",
    "RetryPolicy",
    "RunStatus",
    "Step",
    "StepCancelled",
    "StepError",
    "StepInterrupted",
    "StepPaused",
    "StepResult",
    "StepWorker",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "Unknown",
    "WorkerShutdown",
    "current_step",
    "durable",
]
