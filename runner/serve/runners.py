"""Which runner evaluates: the ``Runner`` interface, and opening the runner a spec names.

  local                  a worker pool on this machine (``LocalRunner``)
  http(s)://HOST:PORT    a ``geak-runner serve`` daemon (``RemoteRunner``; token from GEAK_RUNNER_TOKEN)
  file:///DIR            the spool directory of such a daemon (``SpoolRunner``)
  ray://HOST:PORT        a Ray cluster through the Ray client (``RayRunner``; ``ray:auto``: the
                         cluster this machine belongs to)

``open_runner`` is the one place a spec is read: the CLI (``--runner``), the benchmark harness
and the language server (``geak.runner.url``) all open their runner here. Another kind of
runner adds its URL scheme to ``SCHEMES``. No torch here.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Callable, Optional, Protocol

from ..config import ConfigError
from ..schema import DeviceInfo, EvalRequest, EvalResult


class Runner(Protocol):
    """What every runner offers, local or remote."""

    device: str
    """The device this runner was asked for: ``auto``, ``cuda``, ``rocm`` or ``interpreter``;
    ``auto`` for a daemon's client (the daemon's own ``--device`` applies). What it runs on:
    ``device_info()``."""

    @property
    def parallelism(self) -> int:
        """How many evaluations it runs at once (a larger batch queues): a local pool's size, a
        daemon's lanes × workers, a Ray cluster's actors × workers. A search sizes its batches
        by it."""
        ...

    def warm(self, n: Optional[int] = None) -> DeviceInfo:
        """Start now what evaluations need (``n`` workers of a local pool, a daemon's or a
        cluster's connection), so that no evaluation pays for it; the device."""
        ...

    def evaluate(self, request: EvalRequest) -> EvalResult: ...
    def evaluate_many(self, requests: list[EvalRequest]) -> list[EvalResult]: ...
    def device_info(self) -> DeviceInfo: ...
    def close(self) -> None: ...


USAGE = "use 'local', http://HOST:PORT, https://HOST:PORT, file:///SPOOL/DIR, ray://HOST:PORT or ray:auto"


def _local(spec: str, device: str, workers: Optional[int]) -> Runner:
    from .local import LocalRunner
    return LocalRunner(workers=workers, device=device)


def _daemon(spec: str, device: str, workers: Optional[int]) -> Runner:
    # The daemon's own --device and --workers apply there.
    try:
        from .remote import RemoteRunner
        return RemoteRunner(spec, os.environ.get("GEAK_RUNNER_TOKEN") or None)
    except ImportError as e:
        raise ConfigError(f"runner '{spec}': the remote client needs httpx ({e}); pip install httpx") from None


def _spool(spec: str, device: str, workers: Optional[int]) -> Runner:
    from .remote import SpoolRunner
    return SpoolRunner(urllib.parse.unquote(spec[len("file://"):]))


def _ray(spec: str, device: str, workers: Optional[int]) -> Runner:
    # One actor per GPU of the cluster, each with a worker pool of `workers` (runner/serve/ray.py).
    from .ray import RayRunner
    return RayRunner.from_spec(spec, device=device, workers=workers or 2)


SCHEMES: dict[str, Callable[[str, str, Optional[int]], Runner]] = {
    "http": _daemon,
    "https": _daemon,
    "file": _spool,
    "ray": _ray,
}
"""URL scheme -> how to open a runner of that kind: ``(spec, device, workers) -> Runner``."""


def open_runner(spec: Optional[str] = None, device: str = "auto", workers: Optional[int] = None) -> Runner:
    """The runner ``spec`` names (default ``$GEAK_RUNNER_URL``, else ``local``). ``device`` and
    ``workers`` are the local pool's. A spec that names no runner is a ``ConfigError`` that
    says which specs there are."""
    spec = spec or os.environ.get("GEAK_RUNNER_URL") or "local"
    if spec == "local":
        return _local(spec, device, workers)
    scheme, sep, _ = spec.partition("://")
    if spec == "ray:auto":  # the only spec without "//"
        scheme, sep = "ray", ":"
    opener = SCHEMES.get(scheme) if sep else None
    if opener is None:
        raise ConfigError(f"runner '{spec}': {USAGE}")
    try:
        return opener(spec, device, workers)
    except ValueError as e:
        raise ConfigError(str(e)) from None
