import { beforeEach, describe, expect, it } from "vitest";
import * as vscode from "vscode";
import { serverEnv } from "../src/env";
import { ApiKeys, secretName, setApiKeyCommand } from "../src/secrets";

const mock = vscode as unknown as typeof import("./vscode.mock");

describe("API keys", () => {
  beforeEach(() => mock.resetMock());

  it("geak.setApiKey asks for provider and key and keeps the key in SecretStorage, not in settings", async () => {
    const secrets = new mock.MemorySecrets();
    const keys = new ApiKeys(secrets as unknown as vscode.SecretStorage);
    mock.window.showQuickPick.mockImplementation(async (items: unknown) => (items as Array<{ id: string }>).find((i) => i.id === "anthropic"));
    mock.window.showInputBox.mockResolvedValue("sk-ant-123");
    expect(await setApiKeyCommand(keys)).toBe(true);
    expect(mock.window.showInputBox.mock.calls[0][0]).toMatchObject({ password: true });
    expect(secrets.values.get(secretName("anthropic"))).toBe("sk-ant-123");
    expect(mock.configurationUpdates).toEqual([]);
    expect(JSON.stringify(mock.config)).not.toContain("sk-ant-123");
    expect(await keys.all()).toEqual({ openai: undefined, anthropic: "sk-ant-123" });
  });

  it("an empty key removes it; a cancelled prompt changes nothing", async () => {
    const secrets = new mock.MemorySecrets();
    secrets.values.set(secretName("openai"), "sk-old");
    const keys = new ApiKeys(secrets as unknown as vscode.SecretStorage);
    mock.window.showQuickPick.mockImplementation(async (items: unknown) => (items as Array<{ id: string }>)[0]);
    mock.window.showInputBox.mockResolvedValueOnce(undefined);
    expect(await setApiKeyCommand(keys)).toBe(false);
    expect(secrets.values.get(secretName("openai"))).toBe("sk-old");
    mock.window.showInputBox.mockResolvedValueOnce("");
    expect(await setApiKeyCommand(keys)).toBe(true);
    expect(secrets.values.has(secretName("openai"))).toBe(false);
  });

  it("reach the server as OPENAI_API_KEY / ANTHROPIC_API_KEY; the editor's environment stays", () => {
    const env = serverEnv({ PATH: "/bin", OPENAI_API_KEY: "from-shell" }, { openai: "sk-1", anthropic: "sk-2" });
    expect(env).toMatchObject({ PATH: "/bin", OPENAI_API_KEY: "sk-1", ANTHROPIC_API_KEY: "sk-2" });
    const kept = serverEnv({ OPENAI_API_KEY: "from-shell" }, { openai: undefined });
    expect(kept.OPENAI_API_KEY).toBe("from-shell");
    expect(kept.ANTHROPIC_API_KEY).toBeUndefined();
  });

  it("changes are reported for GEAK's keys only", async () => {
    const secrets = new mock.MemorySecrets();
    const keys = new ApiKeys(secrets as unknown as vscode.SecretStorage);
    let n = 0;
    keys.onDidChange(() => { n++; });
    await secrets.store("other.extension", "x");
    await keys.set("openai", "sk");
    expect(n).toBe(1);
  });
});
