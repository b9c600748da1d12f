"""LLM providers behind one small protocol: ``complete(system, user) -> Completion``.

* ``openai``: the official ``openai`` SDK, Chat Completions, streamed. Works with any
  OpenAI-compatible server (vLLM, Ollama, LM Studio) through ``base_url`` / ``OPENAI_BASE_URL``
  (which must end in ``/v1``).
* ``anthropic``: the official ``anthropic`` SDK, Messages API, streamed.
  ``ANTHROPIC_BASE_URL`` must NOT end in ``/v1`` (the SDK appends ``/v1/messages``).

Keys come only from the environment (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``). A local
OpenAI-compatible server usually needs no key: when a base URL is set and no key is, the
client sends a placeholder. Every SDK error becomes a ``ProviderError`` whose ``kind`` says
what happened in the user's terms; ``fatal`` errors (bad key, unknown model, a refused
request) stop the run, the others (rate limit, server error, timeout, connection) cost one
attempt.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Protocol

from agent.llm.usage import Usage

PROVIDERS = ("openai", "anthropic")
LOCAL_PLACEHOLDER_KEY = "no-key-needed"


@dataclass
class ProviderConfig:
    provider: str
    model: str
    temperature: Optional[float] = None
    max_tokens: int = 8192
    timeout_s: float = 300.0
    base_url: Optional[str] = None
    max_retries: int = 2
    stream: bool = True


@dataclass
class Completion:
    text: str
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: Optional[str] = None
    model: str = ""


class ProviderError(Exception):
    """A failed model call. kind: auth | not_found | bad_request | rate_limit | server | timeout |
    connection | setup | empty_stream."""

    FATAL = ("auth", "not_found", "bad_request", "setup")

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind, self.message = kind, message

    @property
    def fatal(self) -> bool:
        return self.kind in self.FATAL


class Provider(Protocol):
    config: ProviderConfig

    def complete(self, system: str, user: str) -> Completion: ...


def _status_kind(status: Optional[int]) -> str:
    if status in (401, 403):
        return "auth"
    if status == 404:
        return "not_found"
    if status == 429:
        return "rate_limit"
    if status in (400, 413, 422):
        return "bad_request"
    return "server"


def _error(sdk, e: Exception, name: str) -> ProviderError:
    """Map an SDK exception (openai and anthropic share the names) to a ProviderError."""
    if isinstance(e, sdk.APITimeoutError):
        return ProviderError("timeout", f"{name}: no answer within the timeout ({e})")
    if isinstance(e, sdk.APIConnectionError):
        return ProviderError("connection", f"{name}: cannot reach the server ({e})")
    if isinstance(e, sdk.APIStatusError):
        kind = _status_kind(e.status_code)
        hint = {"auth": " (check the API key in the environment)",
                "not_found": " (check --model and the base URL)",
                "rate_limit": " (rate limited)"}.get(kind, "")
        return ProviderError(kind, f"{name}: HTTP {e.status_code}: {_message(e)}{hint}")
    return ProviderError("server", f"{name}: {type(e).__name__}: {e}")


def _message(e) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(getattr(e, "message", e))


class OpenAIProvider:
    def __init__(self, config: ProviderConfig):
        import openai
        self.sdk, self.config = openai, config
        base_url = config.base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = os.environ.get("OPENAI_API_KEY")
        if not key:
            if not base_url:
                raise ProviderError("setup", "OPENAI_API_KEY is not set: export it, or point "
                                             "--base-url / OPENAI_BASE_URL at an OpenAI-compatible server")
            key = LOCAL_PLACEHOLDER_KEY
        self.client = openai.OpenAI(api_key=key, base_url=base_url, timeout=config.timeout_s,
                                    max_retries=config.max_retries)
        self._token_param = "max_tokens"

    def complete(self, system: str, user: str) -> Completion:
        c = self.config
        kwargs = dict(model=c.model, messages=[{"role": "system", "content": system},
                                               {"role": "user", "content": user}])
        kwargs[self._token_param] = c.max_tokens
        if c.temperature is not None:
            kwargs["temperature"] = c.temperature
        try:
            return self._call(kwargs)
        except self.sdk.BadRequestError as e:
            # Newer OpenAI models take max_completion_tokens only; older servers max_tokens only.
            if "max_completion_tokens" in _message(e) and self._token_param == "max_tokens":
                self._token_param = "max_completion_tokens"
                kwargs["max_completion_tokens"] = kwargs.pop("max_tokens")
                try:
                    return self._call(kwargs)
                except self.sdk.OpenAIError as e2:
                    raise _error(self.sdk, e2, "openai") from None
            raise _error(self.sdk, e, "openai") from None
        except self.sdk.OpenAIError as e:
            raise _error(self.sdk, e, "openai") from None

    def _call(self, kwargs: dict) -> Completion:
        if not self.config.stream:
            r = self.client.chat.completions.create(**kwargs)
            choice = r.choices[0] if r.choices else None
            u = r.usage
            return Completion(text=(choice.message.content or "") if choice else "",
                              input_tokens=u.prompt_tokens if u else 0,
                              output_tokens=u.completion_tokens if u else 0,
                              finish_reason=choice.finish_reason if choice else None, model=r.model or "")
        parts: list[str] = []
        done = Completion(text="")
        stream = self.client.chat.completions.create(**kwargs, stream=True,
                                                     stream_options={"include_usage": True})
        with stream:
            for chunk in stream:
                done.model = chunk.model or done.model
                if chunk.usage:
                    done.input_tokens = chunk.usage.prompt_tokens or 0
                    done.output_tokens = chunk.usage.completion_tokens or 0
                for ch in chunk.choices or []:
                    if ch.delta and ch.delta.content:
                        parts.append(ch.delta.content)
                    if ch.finish_reason:
                        done.finish_reason = ch.finish_reason
        done.text = "".join(parts)
        if not done.output_tokens and done.text:  # a server that sends no usage: estimate
            done.output_tokens = max(1, len(done.text) // 4)
            done.input_tokens = done.input_tokens or max(1, sum(len(m["content"]) for m in kwargs["messages"]) // 4)
        return done


class AnthropicProvider:
    def __init__(self, config: ProviderConfig):
        import anthropic
        self.sdk, self.config = anthropic, config
        base_url = config.base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        if base_url and base_url.rstrip("/").endswith("/v1"):
            raise ProviderError("setup", f"the Anthropic base URL must not end in /v1 (the SDK adds "
                                         f"/v1/messages): use {base_url.rstrip('/')[:-3]}")
        key = os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            if not base_url:
                raise ProviderError("setup", "ANTHROPIC_API_KEY is not set: export it")
            key = LOCAL_PLACEHOLDER_KEY
        self.client = anthropic.Anthropic(api_key=key, base_url=base_url, timeout=config.timeout_s,
                                          max_retries=config.max_retries)

    def complete(self, system: str, user: str) -> Completion:
        c = self.config
        kwargs = dict(model=c.model, max_tokens=c.max_tokens, system=system,
                      messages=[{"role": "user", "content": user}])
        if c.temperature is not None:
            # The Messages API's SDK has no temperature parameter any more; send it as given,
            # and a server that refuses it answers with a clear 400.
            kwargs["extra_body"] = {"temperature": c.temperature}
        try:
            if not c.stream:
                msg = self.client.messages.create(**kwargs)
            else:
                with self.client.messages.stream(**kwargs) as stream:
                    for _ in stream.text_stream:
                        pass
                    msg = stream.get_final_message()
        except self.sdk.AnthropicError as e:
            raise _error(self.sdk, e, "anthropic") from None
        text = "".join(getattr(b, "text", "") for b in msg.content if getattr(b, "type", "") == "text")
        return Completion(text=text, input_tokens=msg.usage.input_tokens or 0,
                          output_tokens=msg.usage.output_tokens or 0, finish_reason=msg.stop_reason,
                          model=msg.model or "")


def make_provider(config: ProviderConfig) -> Provider:
    if config.provider == "openai":
        return OpenAIProvider(config)
    if config.provider == "anthropic":
        return AnthropicProvider(config)
    raise ProviderError("setup", f"unknown provider '{config.provider}': use one of {', '.join(PROVIDERS)}")


def call(provider: Provider, usage: Usage, system: str, user: str) -> Completion:
    """One model call, counted against the run's usage (the budget is checked before it starts)."""
    usage.check()
    try:
        done = provider.complete(system, user)
    except ProviderError:
        usage.failed()
        raise
    usage.add(done.input_tokens, done.output_tokens)
    return done
