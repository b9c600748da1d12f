"""Editor settings ``geak.*``, merged from initializationOptions and workspace/configuration
in one place, and validated: an invalid value is reported (in words, naming the setting) and
replaced by its default, so a typo never stops the server."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Optional

from runner.aot import ARCHS as _AOT_ARCHS

STRATEGIES = ("auto", "tune", "llm", "compile")
PROVIDERS = ("openai", "anthropic")
ARCHS = tuple(_AOT_ARCHS)  # the compile module's GPUs
EMITS = ("constants", "autotune")
DEVICES = ("auto", "cuda", "interpreter")


@dataclass
class Settings:
    strategy: str = "auto"
    """auto: the GEAK loop when a provider is set, else the tuner."""
    provider: Optional[str] = None
    model: Optional[str] = None
    runner_url: Optional[str] = None
    """``geak.runner.url``: a ``geak-runner serve`` URL (or file:///spool, ray://HOST:PORT, ray:auto);
    None = local."""
    iterations: int = 3
    parallel: int = 1
    interpreter: Optional[str] = None
    """``geak.interpreter``: the Python the editor starts this server with (read by the
    client; accepted here so that one settings section serves both)."""
    device: str = "auto"
    """``geak.device``: auto (a GPU if the runner has one, else the CPU interpreter), cuda, or
    interpreter (the Triton CPU interpreter even when a GPU is present)."""
    arch: Optional[str] = None
    """Target for ahead-of-time compile reports; None = the runner's GPU, else sm_90."""
    max_jobs: int = 2
    workers: int = 2
    trials: int = 2
    max_configs: int = 24
    task_budget: Optional[float] = None
    """``geak.taskBudget``: the tuner's seconds per job (the search stops there and keeps its
    best verified config); None: no limit."""
    emit: str = "constants"
    apply_untimed: bool = False
    """GEAK loop only: offer a candidate that is verified correct but could not be timed (no
    GPU) as an edit, labelled "not timed"; never called faster. The tuner chooses a config by
    its timing, so without a GPU it offers nothing either way (and says so)."""

    @property
    def effective_strategy(self) -> str:
        if self.strategy == "auto":
            return "llm" if self.provider else "tune"
        return self.strategy


# setting name (as users write it under geak.) -> (field, check)
def _choice(options, nullable=False) -> Callable[[Any], Optional[str]]:
    def check(v):
        if v is None and nullable:
            return None
        if v not in options:
            return "one of " + ", ".join(repr(o) for o in options) + (" or null" if nullable else "")
        return None
    return check


def _int(lo: int, hi: int) -> Callable[[Any], Optional[str]]:
    def check(v):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"an integer from {lo} to {hi}"
        return None
    return check


def _seconds_or_null(v) -> Optional[str]:
    if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and 1 <= v <= 86400):
        return None
    return "a number of seconds from 1 to 86400, or null"


def _bool(v) -> Optional[str]:
    return None if isinstance(v, bool) else "true or false"


def _str_or_null(v) -> Optional[str]:
    return None if v is None or (isinstance(v, str) and v.strip()) else "a non-empty string or null"


def _url(v) -> Optional[str]:
    if v is None or v == "local":
        return None
    if isinstance(v, str) and v.split("://", 1)[0] in ("http", "https", "file", "ray") and "://" in v:
        return None
    if v == "ray:auto":
        return None
    return ("'local', an http(s):// URL of a geak-runner daemon, a file:/// spool directory, a Ray cluster "
            "(ray://HOST:PORT or ray:auto), or null")


SCHEMA: dict[str, tuple[str, Callable[[Any], Optional[str]]]] = {
    "strategy": ("strategy", _choice(STRATEGIES)),
    "provider": ("provider", _choice(PROVIDERS, nullable=True)),
    "model": ("model", _str_or_null),
    "runner.url": ("runner_url", _url),
    "iterations": ("iterations", _int(1, 100)),
    "parallel": ("parallel", _int(1, 16)),
    "interpreter": ("interpreter", _str_or_null),
    "device": ("device", _choice(DEVICES)),
    "arch": ("arch", _choice(ARCHS, nullable=True)),
    "maxJobs": ("max_jobs", _int(1, 16)),
    "workers": ("workers", _int(1, 32)),
    "trials": ("trials", _int(1, 20)),
    "maxConfigs": ("max_configs", _int(1, 1000)),
    "taskBudget": ("task_budget", _seconds_or_null),
    "emit": ("emit", _choice(EMITS)),
    "applyUntimed": ("apply_untimed", _bool),
}


def _flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(doc, dict):
        return out
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key not in SCHEMA:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def section(doc: Any) -> dict[str, Any]:
    """The ``geak`` section of an initializationOptions / configuration document: either
    ``{"geak": {...}}`` or the section itself."""
    if isinstance(doc, dict) and isinstance(doc.get("geak"), dict):
        return doc["geak"]
    return doc if isinstance(doc, dict) else {}


def parse(*docs: Any) -> tuple[Settings, list[str]]:
    """Merge the documents (later ones win) and validate. Returns the settings and one
    message per problem."""
    merged: dict[str, Any] = {}
    problems: list[str] = []
    for doc in docs:
        if doc is None:
            continue
        if not isinstance(doc, dict):
            problems.append(f"geak settings: expected an object, got {type(doc).__name__}; ignored")
            continue
        merged.update(_flatten(section(doc)))
    s = Settings()
    defaults = Settings()
    for key, value in merged.items():
        if key not in SCHEMA:
            problems.append(f"geak.{key}: unknown setting, ignored (known: "
                            + ", ".join(f"geak.{k}" for k in SCHEMA) + ")")
            continue
        fname, check = SCHEMA[key]
        if fname == "runner_url" and value == "local":
            value = None
        why = check(value)
        if why:
            problems.append(f"geak.{key}: expected {why}, got {value!r}; using the default "
                            f"{getattr(defaults, fname)!r}")
            continue
        setattr(s, fname, value)
    if s.strategy == "llm" and not (s.provider and s.model):
        problems.append("geak.strategy is 'llm' but geak.provider and geak.model are not both set; "
                        "using the tuner (strategy 'tune') until they are")
        s.strategy = "tune"
    if s.provider and not s.model:
        problems.append(f"geak.provider is {s.provider!r} but geak.model is not set; using the tuner")
        s.provider = None
    return s, problems


def as_dict(s: Settings) -> dict[str, Any]:
    return dataclasses.asdict(s)
