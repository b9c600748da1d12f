/** Wiring only: the log, the status bar, the keys, the server, the commands and what restarts it. */

import * as vscode from "vscode";
import { onInterpreterChange } from "./interpreter";
import { PREVIEW_SCHEME, PreviewContent } from "./preview";
import { ApiKeys, setApiKeyCommand } from "./secrets";
import { GeakServer } from "./server";
import { readClientSettings } from "./settings";
import { StatusBar } from "./statusBar";

let server: GeakServer | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<GeakServer> {
  const output = vscode.window.createOutputChannel("GEAK", { log: true });
  const status = new StatusBar(readClientSettings(vscode.workspace.getConfiguration("geak")));
  const keys = new ApiKeys(context.secrets);
  const preview = new PreviewContent();
  server = new GeakServer(output, status, keys, preview);
  const s = server;
  context.subscriptions.push(
    output, status, s,
    vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME, preview),
    vscode.commands.registerCommand("geak.showLog", () => output.show()),
    vscode.commands.registerCommand("geak.setApiKey", () => setApiKeyCommand(keys)),
    vscode.commands.registerCommand("geak.restartServer", () => s.restart()),
    keys.onDidChange(() => void s.restart()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration("geak")) return;
      status.setSettings(readClientSettings(vscode.workspace.getConfiguration("geak")));
      if (e.affectsConfiguration("geak.interpreter")) void s.restart();
    }),
  );
  const onPython = await onInterpreterChange(() => {
    if (!readClientSettings(vscode.workspace.getConfiguration("geak")).interpreter) void s.restart();
  });
  if (onPython) context.subscriptions.push(onPython);
  await s.start();
  return s;
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}
