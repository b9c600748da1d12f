/** Wiring only: the log, the status bar, the keys, the server, the preview, the results view,
 * the compiled view, the commands and what restarts the server. */

import * as vscode from "vscode";
import { COMPILED_SCHEME, CompiledViews } from "./compiled";
import { onInterpreterChange } from "./interpreter";
import { JobEnds } from "./jobEnd";
import { PREVIEW_SCHEME, PreviewChoices, PreviewContent } from "./preview";
import { ResultsView, type Target } from "./results";
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
  const choices = new PreviewChoices();
  let s: GeakServer | undefined;
  const results = new ResultsView((target) => s!.results(target));
  const showResults = async (arg?: unknown) => {
    const a = (Array.isArray(arg) ? arg[0] : arg) as Partial<Target> | undefined;
    const target = a && typeof a.uri === "string" && typeof a.name === "string" ? { uri: a.uri, name: a.name } : await s!.cursorTarget();
    if (!target) {
      void vscode.window.showWarningMessage("GEAK: put the cursor on a kernel, its wrapper, a PyTorch function or an nn.Module first.");
      return;
    }
    await results.show(target);
  };
  const jobEnds = new JobEnds((t) => showResults(t), () => output.show(), (t) => results.refresh(t));
  server = new GeakServer(output, status, keys, preview, choices, jobEnds);
  s = server;
  const srv = server;
  const compiled = new CompiledViews((target) => srv.compiled(target), () => srv.cursorTarget());
  context.subscriptions.push(
    output, status, srv, choices, jobEnds, results, compiled,
    vscode.workspace.registerTextDocumentContentProvider(PREVIEW_SCHEME, preview),
    vscode.workspace.registerTextDocumentContentProvider(COMPILED_SCHEME, compiled),
    vscode.commands.registerCommand("geak.showCompiled", (arg?: unknown) => compiled.show(arg)),
    vscode.commands.registerCommand("geak.compiledStage", (uri?: unknown) => compiled.switchStage(uri as vscode.Uri | undefined)),
    vscode.commands.registerCommand("geak.compiledArch", (uri?: unknown) => compiled.switchArch(uri as vscode.Uri | undefined)),
    vscode.commands.registerCommand("geak.showLog", () => output.show()),
    vscode.commands.registerCommand("geak.setApiKey", () => setApiKeyCommand(keys)),
    vscode.commands.registerCommand("geak.restartServer", () => srv.restart()),
    vscode.commands.registerCommand("geak.showResults", showResults),
    vscode.commands.registerCommand("geak.previewApply", (uri?: unknown) => choices.decide("apply", uri)),
    vscode.commands.registerCommand("geak.previewDiscard", (uri?: unknown) => choices.decide("discard", uri)),
    keys.onDidChange(() => void srv.restart()),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (!e.affectsConfiguration("geak")) return;
      status.setSettings(readClientSettings(vscode.workspace.getConfiguration("geak")));
      if (e.affectsConfiguration("geak.interpreter")) void srv.restart();
    }),
  );
  const onPython = await onInterpreterChange(() => {
    if (!readClientSettings(vscode.workspace.getConfiguration("geak")).interpreter) void srv.restart();
  });
  if (onPython) context.subscriptions.push(onPython);
  await srv.start();
  return srv;
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}
