"""A scripted LLM server: OpenAI- and Anthropic-compatible HTTP on loopback, replaying a transcript.

The real SDKs talk to it (``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1``,
``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``), streaming or not. Each request takes the first
unused reply of the transcript whose ``match`` (if any) occurs in the request's last user
message. A reply is one of:

  {"text": "..."}                          the model's answer
  {"prose": "...", "code_file": "x.py"}    prose, then the file in a ```python fence
                                           (path relative to the transcript file)
  {"status": 429, "error": "slow down"}    an HTTP error in the API's own error format
  {"delay_s": 3, ...}                      wait before answering (for client timeouts)
  {"usage": {"input": 10, "output": 20}}   token counts to report (default: len/4)
  {"cut": true, ...}                       the answer stopped at the token limit
                                           (finish_reason "length" / stop_reason "max_tokens")

Every request received is kept (``server.requests``: api, headers, body, prompt), so tests can
check what the loop sent. When the transcript is spent the server answers 500.

  python tests/llm_server.py TRANSCRIPT.json [--port 0] [--port-file F] [--log F]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Optional

from aiohttp import web


def load_transcript(path: str | Path) -> list[dict]:
    path = Path(path)
    doc = json.loads(path.read_text())
    replies = doc["replies"] if isinstance(doc, dict) else doc
    out = []
    for r in replies:
        r = dict(r)
        if "code_file" in r:
            code = (path.parent / r.pop("code_file")).read_text()
            r["text"] = r.pop("prose", "Here is the kernel.") + "\n\n```python\n" + code + "```\n"
        out.append(r)
    return out


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _prompt_of(api: str, body: dict) -> str:
    msgs = body.get("messages") or []
    for m in reversed(msgs):
        if m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, list):
                return "".join(b.get("text", "") for b in c if isinstance(b, dict))
            return str(c)
    return ""


class ScriptedLLM:
    def __init__(self, replies: list[dict], host: str = "127.0.0.1", port: int = 0):
        self.replies = [dict(r) for r in replies]
        self.used = [False] * len(self.replies)
        self.requests: list[dict[str, Any]] = []
        self.host, self.port = host, port
        self._lock = threading.Lock()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._runner: Optional[web.AppRunner] = None
        self._thread: Optional[threading.Thread] = None
        self.log_path: Optional[Path] = None

    # ------------------------------------------------------------------ addresses

    @property
    def openai_base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def prompts(self) -> list[str]:
        return [r["prompt"] for r in self.requests]

    # ------------------------------------------------------------------ replies

    def _take(self, prompt: str) -> Optional[dict]:
        with self._lock:
            for i, r in enumerate(self.replies):
                if not self.used[i] and (not r.get("match") or r["match"] in prompt):
                    self.used[i] = True
                    return r
        return None

    def _record(self, api: str, request: web.Request, body: dict) -> str:
        prompt = _prompt_of(api, body)
        entry = {"api": api, "headers": dict(request.headers), "body": body, "prompt": prompt,
                 "time": time.time()}
        with self._lock:
            self.requests.append(entry)
            if self.log_path:
                with self.log_path.open("a") as f:
                    f.write(json.dumps({"api": api, "model": body.get("model"), "prompt": prompt}) + "\n")
        return prompt

    @staticmethod
    def _authorized(request: web.Request, api: str) -> bool:
        auth = request.headers.get("Authorization", "")
        if api == "anthropic" and request.headers.get("x-api-key"):
            return True
        return auth.startswith("Bearer ") and len(auth) > len("Bearer ")

    # ------------------------------------------------------------------ handlers

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "openai")

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "anthropic")

    async def _handle(self, request: web.Request, api: str) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            return self._error(api, 400, "body is not JSON")
        prompt = self._record(api, request, body)
        if not self._authorized(request, api):
            return self._error(api, 401, "missing API key")
        reply = self._take(prompt)
        if reply is None:
            return self._error(api, 500, "scripted server: transcript spent")
        if reply.get("delay_s"):
            await asyncio.sleep(float(reply["delay_s"]))
        if reply.get("status"):
            return self._error(api, int(reply["status"]), reply.get("error", "scripted error"),
                               reply.get("headers"))
        text = reply.get("text", "")
        usage = reply.get("usage") or {}
        n_in = int(usage.get("input", _tokens(json.dumps(body.get("messages", [])))))
        n_out = int(usage.get("output", _tokens(text) if text else 0))
        model = body.get("model", "scripted")
        if body.get("stream"):
            try:
                return await (self._openai_stream if api == "openai" else self._anthropic_stream)(
                    request, text, model, n_in, n_out, body, bool(reply.get("cut")))
            except ConnectionResetError:  # the client gave up (its timeout): nothing to answer
                return web.Response(status=499)
        if api == "openai":
            return web.json_response({
                "id": "chatcmpl-" + uuid.uuid4().hex[:12], "object": "chat.completion",
                "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "length" if reply.get("cut") else "stop"}],
                "usage": {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}})
        return web.json_response({
            "id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "max_tokens" if reply.get("cut") else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": n_in, "output_tokens": n_out}})

    @staticmethod
    def _chunks(text: str, size: int = 64) -> list[str]:
        return [text[i:i + size] for i in range(0, len(text), size)] or []

    async def _openai_stream(self, request, text, model, n_in, n_out, body, cut) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        cid, created = "chatcmpl-" + uuid.uuid4().hex[:12], int(time.time())

        async def send(choices, usage=None):
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": choices}
            if usage is not None:
                doc["usage"] = usage
            await resp.write(b"data: " + json.dumps(doc).encode() + b"\n\n")

        await send([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for piece in self._chunks(text):
            await send([{"index": 0, "delta": {"content": piece}, "finish_reason": None}])
        await send([{"index": 0, "delta": {}, "finish_reason": "length" if cut else "stop"}])
        if (body.get("stream_options") or {}).get("include_usage"):
            await send([], {"prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out})
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _anthropic_stream(self, request, text, model, n_in, n_out, body, cut) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def event(name, doc):
            await resp.write(f"event: {name}\ndata: {json.dumps(doc)}\n\n".encode())

        await event("message_start", {"type": "message_start", "message": {
            "id": "msg_" + uuid.uuid4().hex[:12], "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": n_in, "output_tokens": 1}}})
        await event("content_block_start", {"type": "content_block_start", "index": 0,
                                            "content_block": {"type": "text", "text": ""}})
        for piece in self._chunks(text):
            await event("content_block_delta", {"type": "content_block_delta", "index": 0,
                                                "delta": {"type": "text_delta", "text": piece}})
        await event("content_block_stop", {"type": "content_block_stop", "index": 0})
        await event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": "max_tokens" if cut else "end_turn",
                                                "stop_sequence": None},
                                      "usage": {"output_tokens": n_out}})
        await event("message_stop", {"type": "message_stop"})
        await resp.write_eof()
        return resp

    @staticmethod
    def _error(api: str, status: int, message: str, headers: Optional[dict] = None) -> web.Response:
        if api == "openai":
            kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(status, "server_error")
            doc = {"error": {"message": message, "type": kind, "code": None, "param": None}}
        else:
            kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error",
                    529: "overloaded_error"}.get(status, "api_error")
            doc = {"type": "error", "error": {"type": kind, "message": message}}
        return web.json_response(doc, status=status, headers=headers or {})

    # ------------------------------------------------------------------ lifecycle

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        return app

    async def _start(self) -> None:
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    def start(self) -> "ScriptedLLM":
        """Serve from a background thread (for tests in this process)."""
        ready = threading.Event()

        def serve():
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=serve, daemon=True, name="scripted-llm")
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("scripted LLM server did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop)
        try:
            fut.result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description="Replay an LLM transcript over OpenAI/Anthropic HTTP.")
    ap.add_argument("transcript")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--port-file", help="write the bound port here once listening")
    ap.add_argument("--log", help="append one JSON line per request received")
    args = ap.parse_args()
    server = ScriptedLLM(load_transcript(args.transcript), args.host, args.port)
    if args.log:
        server.log_path = Path(args.log)

    async def run():
        await server._start()
        print(f"scripted LLM server on {server.host}:{server.port}", flush=True)
        if args.port_file:
            Path(args.port_file).write_text(str(server.port))
        await asyncio.Event().wait()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
