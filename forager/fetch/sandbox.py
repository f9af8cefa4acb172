"""How Chromium is launched: always with its sandbox, and never as root.

Playwright starts Chromium with ``--no-sandbox`` unless told otherwise, and Chromium refuses its
sandbox as root; a renderer that a page breaks out of would then run as Forager's own user, the
one that can read ``secret.key``. So:

- not root: Chromium is launched with its sandbox on;
- root: Chromium is launched through a small wrapper that gives Playwright's profile directory
  to ``FORAGER_BROWSER_USER`` and ``exec``s Chromium as that user with ``setpriv`` (Playwright
  talks to Chromium over inherited pipes, which survive the change of user), sandbox on;
- ``FORAGER_BROWSER_NO_SANDBOX=true``: the operator's explicit opt-out, launched as before.

Without ``setpriv`` or that user, a root Forager refuses to start the browser and says why.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forager.config import Settings
from forager.errors import FetchError

_WRAPPER = """#!/bin/sh
# Written by Forager: runs Chromium as {user} (uid {uid}) with its sandbox on.
for arg in "$@"; do
  case "$arg" in
    --user-data-dir=*) chown -R {uid}:{gid} "${{arg#--user-data-dir=}}" ;;
  esac
done
export HOME={home}
exec {setpriv} --reuid={uid} --regid={gid} --clear-groups -- {chromium} "$@"
"""


@dataclass(slots=True)
class Launch:
    """Keyword arguments for ``chromium.launch`` and the files to remove after it closes."""

    kwargs: dict[str, Any]
    scratch: Path | None = None

    def cleanup(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def launch_options(settings: Settings, args: list[str]) -> Launch:
    """How to launch Chromium under ``settings`` (see the module docstring)."""
    chromium = str(settings.chromium_path)
    base: dict[str, Any] = {"headless": True, "args": args}
    if settings.browser_no_sandbox:
        return Launch({**base, "executable_path": chromium, "chromium_sandbox": False})
    if os.geteuid() != 0:
        return Launch({**base, "executable_path": chromium, "chromium_sandbox": True})
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise FetchError(
            "Forager runs as root and `setpriv` (util-linux) is missing, so Chromium cannot run "
            "as an unprivileged user with its sandbox; install util-linux, run Forager as "
            "another user, or set FORAGER_BROWSER_NO_SANDBOX=true",
            error_type="internal",
        )
    try:
        user = pwd.getpwnam(settings.browser_user)
    except KeyError:
        raise FetchError(
            f"FORAGER_BROWSER_USER {settings.browser_user!r} does not exist; Chromium runs as "
            "that user when Forager runs as root",
            error_type="internal",
        ) from None
    if user.pw_uid == 0:
        raise FetchError(
            f"FORAGER_BROWSER_USER {settings.browser_user!r} is root", error_type="internal"
        )
    scratch = Path(tempfile.mkdtemp(prefix="forager-chromium-"))  # 0700, root's
    home = scratch / "home"
    home.mkdir()
    os.chown(home, user.pw_uid, user.pw_gid)
    # The browser user may reach its home below, not list or write the directory itself.
    os.chmod(scratch, 0o711)  # noqa: S103
    wrapper = scratch / "chromium"
    wrapper.write_text(
        _WRAPPER.format(
            user=shlex.quote(user.pw_name),
            uid=user.pw_uid,
            gid=user.pw_gid,
            home=shlex.quote(str(home)),
            setpriv=shlex.quote(setpriv),
            chromium=shlex.quote(chromium),
        )
    )
    wrapper.chmod(0o700)
    return Launch(
        {**base, "executable_path": str(wrapper), "chromium_sandbox": True}, scratch=scratch
    )
