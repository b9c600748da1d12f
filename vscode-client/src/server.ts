/** Starting the GEAK language server: interpreter, install check, environment with the API
 * keys, client options (settings, preview middleware, the results view's features), progress;
 * restart on changes; one clear message when it does not start or stops. */

import * as readline from "node:readline";
import * as vscode from "vscode";
import {
  CloseAction, ErrorAction, LanguageClient, type LanguageClientOptions, RevealOutputChannelOn, type ServerOptions,
  State, type StaticFeature, TransportKind,
} from "vscode-languageclient/node";
import type { CompiledDoc, CompiledTarget } from "./compiled";
import { serverEnv } from "./env";
import { serverFailure, StderrTail } from "./errors";
import { chooseInterpreter, type Interpreter } from "./interpreter";
import { JOB_END, type JobEnd, type JobEnds } from "./jobEnd";
import { makeApplyEditHandler, type PreviewChoices, type PreviewContent } from "./preview";
import { findCheckout } from "./install";
import { probe, probeMessage, type Probe } from "./probe";
import { trackProgress } from "./progress";
import type { Target } from "./results";
import type { Results } from "./resultsHtml";
import type { ApiKeys } from "./secrets";
import { readClientSettings, toServerSettings } from "./settings";
import { JOB_STATUS, type JobStatus, type StatusBar } from "./statusBar";

export const SERVER_COMMANDS_NEEDING_TARGET = ["geak.optimize", "geak.benchmark"];
/** Crashes of a running server within this window that are restarted silently. */
export const RESTARTS = { max: 3, windowMs: 3 * 60 * 1000 };

/** `python -m geak_lsp`; the client library appends `--stdio` (TransportKind.stdio). */
export function serverOptions(python: string, env: NodeJS.ProcessEnv): ServerOptions {
  return { command: python, args: ["-m", "geak_lsp"], transport: TransportKind.stdio, options: { env } };
}

/** What this extension adds to the client capabilities (the server reads them from
 * `experimental`): it has a results view (geak.showResults), says the end of each job itself,
 * reads each job's status as numbers (geak/jobStatus), and has the compiled view
 * (geak.showCompiled: the server then puts a code lens on each kernel). */
export const EXPERIMENTAL = { geakShowResults: true, geakJobEnd: true, geakJobStatus: true, geakShowCompiled: true };

function experimentalFeature(): StaticFeature {
  return {
    fillClientCapabilities: (caps) => { caps.experimental = { ...(caps.experimental as object ?? {}), ...EXPERIMENTAL }; },
    initialize: () => undefined,
    getState: () => ({ kind: "static" }),
    clear: () => undefined,
  };
}

/** The client library's own error notifications ("couldn't create connection", "server crashed
 * 5 times", "Request ... failed") go to the log only: this extension says what went wrong, once. */
class GeakClient extends LanguageClient {
  override error(message: string, data?: unknown, _showNotification?: boolean | "force"): void {
    super.error(message, data, false);
  }
}

export class GeakServer implements vscode.Disposable {
  client: LanguageClient | undefined;
  interpreter: Interpreter | undefined;
  lastProbe: Probe | undefined;
  private progress: vscode.Disposable | undefined;
  private starting: Promise<void> | undefined;
  private restarting: Promise<void> = Promise.resolve();
  private stateWatch: vscode.Disposable | undefined;
  private jobEndWatch: vscode.Disposable | undefined;
  private jobStatusWatch: vscode.Disposable | undefined;
  private running = false;
  private crashes: number[] = [];
  readonly stderr = new StderrTail();

  constructor(
    private readonly output: vscode.LogOutputChannel,
    private readonly status: StatusBar,
    private readonly keys: ApiKeys,
    private readonly preview: PreviewContent,
    private readonly choices: PreviewChoices,
    private readonly jobEnds: JobEnds,
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
      const { message, install } = probeMessage(p, this.checkout());
      this.output.error(message);
      this.status.setState("failed");
      void vscode.commands.executeCommand("setContext", "geak.serverRunning", false);
      void this.explain(message, install);
      return;
    }
    const serverKeys = p.settings ?? undefined;
    this.stderr.clear();
    let client: LanguageClient | undefined = undefined;
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file", language: "python" }],
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      // The server's stderr goes to the log, and its last lines into the message if it fails.
      stdioOptions: {
        stdout: (input, out) => { readline.createInterface({ input, crlfDelay: Infinity }).on("line", (l) => out.info(l)); },
        stderr: (input, out) => {
          readline.createInterface({ input, crlfDelay: Infinity }).on("line", (l) => { this.stderr.push(l); out.error(l); });
        },
      },
      errorHandler: {
        error: (_e, _m, count) => ({ action: count && count <= 3 ? ErrorAction.Continue : ErrorAction.Shutdown, handled: true }),
        closed: () => {
          if (client) this.closed(client);
          return { action: CloseAction.DoNotRestart, handled: true };
        },
      },
      initializationFailedHandler: () => false,
      markdown: { isTrusted: { enabledCommands: ["geak.showResults", "geak.showCompiled"] } },
      initializationOptions: { geak: toServerSettings(vscode.workspace.getConfiguration("geak"), serverKeys) },
      synchronize: { configurationSection: "geak" },
      middleware: {
        workspace: {
          configuration: async (params, token, next) => {
            const res = await next(params, token);
            if (!Array.isArray(res)) return res;
            return res.map((r, i) => (params.items[i]?.section === "geak" ? toServerSettings(r, serverKeys) : r));
          },
          handleApplyEdit: makeApplyEditHandler(this.preview, this.choices),
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
    client = new GeakClient("geak", "GEAK", serverOptions(this.interpreter.path, env), clientOptions);
    client.registerFeature(experimentalFeature());
    this.client = client;
    this.running = false;
    this.jobEndWatch = client.onNotification(JOB_END, (e: JobEnd) => this.jobEnds.jobEnded(e));
    this.jobStatusWatch = client.onNotification(JOB_STATUS, (e: JobStatus) => this.status.status(e));
    try {
      await client.start();
    } catch (e) {
      this.output.error(`GEAK: the server did not start: ${String(e)}`);
      this.status.setState("failed");
      this.client = undefined;
      void vscode.commands.executeCommand("setContext", "geak.serverRunning", false);
      await new Promise((r) => setTimeout(r, 200)); // the last of its stderr
      const f = serverFailure(this.interpreter.path, this.stderr.reason(), "start", this.checkout(p.root));
      this.output.error(f.message);
      void this.explainFailure(f.message, f.fix);
      return;
    }
    this.running = true;
    const offered = client.initializeResult?.capabilities.experimental as { geakJobEnd?: boolean } | undefined;
    this.jobEnds.serverSaysEnds = offered?.geakJobEnd === true;
    this.progress = trackProgress(client, (_token, title, message) => this.jobEnds.progressEnded(title, message));
    this.stateWatch = client.onDidChangeState((e) => {
      if (this.client !== client) return;
      if (e.newState === State.Running) this.status.setState("running");
      else if (e.newState === State.Stopped || e.newState === State.StartFailed) this.status.setState("failed");
    });
    this.status.setState("running");
    void vscode.commands.executeCommand("setContext", "geak.serverRunning", true);
    this.output.info(`GEAK: server ${p.version} running (${this.interpreter.path})`);
  }

  /** The connection closed without our asking (the server exited): restart a server that was
   * running, up to RESTARTS.max times in RESTARTS.windowMs; otherwise one message. */
  private closed(client: LanguageClient): void {
    if (this.client !== client || !this.running) return; // a stop we asked for, or a start failure (doStart says it)
    this.running = false;
    this.status.setState("failed");
    void vscode.commands.executeCommand("setContext", "geak.serverRunning", false);
    const now = Date.now();
    this.crashes = this.crashes.filter((t) => now - t < RESTARTS.windowMs);
    this.crashes.push(now);
    const reason = this.stderr.reason();
    if (this.crashes.length <= RESTARTS.max) {
      this.output.warn(`GEAK: the server stopped (${reason ?? "no message"}); restarting it`);
      void this.restart();
      return;
    }
    const f = serverFailure(this.interpreter?.path ?? "python", reason, "stopped",
      this.checkout(this.lastProbe?.ok ? this.lastProbe.root : undefined));
    this.output.error(f.message);
    void this.explainFailure(f.message, f.fix);
  }

  /** Results of a target, from the server (geak.results); undefined when it is not running. A
   * target the server cannot use is a JSON-RPC error (-32602, in the user's words): the page
   * shows its message. */
  async results(target: Target): Promise<Results | undefined> {
    if (!this.client || !this.running) return undefined;
    try {
      return await this.client.sendRequest("workspace/executeCommand", { command: "geak.results", arguments: [target] }) as Results;
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      this.output.warn(`GEAK: geak.results failed: ${message}`);
      return { uri: target.uri, name: target.name, symbol: target.name, path: "", runs: [], error: message };
    }
  }

  /** A target's compiled view, from the server (geak.compiledCode); undefined when it is not running. */
  async compiled(target: CompiledTarget): Promise<CompiledDoc | { error: string } | undefined> {
    if (!this.client || !this.running) return undefined;
    try {
      return await this.client.sendRequest("workspace/executeCommand", { command: "geak.compiledCode", arguments: [target] }) as CompiledDoc | { error: string };
    } catch (e) {
      const message = e instanceof Error ? e.message : String(e);
      this.output.warn(`GEAK: geak.compiledCode failed: ${message}`);
      return { error: `GEAK: ${message}` };
    }
  }

  /** The target under the cursor ({uri, name}), from the server's Optimize code action. */
  async cursorTarget(): Promise<Target | undefined> {
    const args = await this.targetAtCursor("geak.optimize", true);
    const t = args?.[0] as Target | undefined;
    return t && typeof t.uri === "string" && typeof t.name === "string" ? { uri: t.uri, name: t.name } : undefined;
  }

  /** The Optimize/Benchmark arguments for the target under the cursor, from the server's code actions. */
  private async targetAtCursor(command: string, quiet = false): Promise<unknown[] | undefined> {
    const ed = vscode.window.activeTextEditor;
    if (!ed || ed.document.languageId !== "python" || !this.client) return undefined;
    const pos = ed.selection.active;
    const actions = await this.client.sendRequest("textDocument/codeAction", {
      textDocument: { uri: ed.document.uri.toString() },
      range: { start: { line: pos.line, character: pos.character }, end: { line: pos.line, character: pos.character } },
      context: { diagnostics: [] },
    }) as Array<{ command?: { command: string; arguments?: unknown[] }; disabled?: { reason: string } }> | null;
    const hit = (actions ?? []).find((a) => a.command?.command === command);
    if (hit?.disabled && !quiet) {
      void vscode.window.showWarningMessage(`GEAK: ${hit.disabled.reason}`);
      return undefined;
    }
    return hit?.command?.arguments;
  }

  /** A GEAK checkout to install from: where the installed GEAK lives, else a workspace folder. */
  private checkout(installed?: string): string | undefined {
    return findCheckout([installed, ...(vscode.workspace.workspaceFolders ?? []).map((f) => f.uri.fsPath)]);
  }

  /** One message for a server that did not start or stopped: the reason and what to do. Three
   * buttons at most: with four, the notification cut its source line to "So…". */
  private async explainFailure(message: string, fix?: string): Promise<void> {
    const buttons = fix ? ["Copy Fix", "Show Log", "Restart"] : ["Show Log", "Set geak.interpreter", "Restart"];
    const choice = await vscode.window.showErrorMessage(message, ...buttons);
    if (choice === "Copy Fix" && fix) await vscode.env.clipboard.writeText(fix);
    else if (choice === "Show Log") this.output.show();
    else if (choice === "Set geak.interpreter") await vscode.commands.executeCommand("workbench.action.openSettings", "geak.interpreter");
    else if (choice === "Restart") await this.restart();
  }

  private async explain(message: string, install?: string): Promise<void> {
    const buttons = [...(install ? ["Copy install command"] : []), "Set geak.interpreter", "Show Log"];
    const choice = await vscode.window.showErrorMessage(message, ...buttons);
    if (choice === "Copy install command" && install) await vscode.env.clipboard.writeText(install);
    else if (choice === "Set geak.interpreter") await vscode.commands.executeCommand("workbench.action.openSettings", "geak.interpreter");
    else if (choice === "Show Log") this.output.show();
  }

  async stop(): Promise<void> {
    this.running = false;
    this.progress?.dispose();
    this.progress = undefined;
    this.stateWatch?.dispose();
    this.stateWatch = undefined;
    this.jobEndWatch?.dispose();
    this.jobEndWatch = undefined;
    this.jobStatusWatch?.dispose();
    this.jobStatusWatch = undefined;
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
