"""The run directory: everything one run asked, got and measured, so a person can inspect it
and ``--resume`` can go on from it.

  run.json           what was asked: target, provider, model, settings; updated with the state
  request.json       the target's EvalRequest as evaluated (the reference's text is fixed here)
  baseline.json      the original checked against itself (device, and its timing on a GPU)
  system.md          the system prompt
  steps/iNN-cK/      one attempt: prompt.md, response.md, candidate.py, result.json (EvalResult),
                     step.json (kind, outcome, tokens, errors, how the code was extracted)
  report.json        the final report
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from runner.schema import EvalRequest, EvalResult, SchemaError, request_from_json, result_from_json, to_json

from agent.llm.records import Step

STEP_META = ("id", "iteration", "lane", "kind", "extraction", "notes", "error", "error_kind", "outcome",
             "input_tokens", "output_tokens", "seconds", "truncated", "compiled")


class RunDirError(Exception):
    """A run directory that cannot be resumed; the message says why."""


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


class RunDir:
    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def create(cls, base: Path, symbol: str) -> "RunDir":
        stamp = time.strftime("%Y%m%d-%H%M%S")
        name = f"{stamp}-{re.sub(r'[^A-Za-z0-9_]+', '_', symbol)}"
        path, n = Path(base) / name, 1
        while path.exists():
            n += 1
            path = Path(base) / f"{name}-{n}"
        (path / "steps").mkdir(parents=True)
        return cls(path)

    # ------------------------------------------------------------------ writing

    def write_config(self, config: dict) -> None:
        _write(self.path / "run.json", json.dumps(config, indent=2))

    def write_request(self, request: EvalRequest) -> None:
        _write(self.path / "request.json", to_json(request, indent=2))

    def write_baseline(self, result: EvalResult) -> None:
        _write(self.path / "baseline.json", to_json(result, indent=2))

    def write_system(self, text: str) -> None:
        _write(self.path / "system.md", text)

    def write_report(self, report) -> None:
        _write(self.path / "report.json", to_json(report, indent=2))

    def save(self, step: Step) -> None:
        d = self.path / "steps" / step.id
        d.mkdir(parents=True, exist_ok=True)
        if step.prompt:
            _write(d / "prompt.md", step.prompt)
        if step.response is not None:
            _write(d / "response.md", step.response)
        if step.source is not None:
            _write(d / "candidate.py", step.source)
        if step.result is not None:
            _write(d / "result.json", to_json(step.result, indent=2))
        _write(d / "step.json", json.dumps({k: getattr(step, k) for k in STEP_META}, indent=2))

    # ------------------------------------------------------------------ reading

    def read_config(self) -> dict:
        try:
            return json.loads((self.path / "run.json").read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise RunDirError(f"{self.path}: not a run directory (run.json: {e})") from None

    def read_request(self) -> EvalRequest:
        try:
            return request_from_json((self.path / "request.json").read_text())
        except (OSError, SchemaError) as e:
            raise RunDirError(f"{self.path}/request.json: {e}") from None

    def steps(self) -> list[Step]:
        out = []
        for d in sorted((self.path / "steps").glob("i*-c*")):
            try:
                meta = json.loads((d / "step.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue  # a step cut off before its first record: redone
            kwargs = {k: meta[k] for k in STEP_META if k in meta}
            s = Step(**kwargs)
            for name, attr in (("prompt.md", "prompt"), ("response.md", "response"), ("candidate.py", "source")):
                if (d / name).exists():
                    setattr(s, attr, (d / name).read_text(encoding="utf-8"))
            if (d / "result.json").exists():
                try:
                    s.result = result_from_json((d / "result.json").read_text())
                except SchemaError:
                    s.result, s.outcome = None, None  # evaluated again
            out.append(s)
        return out
