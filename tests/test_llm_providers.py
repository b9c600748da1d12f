"""The providers through the official SDKs against the scripted server on loopback."""

from __future__ import annotations

import pytest

from llm_server import ScriptedLLM
from agent.llm.providers import ProviderConfig, ProviderError, make_provider
from agent.llm.usage import Usage
from agent.llm.providers import call


@pytest.fixture
def env(monkeypatch):
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def provider(kind: str, server: ScriptedLLM, **kw):
    base = server.openai_base_url if kind == "openai" else server.anthropic_base_url
    return make_provider(ProviderConfig(kind, "scripted-model", base_url=base, max_retries=0, timeout_s=5, **kw))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [True, False])
def test_text_and_tokens_come_back_streamed_or_not(env, kind, stream):
    text = "Reasoning first.\n```python\n" + "x = 1\n" * 50 + "```\n"  # several stream chunks
    with ScriptedLLM([{"text": text, "usage": {"input": 123, "output": 45}}]) as s:
        p = provider(kind, s, stream=stream, temperature=0.2, max_tokens=777)
        usage = Usage()
        done = call(p, usage, "be brief", "write it")
    assert done.text == text and (done.input_tokens, done.output_tokens) == (123, 45)
    assert usage.as_dict()["total_tokens"] == 168 and usage.calls == 1
    body = s.requests[0]["body"]
    assert body["model"] == "scripted-model" and body["temperature"] == 0.2 and body.get("stream", False) is stream
    if kind == "openai":
        assert body["messages"][0] == {"role": "system", "content": "be brief"} and body["max_tokens"] == 777
    else:
        assert body["system"] == "be brief" and body["max_tokens"] == 777


def test_keys_come_from_the_environment(env):
    env.setenv("OPENAI_API_KEY", "sk-test-123")
    env.setenv("ANTHROPIC_API_KEY", "sk-ant-456")
    with ScriptedLLM([{"text": "a"}, {"text": "b"}]) as s:
        env.setenv("OPENAI_BASE_URL", s.openai_base_url)
        env.setenv("ANTHROPIC_BASE_URL", s.anthropic_base_url)
        for kind in ("openai", "anthropic"):
            make_provider(ProviderConfig(kind, "m", max_retries=0)).complete("s", "u")
    oa, an = (r["headers"] for r in s.requests)
    assert oa["Authorization"] == "Bearer sk-test-123"
    assert an.get("x-api-key") == "sk-ant-456" or an.get("Authorization") == "Bearer sk-ant-456"


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("reply,err_kind,fatal", [
    ({"status": 429, "error": "slow down"}, "rate_limit", False),
    ({"status": 500, "error": "boom"}, "server", False),
    ({"status": 529, "error": "overloaded"}, "server", False),
    ({"status": 401, "error": "bad key"}, "auth", True),
    ({"status": 404, "error": "no such model"}, "not_found", True),
    ({"delay_s": 2, "text": "late"}, "timeout", False),
])
def test_errors_are_named_and_counted(env, kind, reply, err_kind, fatal):
    with ScriptedLLM([reply]) as s:
        p = make_provider(ProviderConfig(kind, "m", base_url=s.openai_base_url if kind == "openai"
                                         else s.anthropic_base_url, max_retries=0, timeout_s=0.5))
        usage = Usage()
        with pytest.raises(ProviderError) as e:
            call(p, usage, "s", "u")
    assert e.value.kind == err_kind and e.value.fatal is fatal
    assert usage.failed_calls == 1 and usage.calls == 0


def test_a_dead_server_is_a_connection_error(env):
    s = ScriptedLLM([]).start()
    url = s.openai_base_url
    s.stop()
    p = make_provider(ProviderConfig("openai", "m", base_url=url, max_retries=0, timeout_s=2))
    with pytest.raises(ProviderError) as e:
        p.complete("s", "u")
    assert e.value.kind == "connection" and not e.value.fatal


def test_openai_switches_to_max_completion_tokens_when_the_model_asks(env):
    msg = "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    with ScriptedLLM([{"status": 400, "error": msg}, {"text": "ok"}, {"text": "ok again"}]) as s:
        p = provider("openai", s)
        assert p.complete("s", "u").text == "ok"
        assert p.complete("s", "u").text == "ok again"
    first, second, third = (r["body"] for r in s.requests)
    assert "max_tokens" in first and "max_completion_tokens" in second and "max_tokens" not in second
    assert "max_completion_tokens" in third


def test_setup_errors_say_what_to_do(env):
    with pytest.raises(ProviderError, match="OPENAI_API_KEY is not set") as e:
        make_provider(ProviderConfig("openai", "m"))
    assert e.value.fatal
    with pytest.raises(ProviderError, match="must not end in /v1"):
        make_provider(ProviderConfig("anthropic", "m", base_url="http://127.0.0.1:9/v1"))
    with pytest.raises(ProviderError, match="unknown provider"):
        make_provider(ProviderConfig("gemini", "m"))
