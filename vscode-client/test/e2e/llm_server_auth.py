"""The repository's scripted LLM server (tests/llm_server.py), also logging each request's
Authorization header, so the end-to-end test can see which API key reached the LLM.

    python llm_server_auth.py TRANSCRIPT.json PORT_FILE AUTH_LOG
"""

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))
from llm_server import ScriptedLLM, load_transcript  # noqa: E402


def main() -> None:
    transcript, port_file, auth_log = sys.argv[1:4]
    server = ScriptedLLM(load_transcript(transcript))
    record = server._record

    def logged(api, request, body):
        with open(auth_log, "a") as f:
            f.write(json.dumps({"api": api, "authorization": request.headers.get("Authorization", "")}) + "\n")
        return record(api, request, body)

    server._record = logged

    async def run():
        await server._start()
        Path(port_file).write_text(str(server.port))
        await asyncio.Event().wait()

    asyncio.run(run())


if __name__ == "__main__":
    main()
