"""Where a scrape's results are: seed §5.2 step 2.5.1, refusing anything that leaves storage.

``worker_data_url = https://{storage_domain}/{job_id}/{job_id}_results.json``. The job id comes
from the worker service, so it is checked before it is put in any URL or path: one path segment
of letters, digits, ``_`` and ``-`` (no ``/``, ``..``, ``@``, ``%``, ``?``). ``storage_domain``
may also be a full ``http(s)://host[:port][/prefix]`` (the reference worker serves plain HTTP on
loopback); a bare ``host[:port][/prefix]`` means HTTPS, as in the seed.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from forager.missions.codes import MissionFailure

_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
# A host name or an IPv4 address (no bracketed IPv6 literal: the schema could not describe
# which bracketed texts urlsplit takes without a page of regex).
_HOST = re.compile(rf"{_LABEL}(?:\.{_LABEL})*(?::[0-9]{{1,5}})?")
_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")


def is_safe_job_id(value: object) -> bool:
    """One URL path segment, nothing that could climb out of it or change the host."""
    return isinstance(value, str) and _JOB_ID.fullmatch(value) is not None


def storage_base(storage_domain: str) -> str:
    """``scheme://host[:port][/prefix]`` without a trailing slash; ``ValueError`` if unusable."""
    text = storage_domain.strip()
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https"):
        raise ValueError("the storage domain must be http:// or https://")
    if "@" in parts.netloc or not _HOST.fullmatch(parts.netloc):
        raise ValueError("the storage domain needs a host (and optional port), no credentials")
    if parts.query or parts.fragment:
        raise ValueError("the storage domain has no query or fragment")
    segments = [s for s in parts.path.split("/") if s]
    if any(s in (".", "..") or not _SEGMENT.fullmatch(s) for s in segments):
        raise ValueError("the storage path may only hold plain path segments")
    prefix = "".join(f"/{s}" for s in segments)
    return f"{parts.scheme}://{parts.netloc}{prefix}"


def data_url(storage_domain: str | None, job_id: str) -> str:
    """The results URL of ``job_id``; ERROR401 for an unusable storage, ERROR400 for the id."""
    if not storage_domain:
        raise MissionFailure("ERROR401", "the worker service has no storage_domain")
    try:
        base = storage_base(storage_domain)
    except ValueError as exc:
        raise MissionFailure("ERROR401", f"storage_domain is unusable: {exc}") from exc
    if not is_safe_job_id(job_id):
        raise MissionFailure("ERROR400", "the job id would build a URL outside the storage")
    return f"{base}/{job_id}/{job_id}_results.json"
