"""One contract for what the language server sends the VS Code extension besides LSP
(``geak_lsp/wire.schema.json``): the extension's types (``vscode-client/src/wire.ts``) are
generated from it, and the server's payloads are validated against it (here, and in the LSP
end-to-end tests through ``lsp.geak_editor.check_wire``). Either side changing alone fails."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import jsonschema
import pytest

from conftest import ROOT
from lsp.geak_editor import WIRE, check_wire

sys.path.insert(0, str(ROOT / "scripts"))
import wire_types  # noqa: E402


def test_the_extensions_types_are_the_schemas():
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "wire_types.py"), "--check"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def test_a_schema_change_without_the_types_is_caught():
    changed = copy.deepcopy(WIRE)
    changed["$defs"]["JobStatus"]["properties"]["eta"] = {"type": "number"}
    assert wire_types.render(changed) != (ROOT / "vscode-client" / "src" / "wire.ts").read_text(encoding="utf-8")
    assert "  eta?: number;" in wire_types.render(changed)


def test_a_payload_the_schema_does_not_know_is_caught():
    status = {"job": "job-1", "token": None, "uri": "file:///k.py", "name": "f", "kind": "optimize", "state": "running",
              "stage": "search", "message": "", "evaluated": 0, "verified": 0, "done": 0, "total": None,
              "bestSpeedup": None, "percentage": 10}
    check_wire("JobStatus", status)
    with pytest.raises(jsonschema.ValidationError, match="'eta' was unexpected"):
        check_wire("JobStatus", {**status, "eta": 3.0})
    with pytest.raises(jsonschema.ValidationError, match="'paused' is not one of"):
        check_wire("JobStatus", {**status, "state": "paused"})


def test_the_records_the_server_keeps_fit_the_schema(tmp_path):
    """The store's records as geak.results sends them (dataclasses.asdict)."""
    import dataclasses

    from geak_lsp.store import CandidateRecord, CaseRecord, RunRecord
    run = RunRecord(path="k.py", symbol="f", name="f", source_hash="h", kind="optimize", strategy="tune", device="d",
                    started_at=1.0, finished_at=2.0, outcome="verified", message="m", speedup=1.5,
                    original=[CaseRecord(label="n=1", shapes="x: f32[1]", passed=True)],
                    candidates=[CandidateRecord(label="c", verdict="verified", correct=True, cases=[])],
                    compiled={"arch": "sm_90", "stage": "sass", "kernels": [
                        {"kernel": "k", "config": "BLOCK=1", "side": "both", "error": None,
                         "rows": [["registers", "1", "2", True]]}]})
    check_wire("RunRecord", json.loads(json.dumps(dataclasses.asdict(run))))
