"""Installable as a package: the wheel ``uv build`` makes, installed into a clean venv outside
the checkout, migrates a database, serves the API and the dashboard (assets included) and runs
a worker — how operators put workers on other machines.

The venv takes its dependencies from uv's cache (``--offline``, the versions of ``uv.lock``),
so the test needs no network and takes seconds. One xdist worker runs it (the processes group).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.agents import free_port
from tests.support.cli import clean_env

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _uv() -> list[str]:
    """uv as the Makefile finds it: on PATH, else the module pip installed for python3."""
    found = shutil.which("uv")
    if found:
        return [found]
    python3 = shutil.which("python3")
    if (
        python3 is None
        or subprocess.run([python3, "-m", "uv", "--version"], capture_output=True).returncode
    ):
        pytest.skip("uv is not installed (make bootstrap installs it)")
    return [python3, "-m", "uv"]


def _run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with only the built wheel and its locked dependencies; its bin directory."""
    work = tmp_path_factory.mktemp("package")
    dist = work / "dist"
    _run(*_uv(), "build", "--offline", "--wheel", "--out-dir", str(dist), str(ROOT), cwd=work)
    [wheel] = dist.glob("forager-*.whl")
    venv = work / "venv"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    # The locked dependencies, from uv's cache, then the wheel alone on top.
    sync = ("sync", "--offline", "--frozen", "--no-dev", "--no-install-project", "--quiet")
    _run(*_uv(), *sync, "--python", sys.executable, "--project", str(ROOT), cwd=work, env=env)
    install = ("pip", "install", "--offline", "--no-deps", "--quiet", "--python", str(venv))
    _run(*_uv(), *install, str(wheel), cwd=work, env=env)
    return venv / "bin"


def _env(data: Path) -> dict[str, str]:
    env = clean_env(data)
    env.pop("PYTHONPATH", None)
    env.pop("VIRTUAL_ENV", None)
    return env


def test_wheel_migrates_serves_and_works(installed: Path, tmp_path: Path) -> None:
    env = _env(tmp_path / "data")
    where = _run(
        str(installed / "python"),
        "-c",
        "import forager; print(forager.__file__)",
        cwd=tmp_path,
        env=env,
    )
    assert not where.startswith(str(ROOT)) and "site-packages" in where

    upgraded = _run(str(installed / "forager"), "db", "upgrade", cwd=tmp_path, env=env)
    assert "database at revision" in upgraded

    # serve and a worker side by side, as on two machines sharing one database.
    port = free_port()
    serve = _start(
        installed, tmp_path, {**env, "FORAGER_SERVE_WORKERS": "0"}, "serve", "--port", str(port)
    )
    worker = _start(installed, tmp_path, env, "worker", "--concurrency", "1")
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 180  # a safety net for a loaded machine
        while True:
            try:
                health = httpx.get(f"{base}/health", timeout=2)
                break
            except httpx.TransportError:
                assert serve.poll() is None, serve.communicate()[0]
                assert time.monotonic() < deadline, "serve did not answer within 60 s"
                time.sleep(0.1)
        assert health.status_code == 200, health.text
        dashboard = httpx.get(base + "/", timeout=5)
        assert dashboard.status_code == 200 and "/ui/static/" in dashboard.text
        for asset in ("app.js", "app.css"):
            response = httpx.get(f"{base}/ui/static/{asset}", timeout=5)
            assert response.status_code == 200 and len(response.content) > 100, asset
        assert worker.stdout is not None
        for line in worker.stdout:  # the pool logs once it is claiming
            if " started (concurrency 1)" in line:
                break
        else:
            raise AssertionError("the worker exited before it started")
    finally:
        for process in (serve, worker):
            process.send_signal(signal.SIGTERM)
        served = serve.communicate(timeout=30)[0]
        worked = worker.communicate(timeout=30)[0]
    # uvicorn shuts down gracefully, then re-raises SIGTERM: -15 is its clean exit.
    assert serve.returncode in (0, -signal.SIGTERM), served
    assert "stopped after 0 tasks" in served
    assert worker.returncode == 0, worked
    assert "stopped after 0 tasks" in worked


def _start(bin_dir: Path, cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(bin_dir / "forager"), *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
