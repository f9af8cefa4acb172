"""The vocabulary of missions, once: statuses, checkpoints, worker states, event names.

Seed 003 is Portuguese; Forager translates its nouns (missão = mission, sessão = session,
escritor = writer) and keeps its checkpoint values as written. Missions spell ``canceled``,
worker jobs ``cancelled``, as the seed does. ``draft`` is the seed's "(novo)": a mission in the
*Banco de Missões* that has not been queued yet.
"""

from __future__ import annotations

from enum import StrEnum


class MissionStatus(StrEnum):
    DRAFT = "draft"
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


class Checkpoint(StrEnum):
    ATRIBUIDO = "atribuido"  # queued
    EXTRACAO = "extracao"  # a worker service is scraping
    ARMAZENAMENTO = "armazenamento"  # a writer is storing
    FINALIZADO = "finalizado"  # done


class WorkerStatus(StrEnum):
    IDLE = "idle"
    INITIALIZING = "initializing"
    READY = "ready"
    SCRAPING = "scraping"
    ERROR = "error"


class MissionEvent(StrEnum):
    """Seed §3.6 / §10.1, exactly."""

    MISSION_QUEUED = "mission_queued"
    MISSION_ASSIGNED = "mission_assigned"
    MISSION_CANCELED = "mission_canceled"
    SESSION_STARTED = "session_started"
    SESSION_READY = "session_ready"
    SESSION_FAILED = "session_failed"
    SESSION_TERMINATED = "session_terminated"
    SCRAPE_STARTED = "scrape_started"
    SCRAPE_PROGRESS = "scrape_progress"
    SCRAPE_COMPLETED = "scrape_completed"
    SCRAPE_FAILED = "scrape_failed"
    SCRAPE_EMPTY = "scrape_empty"
    WRITER_STARTED = "writer_started"
    WRITER_PROGRESS = "writer_progress"
    WRITER_COMPLETED = "writer_completed"
    WRITER_FAILED = "writer_failed"
    MISSION_COMPLETED = "mission_completed"
    MISSION_FAILED = "mission_failed"
    RETRY_TRIGGERED = "retry_triggered"
    PROXY_ROTATED = "proxy_rotated"


# ``events.entity_type`` of mission events and of session events (recorded on the service).
MISSION_ENTITY = "mission"
WORKER_ENTITY = "worker_service"

MEDIA_TYPES = ("all", "video", "image")
# The closed set of languages a mission may ask for (ISO 639-1 codes).
LANGUAGES = ("pt", "en", "es", "fr", "de", "it")

# What a worker service says of its session (seed §9.1).
SESSION_WAITING = frozenset({"initializing", "connecting", "authenticating", "warming_up"})
SESSION_OK = frozenset({"ready", "scraping"})
# What it says of a scrape job.
JOB_WAITING = frozenset({"pending", "queued", "running"})
JOB_STATUSES = JOB_WAITING | {"completed", "empty", "failed", "cancelled", "paused"}
# What a writer says of its job.
WRITER_STATUSES = frozenset({"processing", "completed", "failed", "partial"})

# Missions an operator may (re)queue, and may cancel.
QUEUEABLE = (MissionStatus.DRAFT, MissionStatus.FAILED, MissionStatus.CANCELED)
CANCELABLE = (MissionStatus.QUEUED, MissionStatus.RUNNING)
