"""Seed 003's error codes (§7.1) and its retry policy (§7.2), as data and three functions.

Retried: ERROR1xx but 104, ERROR2xx but 203, ERROR300–303. Each retry spends the mission's one
shared ``retry_count``; when none is left the phase's "exhausted" code is written instead
(ERROR104 / ERROR203 / ERROR304). ERROR400, 401, 500 and 502 fail the mission at once. A
writer error is resubmitted at most once (§5.3) even when retries are left.
"""

from __future__ import annotations

from dataclasses import dataclass

from forager.errors import ForagerError

CODES: dict[str, str] = {
    "ERROR100": "session error",
    "ERROR101": "session timeout",
    "ERROR102": "session stuck",
    "ERROR103": "session disconnected",
    "ERROR104": "session retries exhausted",
    "ERROR200": "scrape job failed",
    "ERROR201": "scrape job cancelled",
    "ERROR202": "scrape job timeout",
    "ERROR203": "scrape retries exhausted",
    "ERROR300": "writer error",
    "ERROR301": "writer connection refused",
    "ERROR302": "writer connection timeout",
    "ERROR303": "writer schema error",
    "ERROR304": "writer retries exhausted",
    "ERROR400": "storage error",
    "ERROR401": "storage configuration invalid",
    "ERROR500": "internal error",
    "ERROR501": "no proxy available",
    "ERROR502": "worker service unavailable",
}

_EXHAUSTED = {"session": "ERROR104", "scrape": "ERROR203", "writer": "ERROR304"}
_RETRIED = frozenset(
    {"ERROR100", "ERROR101", "ERROR102", "ERROR103"}
    | {"ERROR200", "ERROR201", "ERROR202"}
    | {"ERROR300", "ERROR301", "ERROR302", "ERROR303"}
)
WRITER_RESUBMITS = 1


class MissionFailure(ForagerError):
    """Something went wrong for a mission; ``code`` is one of ``CODES``."""

    def __init__(self, code: str, message: str) -> None:
        if code not in CODES:
            raise ValueError(f"unknown mission error code {code}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message  # without the code, which str() of the failure starts with


def phase_of(code: str) -> str:
    """``session``, ``scrape``, ``writer`` or ``system`` (seed §7.1's "Fase")."""
    return {"1": "session", "2": "scrape", "3": "writer"}.get(code[5], "system")


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy decides for one failure: retry, or fail with ``final_code``."""

    retry: bool
    final_code: str


def decide(code: str, *, retry_count: int, max_retries: int, writer_retries: int = 0) -> Verdict:
    """Seed §7.2: retry when the code allows it and a retry is left, else fail for good."""
    if code not in _RETRIED:
        return Verdict(False, code)
    phase = phase_of(code)
    left = retry_count < max_retries
    if phase == "writer" and writer_retries >= WRITER_RESUBMITS:
        left = False
    return Verdict(True, code) if left else Verdict(False, _EXHAUSTED[phase])
