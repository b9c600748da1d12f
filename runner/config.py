"""Project settings: ``[tool.geak]`` in the user's pyproject.toml -> EvalOptions.

```toml
[tool.geak]
trials = 3
allow_torch_ops = ["aten.mm"]
interpreter_max_elements = 65536
speedup_flag = 10
[tool.geak.tolerance]
float16 = { atol = 1e-3, rtol = 2e-3 }
[tool.geak.limits]
run_s = 300
```
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Optional

from .schema import EvalOptions, Limits, SchemaError, Tolerance, check_limits, from_dict

KNOWN = {f for f in EvalOptions.__dataclass_fields__}


class ConfigError(ValueError):
    pass


def _load_toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore
        except ModuleNotFoundError:
            return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError:
        return {}
    except Exception as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None


def project_settings(root: Path) -> dict[str, Any]:
    py = root / "pyproject.toml"
    if not py.is_file():
        return {}
    return dict(_load_toml(py).get("tool", {}).get("geak", {}))


def options_from_settings(settings: dict[str, Any], where: str = "[tool.geak]",
                          base: Optional[EvalOptions] = None) -> EvalOptions:
    """Validated options; unknown keys and bad values are errors that name the key."""
    opts = base or EvalOptions()
    for key, value in settings.items():
        if key in ("strategy", "provider", "model", "iterations", "parallel", "runner", "arch"):
            continue  # the agent's settings, read elsewhere
        if key not in KNOWN:
            raise ConfigError(f"{where}: unknown setting '{key}' (known: {', '.join(sorted(KNOWN))})")
        try:
            if key == "tolerance":
                if not isinstance(value, dict):
                    raise SchemaError("expected a table of dtype = { atol = .., rtol = .. }")
                opts.tolerance = {k: from_dict(Tolerance, v, f"{where}.tolerance.{k}") for k, v in value.items()}
            elif key == "limits":
                merged = {**opts.limits.__dict__, **value} if isinstance(value, dict) else value
                opts.limits = from_dict(Limits, merged, f"{where}.limits")
                check_limits(opts.limits, f"{where}.limits")
            else:
                current = {**opts.__dict__}
                current.pop("tolerance"), current.pop("limits")
                current[key] = value
                checked = from_dict(EvalOptions, current, where)
                setattr(opts, key, getattr(checked, key))
        except SchemaError as e:
            raise ConfigError(str(e)) from None
    return opts


def project_options(root: Path) -> EvalOptions:
    """The options of the project at ``root``: its ``[tool.geak]`` over the defaults."""
    return options_from_settings(project_settings(root), f"{root / 'pyproject.toml'} [tool.geak]")


def phase_limits(limits: Limits, seconds: float, option: str = "--timeout") -> Limits:
    """``limits`` with every phase (import, run, timing) limited to ``seconds``."""
    if not (math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"{option} must be a positive number of seconds")
    return dataclasses.replace(limits, import_s=seconds, run_s=seconds, timing_s=seconds)
