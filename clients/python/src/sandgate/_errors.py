"""Errors: every problem (RFC 9457) the gateway answers is raised as a SandgateError subclass.

The class is picked by the problem's ``type`` (``https://sandgate.dev/problems/<kind>``,
internal/api/problem.go and internal/fault), falling back to the HTTP status when the type
is unknown, so a newer gateway's kinds still land in the right family.
"""

from __future__ import annotations

from typing import Any

PROBLEM_TYPE_BASE = "https://sandgate.dev/problems/"


class SandgateError(Exception):
    """Base of every error of this package."""


class ConfigurationError(SandgateError):
    """The client could not be set up: no gateway URL or credential, or conflicting ones."""


class StreamError(SandgateError):
    """An event stream ended before its result and could not be resumed."""


class ProblemError(SandgateError):
    """A problem (RFC 9457) the gateway answered.

    Attributes: ``type`` (the stable URI), ``kind`` (its last segment, e.g. ``not-found``),
    ``status`` (HTTP status), ``title``, ``detail`` (what went wrong and what to do),
    ``instance``, ``request_id``, ``errors`` (field-level failures: dicts with ``field`` and
    ``message``), ``retry_after`` (seconds from ``Retry-After``, or None) and ``body`` (the
    whole problem document).
    """

    def __init__(self, problem: dict[str, Any], status: int, retry_after: float | None = None) -> None:
        self.body = problem
        self.type: str = str(problem.get("type") or "about:blank")
        self.kind: str = self.type.removeprefix(PROBLEM_TYPE_BASE) if self.type.startswith(PROBLEM_TYPE_BASE) else ""
        self.status: int = int(problem.get("status") or status)
        self.title: str = str(problem.get("title") or "")
        self.detail: str = str(problem.get("detail") or "")
        self.instance: str | None = problem.get("instance")
        self.request_id: str | None = problem.get("request_id")
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        self.retry_after = retry_after
        super().__init__(f"{self.status} {self.title or self.kind}: {self.detail}" if self.detail else f"{self.status} {self.title or self.kind}")


class ValidationError(ProblemError):
    """400 ``validation`` / ``config``: the request is malformed or the configuration refuses it."""


class AuthenticationError(ProblemError):
    """401 ``unauthenticated``: missing, expired or invalid credential."""


class ForbiddenError(ProblemError):
    """403 ``forbidden``: the principal may not use the profile or resource."""


class PolicyError(ForbiddenError):
    """403 ``policy``: a policy cannot be enforced, or a path escapes the workspace."""


class NotFoundError(ProblemError):
    """404 ``not-found``: unknown resource (another principal's is unknown too)."""


class ConflictError(ProblemError):
    """409 ``conflict``: the operation does not fit the scope or the resource's state."""


class PausedError(ConflictError):
    """409 ``paused``: the session is paused; resume it first."""


class TooLargeError(ProblemError):
    """413 ``too-large``: input over a configured limit."""


class UnsupportedMediaTypeError(ProblemError):
    """415 ``unsupported-media-type``."""


class RangeNotSatisfiableError(ProblemError):
    """416 ``range-not-satisfiable``."""


class CapabilityError(ProblemError):
    """422 ``capability``: the provider does not support the operation."""


class QuotaError(ProblemError):
    """429 ``quota``: the caller is at one of its quotas; ``retry_after`` says when to retry."""


RateLimitedError = QuotaError


class WorkspaceFullError(ProblemError):
    """507 ``workspace-full``: no space left in the sandbox's workspace; nothing was written."""


class UpstreamError(ProblemError):
    """502 ``provision`` / ``gone``: the sandbox could not be made or reached."""


class UnavailableError(ProblemError):
    """503 ``unavailable`` / ``broker``: nothing was decided; retry after ``retry_after``."""


class TimeoutError(ProblemError):  # noqa: A001 - the problem kind's name
    """504/408 ``timeout``: an operation exceeded its timeout."""


class InternalError(ProblemError):
    """500 ``internal``: a bug in the gateway; report ``request_id``."""


class MethodNotAllowedError(ProblemError):
    """405 ``method-not-allowed``."""


KIND_ERRORS: dict[str, type[ProblemError]] = {
    "validation": ValidationError,
    "config": ValidationError,
    "unauthenticated": AuthenticationError,
    "forbidden": ForbiddenError,
    "policy": PolicyError,
    "not-found": NotFoundError,
    "conflict": ConflictError,
    "paused": PausedError,
    "too-large": TooLargeError,
    "unsupported-media-type": UnsupportedMediaTypeError,
    "range-not-satisfiable": RangeNotSatisfiableError,
    "capability": CapabilityError,
    "quota": QuotaError,
    "workspace-full": WorkspaceFullError,
    "provision": UpstreamError,
    "gone": UpstreamError,
    "unavailable": UnavailableError,
    "broker": UnavailableError,
    "timeout": TimeoutError,
    "internal": InternalError,
    "method-not-allowed": MethodNotAllowedError,
}

STATUS_ERRORS: dict[int, type[ProblemError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: ForbiddenError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    408: TimeoutError,
    409: ConflictError,
    413: TooLargeError,
    415: UnsupportedMediaTypeError,
    416: RangeNotSatisfiableError,
    422: CapabilityError,
    429: QuotaError,
    500: InternalError,
    502: UpstreamError,
    503: UnavailableError,
    504: TimeoutError,
    507: WorkspaceFullError,
}


def problem_error(problem: dict[str, Any], status: int, retry_after: float | None = None) -> ProblemError:
    """The typed error for a problem document answered with ``status``."""
    t = str(problem.get("type") or "")
    cls = KIND_ERRORS.get(t.removeprefix(PROBLEM_TYPE_BASE)) if t.startswith(PROBLEM_TYPE_BASE) else None
    if cls is None:
        cls = STATUS_ERRORS.get(status, ProblemError)
    return cls(problem, status, retry_after)
