/** API keys in VS Code's SecretStorage, never in settings; handed to the server's environment. */

import * as vscode from "vscode";
import { KEY_ENV } from "./env";

export const PROVIDER_LABELS: Record<string, string> = {
  openai: "OpenAI (or an OpenAI-compatible server)",
  anthropic: "Anthropic",
};

export function secretName(provider: string): string {
  return `geak.apiKey.${provider}`;
}

export class ApiKeys {
  constructor(private readonly secrets: vscode.SecretStorage) {}

  /** provider -> key, for the providers that have one stored. */
  async all(): Promise<Record<string, string | undefined>> {
    const out: Record<string, string | undefined> = {};
    for (const provider of Object.keys(KEY_ENV)) out[provider] = await this.secrets.get(secretName(provider));
    return out;
  }

  async set(provider: string, key: string): Promise<void> {
    if (!(provider in KEY_ENV)) throw new Error(`unknown provider ${provider}`);
    if (key) await this.secrets.store(secretName(provider), key);
    else await this.secrets.delete(secretName(provider));
  }

  onDidChange(listener: () => void): vscode.Disposable {
    return this.secrets.onDidChange((e) => {
      if (e.key.startsWith("geak.apiKey.")) listener();
    });
  }
}

/** geak.setApiKey: ask for the provider and the key (masked); an empty key removes it. */
export async function setApiKeyCommand(keys: ApiKeys): Promise<boolean> {
  const pick = await vscode.window.showQuickPick(
    Object.entries(PROVIDER_LABELS).map(([id, label]) => ({ label, description: KEY_ENV[id], id })),
    { title: "GEAK: API key for which provider?", ignoreFocusOut: true },
  );
  if (!pick) return false;
  const key = await vscode.window.showInputBox({
    title: `GEAK: ${pick.label} API key`,
    prompt: `Kept in VS Code's secret storage and given to the GEAK server as ${KEY_ENV[pick.id]}. Leave empty to remove it.`,
    password: true,
    ignoreFocusOut: true,
  });
  if (key === undefined) return false;
  await keys.set(pick.id, key.trim());
  void vscode.window.showInformationMessage(
    key.trim() ? `GEAK: ${pick.label} key saved; the server restarts with it.` : `GEAK: ${pick.label} key removed.`,
  );
  return true;
}
