import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";

const mock = vscode as unknown as typeof import("./vscode.mock");

// The language client: record how it is made; the real one needs a running VS Code.
const clients: Array<{ id: string; server: any; options: any; start: ReturnType<typeof vi.fn>; stop: ReturnType<typeof vi.fn>; handlers: Map<string, unknown> }> = [];
const startFails: { value: boolean } = { value: false };
vi.mock("vscode-languageclient/node", () => ({
  TransportKind: { stdio: 0 },
  State: { Stopped: 1, Starting: 3, Running: 2, StartFailed: 4 },
  RevealOutputChannelOn: { Debug: 0, Info: 1, Warn: 2, Error: 3, Never: 4 },
  CloseAction: { DoNotRestart: 1, Restart: 2 },
  ErrorAction: { Continue: 1, Shutdown: 2 },
  LanguageClient: class {
    handlers = new Map<string, unknown>();
    notifications = new Map<string, unknown>();
    features: any[] = [];
    start = vi.fn(async () => { if (startFails.value) throw new Error("Connection got disposed."); });
    stop = vi.fn(async () => undefined);
    constructor(public id: string, _name: string, public server: any, public options: any) {
      clients.push(this as any);
    }
    onRequest(type: { method: string }, h: unknown) { this.handlers.set(type.method, h); return { dispose() {} }; }
    onNotification(method: string, h: unknown) { this.notifications.set(method, h); return { dispose() {} }; }
    registerFeature(f: unknown) { this.features.push(f); }
    error(_m: string, _d?: unknown, _s?: unknown) {}
    onProgress() { return { dispose() {} }; }
    stateListeners: Array<(e: { oldState: number; newState: number }) => void> = [];
    onDidChangeState(l: (e: { oldState: number; newState: number }) => void) { this.stateListeners.push(l); return { dispose() {} }; }
    async sendNotification() {}
  },
}));

const probeResult: { value: any } = { value: undefined };
vi.mock("../src/probe", async (orig) => ({
  ...(await orig<typeof import("../src/probe")>()),
  probe: vi.fn(async (python: string) => probeResult.value ?? { ok: true, python, version: "0.1.0", settings: ["strategy", "device", "interpreter", "runner.url", "iterations"] }),
}));

import { activate, deactivate } from "../src/extension";
import { probe } from "../src/probe";
import { secretName } from "../src/secrets";

const contexts: Array<{ subscriptions: Array<{ dispose(): unknown }> }> = [];
function context(secrets = new mock.MemorySecrets()) {
  const ctx = { subscriptions: [] as Array<{ dispose(): unknown }>, secrets };
  contexts.push(ctx);
  return ctx as unknown as vscode.ExtensionContext & { secrets: InstanceType<typeof mock.MemorySecrets> };
}

describe("activation", () => {
  afterEach(() => {
    for (const c of contexts.splice(0)) for (const d of c.subscriptions) d.dispose();
  });
  beforeEach(async () => {
    await deactivate();
    mock.resetMock();
    clients.length = 0;
    probeResult.value = undefined;
    startFails.value = false;
  });

  it("registers the commands, shows the status bar and starts the server with geak.interpreter", async () => {
    mock.config.interpreter = "/opt/geak/bin/python";
    mock.config.strategy = "tune";
    mock.config.device = "interpreter";
    const ctx = context();
    ctx.secrets.values.set(secretName("openai"), "sk-secret");
    await activate(ctx);
    for (const id of ["geak.showLog", "geak.setApiKey", "geak.restartServer"]) expect(mock.registeredCommands.has(id), id).toBe(true);
    // geak.optimize/benchmark/cancel are the server's: the client library registers them.
    expect(mock.registeredCommands.has("geak.optimize")).toBe(false);
    expect(probe).toHaveBeenCalledWith("/opt/geak/bin/python", expect.anything());
    expect(clients).toHaveLength(1);
    const c = clients[0];
    expect(c.server.command).toBe("/opt/geak/bin/python");
    expect(c.server.args).toEqual(["-m", "geak_lsp"]); // the client library appends --stdio
    expect(c.server.transport).toBe(0);
    expect(c.server.options.env.OPENAI_API_KEY).toBe("sk-secret");
    expect(c.options.documentSelector).toEqual([{ scheme: "file", language: "python" }]);
    expect(c.options.initializationOptions).toEqual({ geak: { strategy: "tune", device: "interpreter" } });
    expect(c.start).toHaveBeenCalled();
    expect(c.handlers.has("window/workDoneProgress/create")).toBe(true);
    expect((c as any).notifications.has("geak/jobEnd")).toBe(true);
    expect((c as any).notifications.has("geak/jobStatus")).toBe(true);
    // The server learns that this client has the results view, says the end of jobs itself and
    // reads their status.
    const caps: any = {};
    for (const f of (c as any).features) f.fillClientCapabilities(caps);
    expect(caps.experimental).toEqual({ geakShowResults: true, geakJobEnd: true, geakJobStatus: true, geakShowCompiled: true });
    expect(c.options.markdown.isTrusted).toEqual({ enabledCommands: ["geak.showResults", "geak.showCompiled"] });
    expect(c.options.revealOutputChannelOn).toBe(4);
    expect(mock.statusItems[0].text).toBe("$(rocket) GEAK: local · interpreter");
    expect(mock.statusItems[0].command).toBe("geak.showLog");
    expect(mock.window.showErrorMessage).not.toHaveBeenCalled();
    // The server process dies (and the client library gives up restarting it): the item says so.
    (c as any).stateListeners[0]({ oldState: 2, newState: 1 });
    expect(mock.statusItems[0].text).toBe("$(warning) GEAK");
  });

  it("answers workspace/configuration with the server's view of geak.*", async () => {
    mock.config.interpreter = "/x/python";
    mock.config.iterations = 5;
    await activate(context());
    const mw = clients[0].options.middleware.workspace.configuration;
    const res = await mw({ items: [{ section: "geak" }, { section: "python" }] }, {},
      async () => [{ interpreter: "/x/python", iterations: 5, runner: { url: "local" } }, { x: 1 }]);
    expect(res).toEqual([{ iterations: 5, "runner.url": "local" }, { x: 1 }]);
  });

  it("says how to install GEAK, and starts nothing, when the interpreter lacks it", async () => {
    probeResult.value = { ok: false, python: "/usr/bin/python3", reason: "not-installed", detail: "ModuleNotFoundError: No module named 'geak_lsp'" };
    await activate(context());
    expect(clients).toHaveLength(0);
    const [msg, ...buttons] = mock.window.showErrorMessage.mock.calls[0] as string[];
    expect(msg).toContain("GEAK is not installed in /usr/bin/python3");
    expect(msg).toContain("/usr/bin/python3 -m pip install -e '/path/to/geak[lsp]'");
    expect(buttons).toContain("Copy install command");
    expect(mock.statusItems[0].text).toBe("$(warning) GEAK");
  });

  it("restarts the server with the new key when a key is set, and on a new geak.interpreter", async () => {
    const ctx = context();
    mock.config.interpreter = "/a/python";
    await activate(ctx);
    expect(clients).toHaveLength(1);
    await ctx.secrets.store(secretName("anthropic"), "sk-ant");
    await vi.waitFor(() => expect(clients).toHaveLength(2));
    expect(clients[0].stop).toHaveBeenCalled();
    expect(clients[1].server.options.env.ANTHROPIC_API_KEY).toBe("sk-ant");
    mock.changeConfig({ interpreter: "/b/python" });
    await vi.waitFor(() => expect(clients).toHaveLength(3));
    expect(clients[2].server.command).toBe("/b/python");
    mock.changeConfig({ iterations: 7 }); // the server pulls this itself: no restart
    await new Promise((r) => setTimeout(r, 20));
    expect(clients).toHaveLength(3);
  });

  it("fills Optimize's arguments from the server's code action at the cursor (palette, no arguments)", async () => {
    mock.config.interpreter = "/x/python";
    await activate(context());
    const c = clients[0] as any;
    const arg = { uri: "file:///p/k.py", name: "add_relu" };
    c.sendRequest = vi.fn(async () => [{ title: "Optimize with GEAK", command: { command: "geak.optimize", arguments: [arg] } }]);
    mock.window.activeTextEditor = { document: { uri: mock.Uri.parse("file:///p/k.py"), languageId: "python" }, selection: { active: { line: 16, character: 2 } } };
    const next = vi.fn(async () => ({ job: "j1" }));
    const mw = c.options.middleware.executeCommand;
    expect(await mw("geak.optimize", [], next)).toEqual({ job: "j1" });
    expect(next).toHaveBeenCalledWith("geak.optimize", [arg]);
    expect(c.sendRequest.mock.calls[0][1].range.start).toEqual({ line: 16, character: 2 });
    // With arguments (the code action), they pass unchanged; with no target, nothing runs.
    await mw("geak.benchmark", [arg], next);
    expect(next).toHaveBeenLastCalledWith("geak.benchmark", [arg]);
    c.sendRequest = vi.fn(async () => null);
    next.mockClear();
    expect(await mw("geak.optimize", [], next)).toBeUndefined();
    expect(next).not.toHaveBeenCalled();
    expect(mock.window.showWarningMessage).toHaveBeenCalled();
  });

  it("the results view shows the server's error for a target it cannot use (geak.results: -32602)", async () => {
    mock.config.interpreter = "/x/python";
    const srv = await activate(context());
    const c = clients[0] as any;
    const target = { uri: "untitled:Untitled-1", name: "add_relu" };
    const refusal = Object.assign(new Error("untitled:Untitled-1: GEAK works on files on disk; save the document first"), { code: -32602 });
    c.sendRequest = vi.fn(async () => { throw refusal; });
    expect(await srv.results(target)).toEqual({ ...target, symbol: "add_relu", path: "", runs: [], error: refusal.message });
    expect(c.sendRequest).toHaveBeenCalledWith("workspace/executeCommand", { command: "geak.results", arguments: [target] });
    await vscode.commands.executeCommand("geak.showResults", target);
    expect(mock.panels[0].webview.html).toContain("save the document first");
    expect(mock.panels[0].webview.html).not.toContain("not running");
  });

  it("uses the Python extension's environment when geak.interpreter is empty", async () => {
    const exports = { environments: {
      getActiveEnvironmentPath: () => ({ path: "/envs/k" }),
      resolveEnvironment: async () => ({ executable: { uri: mock.Uri.file("/envs/k/bin/python") } }),
    } };
    mock.extensionsById.set("ms-python.python", { isActive: true, exports, activate: async () => exports });
    await activate(context());
    expect(clients[0].server.command).toBe("/envs/k/bin/python");
  });

  it("a server that exits at start gives one message with its reason and the fix", async () => {
    mock.config.interpreter = "/old/bin/python";
    startFails.value = true;
    const { Readable } = await import("node:stream");
    const ctx = context();
    const started = activate(ctx);
    await vi.waitFor(() => expect(clients).toHaveLength(1));
    const c = clients[0] as any;
    const out = { error: vi.fn(), info: vi.fn() };
    c.options.stdioOptions.stderr(Readable.from(["usage: geak-lsp [-h] [--tcp] [--host HOST]\n",
      "geak-lsp: error: unrecognized arguments: --stdio\n"]), out);
    await started;
    expect(out.error).toHaveBeenCalledWith("geak-lsp: error: unrecognized arguments: --stdio");
    expect(mock.window.showErrorMessage).toHaveBeenCalledTimes(1);
    const [msg, ...buttons] = mock.window.showErrorMessage.mock.calls[0] as string[];
    expect(msg).toBe("GEAK: the language server did not start: geak-lsp: error: unrecognized arguments: --stdio. " +
      "The GEAK in /old/bin/python is older than this extension: update a GEAK checkout (/path/to/geak: where yours is) " +
      "and reinstall it (/old/bin/python -m pip install -e '/path/to/geak[lsp]'), then Restart.");
    expect(buttons).toEqual(["Copy Fix", "Show Log", "Restart"]);
    // The client library's own handlers are told to stay quiet and not to restart.
    expect(c.options.errorHandler.closed()).toEqual({ action: 1, handled: true });
    expect(c.options.initializationFailedHandler(new Error("x"))).toBe(false);
    expect(mock.statusItems[0].text).toBe("$(warning) GEAK");
  });

  it("a running server that stops is restarted quietly, a few times; then one message", async () => {
    mock.config.interpreter = "/x/python";
    await activate(context());
    for (let n = 1; n <= 3; n++) {
      clients[n - 1].options.errorHandler.closed();
      await vi.waitFor(() => expect(clients).toHaveLength(n + 1));
    }
    expect(mock.window.showErrorMessage).not.toHaveBeenCalled();
    const { Readable } = await import("node:stream");
    clients[3].options.stdioOptions.stderr(Readable.from(["Segmentation fault\n"]), { error: vi.fn() });
    await new Promise((r) => setTimeout(r, 20));
    clients[3].options.errorHandler.closed();
    await vi.waitFor(() => expect(mock.window.showErrorMessage).toHaveBeenCalledTimes(1));
    expect(clients).toHaveLength(4);
    expect(mock.window.showErrorMessage.mock.calls[0][0]).toContain("GEAK: the language server stopped and was not restarted: Segmentation fault");
  });
});
