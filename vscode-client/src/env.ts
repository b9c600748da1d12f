/** The server process's environment: the editor's own, plus the API keys kept in SecretStorage.
 * Pure (no vscode import) so the end-to-end test starts the server with the same function. */

export const KEY_ENV: Record<string, string> = {
  openai: "OPENAI_API_KEY",
  anthropic: "ANTHROPIC_API_KEY",
};

export function serverEnv(
  base: NodeJS.ProcessEnv,
  keys: Record<string, string | undefined>,
): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base };
  for (const [provider, value] of Object.entries(keys)) {
    const name = KEY_ENV[provider];
    if (name && value) env[name] = value;
  }
  // The server's stdout is the protocol; Python must not buffer it.
  env.PYTHONUNBUFFERED = "1";
  return env;
}
