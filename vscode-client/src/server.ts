/** Starting the GEAK language server: interpreter, install check, environment with the API
 * keys, client options (settings, preview middleware), progress; restart on changes. */

import * as vscode from "vscode";
import { LanguageClient, type LanguageClientOptions, type ServerOptions, State, TransportKind } from "vscode-languageclient/node";
import { serverEnv } from "./env";
import { chooseInterpreter, type Interpreter } from "./interpreter";
import { makeApplyEditHandler, type PreviewContent } from "./preview";
import { probe, probeMessage, type Probe } from "./probe";
import { trackProgress } from "./progress";
import type { ApiKeys } from "./secrets";
import { readClientSettings, toServerSettings } from "./settings";
import type { StatusBar } from "./statusBar";

export const SERVER_COMMANDS_NEEDING_TARGET = ["geak.optimize", "geak.benchmark"];

export function serverOptions(python: string, env: NodeJS.ProcessEnv): ServerOptions {
  return { command: python, args: ["-m", "geak_lsp"], transport: TransportKind.stdio, options: { env } };
}

export class GeakServer implements vscode.Disposable {
  client: LanguageClient | undefined;
  interpreter: Interpreter | undefined;
  lastProbe: Probe | undefined;
  private progress: vscode.Disposable | undefined;
  private starting: Promise<void> | undefined;
  private restarting: Promise<void> = Promise.resolve();
  private stateWatch: vscode.Disposable | undefined;

  constructor(
    private readonly output: vscode.LogOutputChannel,
    private readonly status: StatusBar,
    private readonly keys: ApiKeys,
    private readonly preview: PreviewContent,
  ) {}

  start(): Promise<void> {
    this.starting ??= this.doStart().finally(() => { this.starting = undefined; });
    return this.starting;
  }

  /** Restarts run one after another (a key and a setting changing together restart twice, in order). */
  restart(): Promise<void> {
    this.restarting = this.restarting.catch(() => undefined).then(async () => {
      await this.starting;
      await this.stop();
      await this.start();
    });
    return this.restarting;
  }

  private async doStart(): Promise<void> {
    this.status.setState("starting");
    const cfg = vscode.workspace.getConfiguration("geak");
    const settings = readClientSettings(cfg);
    this.status.setSettings(settings);
    const resource = vscode.window.activeTextEditor?.document.uri;
    this.interpreter = await chooseInterpreter(settings.interpreter, resource);
    const env = serverEnv(process.env, await this.keys.all());
    this.output.info(`GEAK: starting the server with ${this.interpreter.path} (${this.interpreter.source})`);
    const p = await probe(this.interpreter.path, env);
    this.lastProbe = p;
    if (!p.ok) {
      const { message, install } = probeMessage(p);
      this.output.error(message);
      this.status.setState("failed");
      void vscode.commands.executeCommand("setContext", "geak.serverRunning", false);
      void this.explain(message, install);
      return;
    }
    const serverKeys = p.settings ?? undefined;
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "python" }],
      outputChannel: this.output,
      initializationOptions: { geak: toServerSettings(vscode.workspace.getConfiguration("geak"), serverKeys) },
      synchronize: { configurationSection: "geak" },
      middleware: {
        workspace: {
          configuration: async (params, token, next) => {
            const res = await next(params, token);
            if (!Array.isArray(res)) return res;
            return res.map((r, i) => (params.items[i]?.section === "geak" ? toServerSettings(r, serverKeys) : r));
          },
          handleApplyEdit: makeApplyEditHandler(this.preview),
        },
        executeCommand: async (command, args, next) => {
          if (SERVER_COMMANDS_NEEDING_TARGET.includes(command) && args.length === 0) {
            const target = await this.targetAtCursor(command);
            if (!target) {
              void vscode.window.showWarningMessage(
                "GEAK: put the cursor on a Triton kernel, its wrapper, a PyTorch function or an nn.Module first.");
              return undefined;
            }
            args = target;
          }
          return next(command, args);
        },
      },
    };
    const client = new LanguageClient("geak", "GEAK", serverOptions(this.interpreter.path, env), clientOptions);
    this.client = client;
    try {
      await client.start();
    } catch (e) {
      this.output.error(`GEAK: the server did not start: ${String(e)}`);
      this.status.setState("failed");
      this.client = undefined;
      void vscode.window.showErrorMessage(`GEAK: the language server did not start (${String(e)}). See the GEAK log.`, "Show Log")
        .then((c) => c && this.output.show());
      return;
    }
    this.progress = trackProgress(client, this.status);
    this.stateWatch = client.onDidChangeState((e) => {
      if (this.client !== client) return;
      if (e.newState === State.Running) this.status.setState("running");
      else if (e.newState === State.Stopped || e.newState === State.StartFailed) this.status.setState("failed");
    });
    this.status.setState("running");
    void vscode.commands.executeCommand("setContext", "geak.serverRunning", true);
    this.output.info(`GEAK: server ${p.version} running (${this.interpreter.path})`);
  }

  /** The Optimize/Benchmark arguments for the target under the cursor, from the server's code actions. */
  private async targetAtCursor(command: string): Promise<unknown[] | undefined> {
    const ed = vscode.window.activeTextEditor;
    if (!ed || ed.document.languageId !== "python" || !this.client) return undefined;
    const pos = ed.selection.active;
    const actions = await this.client.sendRequest("textDocument/codeAction", {
      textDocument: { uri: ed.document.uri.toString() },
      range: { start: { line: pos.line, character: pos.character }, end: { line: pos.line, character: pos.character } },
      context: { diagnostics: [] },
    }) as Array<{ command?: { command: string; arguments?: unknown[] }; disabled?: { reason: string } }> | null;
    const hit = (actions ?? []).find((a) => a.command?.command === command);
    if (hit?.disabled) {
      void vscode.window.showWarningMessage(`GEAK: ${hit.disabled.reason}`);
      return undefined;
    }
    return hit?.command?.arguments;
  }

  private async explain(message: string, install?: string): Promise<void> {
    const buttons = [...(install ? ["Copy install command"] : []), "Set geak.interpreter", "Show Log"];
    const choice = await vscode.window.showErrorMessage(message, ...buttons);
    if (choice === "Copy install command" && install) await vscode.env.clipboard.writeText(install);
    else if (choice === "Set geak.interpreter") await vscode.commands.executeCommand("workbench.action.openSettings", "geak.interpreter");
    else if (choice === "Show Log") this.output.show();
  }

  async stop(): Promise<void> {
    this.progress?.dispose();
    this.progress = undefined;
    this.stateWatch?.dispose();
    this.stateWatch = undefined;
    const c = this.client;
    this.client = undefined;
    if (c) {
      try {
        await c.stop(5000);
      } catch (e) {
        this.output.warn(`GEAK: stopping the server: ${String(e)}`);
      }
    }
    this.status.setState("stopped");
  }

  dispose(): void {
    void this.stop();
  }
}
