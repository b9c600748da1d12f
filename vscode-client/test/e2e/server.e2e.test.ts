/**
 * End to end against the real Python server (`python -m geak_lsp`, stdio), driven from Node
 * through vscode-languageserver-protocol: code action -> executeCommand -> the server's
 * workspace/applyEdit (answered, applied to the in-memory document) -> hover.
 *
 * There is no GPU here: the job runs on the Triton CPU interpreter, where nothing is timed, so
 * the edit comes from the GEAK loop with geak.applyUntimed (a candidate verified correct,
 * labelled "not timed"). The LLM is the repository's scripted server (tests/llm_server.py);
 * the API key reaches the server the way the extension passes it (serverEnv), and the scripted
 * server (wrapped to log each request's Authorization header) shows it arrived.
 *
 * GEAK_PYTHON: the Python with GEAK installed (default: the repository's .venv).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ApplyWorkspaceEditRequest, CodeActionRequest, ConfigurationRequest, createProtocolConnection,
  DidOpenTextDocumentNotification, ExecuteCommandRequest, HoverRequest, InitializedNotification,
  InitializeRequest, LogMessageNotification, PublishDiagnosticsNotification, RegistrationRequest,
  ShowMessageNotification, ShutdownRequest, ExitNotification, StreamMessageReader, StreamMessageWriter,
  WorkDoneProgress, WorkDoneProgressCreateRequest,
  type ApplyWorkspaceEditParams, type CodeAction, type Command, type Diagnostic, type MarkupContent,
  type ProtocolConnection, type TextDocumentEdit, type TextEdit,
} from "vscode-languageserver-protocol/node";
import { serverEnv } from "../../src/env";
import { probe, probeMessage } from "../../src/probe";
import { toServerSettings } from "../../src/settings";
import { applyTextEdits } from "../../src/textEdits";

const REPO = path.resolve(__dirname, "../../..");
const PYTHON = process.env.GEAK_PYTHON ?? path.join(REPO, ".venv/bin/python");
const FIXTURES = path.join(__dirname, "fixtures");
const SECRET = "sk-geak-e2e-" + process.pid;

/** The geak section as VS Code would return it for these user settings. */
const USER_SETTINGS = {
  interpreter: PYTHON, device: "interpreter", strategy: "llm", provider: "openai", model: "scripted",
  runner: { url: "local" }, iterations: 1, parallel: 1, arch: null, maxJobs: 2, workers: 2, trials: 1,
  maxConfigs: 24, emit: "constants", applyUntimed: true,
};

function waitFor<T>(what: string, get: () => T | undefined, ms: number): Promise<T> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const tick = () => {
      const v = get();
      if (v !== undefined) return resolve(v);
      if (Date.now() - t0 > ms) return reject(new Error(`timed out waiting for ${what}`));
      setTimeout(tick, 50);
    };
    tick();
  });
}

describe("the real GEAK server, driven over LSP", () => {
  let tmp: string;
  let llm: ChildProcess;
  let llmLog: string;
  let server: ChildProcess;
  let conn: ProtocolConnection;
  let serverKeys: string[] | null = null;
  let stderr = "";
  const docUri = () => pathToFileURL(path.join(tmp, "k.py")).toString();
  let text = "";
  let version = 1;
  const applied: ApplyWorkspaceEditParams[] = [];
  let decline = false;
  const progress = new Map<string, Array<{ kind: string; message?: string; title?: string }>>();
  const messages: string[] = [];
  let diagnostics: Diagnostic[] = [];

  beforeAll(async () => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), "geak-e2e-"));
    fs.writeFileSync(path.join(tmp, "pyproject.toml"), "[project]\nname = \"e2e\"\nversion = \"0\"\n");
    fs.copyFileSync(path.join(FIXTURES, "k.py"), path.join(tmp, "k.py"));
    text = fs.readFileSync(path.join(tmp, "k.py"), "utf8");
    // The scripted LLM server on loopback.
    const portFile = path.join(tmp, "llm.port");
    llmLog = path.join(tmp, "llm.log");
    llm = spawn(PYTHON, [path.join(__dirname, "llm_server_auth.py"), path.join(FIXTURES, "transcript.json"),
      portFile, llmLog], { stdio: ["ignore", "ignore", "inherit"] });
    const port = await waitFor("the scripted LLM server", () =>
      fs.existsSync(portFile) && fs.readFileSync(portFile, "utf8").trim() ? fs.readFileSync(portFile, "utf8").trim() : undefined, 20000);

    const p = await probe(PYTHON);
    expect(p.ok, JSON.stringify(p)).toBe(true);
    if (p.ok) serverKeys = p.settings;

    const env = serverEnv({ ...process.env, OPENAI_BASE_URL: `http://127.0.0.1:${port}/v1`, OPENAI_API_KEY: "" },
      { openai: SECRET });
    // As the extension starts it: vscode-languageclient appends --stdio to the command.
    server = spawn(PYTHON, ["-m", "geak_lsp", "--stdio"], { cwd: tmp, env, stdio: ["pipe", "pipe", "pipe"] });
    server.stderr!.on("data", (d) => { stderr += String(d); });
    conn = createProtocolConnection(new StreamMessageReader(server.stdout!), new StreamMessageWriter(server.stdin!));
    conn.onRequest(ConfigurationRequest.type, (params) =>
      params.items.map((it) => (it.section === "geak" ? toServerSettings(USER_SETTINGS, serverKeys ?? undefined) : null)));
    conn.onRequest(WorkDoneProgressCreateRequest.type, () => undefined);
    conn.onRequest(RegistrationRequest.type, () => undefined);
    conn.onRequest(ApplyWorkspaceEditRequest.type, (params) => {
      applied.push(params);
      if (decline) return { applied: false, failureReason: "declined in the preview" };
      const change = params.edit.documentChanges?.[0] as TextDocumentEdit | undefined;
      if (!change || change.textDocument.uri !== docUri()) return { applied: false, failureReason: "unexpected document" };
      if (change.textDocument.version !== version) return { applied: false, failureReason: "version mismatch" };
      text = applyTextEdits(text, change.edits as TextEdit[]);
      version += 1;
      conn.sendNotification("textDocument/didChange", {
        textDocument: { uri: docUri(), version }, contentChanges: [{ text }],
      });
      return { applied: true };
    });
    conn.onNotification("$/progress", (p: { token: string; value: { kind: string; message?: string; title?: string } }) => {
      const list = progress.get(String(p.token)) ?? [];
      list.push(p.value);
      progress.set(String(p.token), list);
    });
    conn.onNotification(ShowMessageNotification.type, (m) => { messages.push(m.message); });
    conn.onNotification(LogMessageNotification.type, (m) => { messages.push(m.message); });
    conn.onNotification(PublishDiagnosticsNotification.type, (d) => { if (d.uri === docUri()) diagnostics = d.diagnostics; });
    conn.listen();
    void WorkDoneProgress;

    await conn.sendRequest(InitializeRequest.type, {
      processId: process.pid,
      rootUri: pathToFileURL(tmp).toString(),
      workspaceFolders: [{ uri: pathToFileURL(tmp).toString(), name: "e2e" }],
      initializationOptions: { geak: toServerSettings(USER_SETTINGS, serverKeys ?? undefined) },
      capabilities: {
        workspace: {
          configuration: true, applyEdit: true,
          workspaceEdit: { documentChanges: true, changeAnnotationSupport: { groupsOnLabel: true } },
        },
        window: { workDoneProgress: true },
        textDocument: { hover: { contentFormat: ["markdown", "plaintext"] }, codeAction: { dataSupport: true } },
      },
    });
    await conn.sendNotification(InitializedNotification.type, {});
    await conn.sendNotification(DidOpenTextDocumentNotification.type, {
      textDocument: { uri: docUri(), languageId: "python", version, text },
    });
  }, 60000);

  afterAll(async () => {
    try {
      await Promise.race([conn?.sendRequest(ShutdownRequest.type), new Promise((r) => setTimeout(r, 5000))]);
      await conn?.sendNotification(ExitNotification.type);
    } catch {
      // the server is gone already
    }
    await new Promise((r) => setTimeout(r, 500));
    if (server && server.exitCode === null) server.kill();
    if (llm && llm.exitCode === null) llm.kill();
    conn?.dispose();
    if (tmp) fs.rmSync(tmp, { recursive: true, force: true });
  });

  it("settings: the server took the extension's document without a warning", async () => {
    const info = await conn.sendRequest(ExecuteCommandRequest.type, { command: "geak.serverInfo", arguments: [] }) as
      { settings: Record<string, unknown>; imported: Record<string, boolean> };
    expect(info.settings.strategy).toBe("llm");
    expect(info.settings.apply_untimed).toBe(true);
    expect("device" in info.settings ? info.settings.device : info.settings.interpreter).toBe(
      "device" in info.settings ? "interpreter" : true);
    expect(info.imported.torch).toBe(false);
    expect(messages.filter((m) => m.startsWith("GEAK settings:"))).toEqual([]);
  });

  it("optimize: code action -> executeCommand -> applyEdit (needs confirmation) -> hover", async () => {
    const lines = text.split("\n");
    const wrapper = lines.indexOf("def add_relu(x, y):");
    const kernel = lines.indexOf("@triton.jit");
    expect(wrapper).toBeGreaterThan(0);
    const actions = await conn.sendRequest(CodeActionRequest.type, {
      textDocument: { uri: docUri() },
      range: { start: { line: wrapper + 1, character: 4 }, end: { line: wrapper + 1, character: 4 } },
      context: { diagnostics: [] },
    }) as CodeAction[];
    const opt = actions.find((a) => a.title === "Optimize with GEAK");
    expect(opt?.command?.command).toBe("geak.optimize");
    const started = await conn.sendRequest(ExecuteCommandRequest.type, opt!.command as Command) as { job: string; token: string };
    expect(started.token).toBeTruthy();
    const end = await waitFor("the job's end", () => progress.get(started.token)?.find((v) => v.kind === "end"), 240000);
    expect(end.message, stderr.slice(-2000) + messages.join("\n")).toContain("applied");
    const values = progress.get(started.token)!;
    expect(values[0].kind).toBe("begin");
    expect(values.some((v) => v.kind === "report" && /iteration 1\/1/.test(v.message ?? ""))).toBe(true);

    // The edit asked for confirmation and replaced the wrapper's launch; inputs stay.
    expect(applied).toHaveLength(1);
    const ann = Object.values(applied[0].edit.changeAnnotations ?? {});
    expect(ann).toHaveLength(1);
    expect(ann[0].needsConfirmation).toBe(true);
    expect(ann[0].label).toBe("Apply GEAK result (verified correct, not timed)");
    expect(text).toContain("add_relu_kernel[(triton.cdiv(n, 512),)](x, y, out, n, BLOCK=512)");
    expect(text).toContain("INPUT_CASES = [dict(n=300), dict(n=2048)]");
    expect(text.split("def add_relu_kernel").length).toBe(2);

    // The API key from the extension's secret storage reached the LLM through the server's env.
    const requests = fs.readFileSync(llmLog, "utf8").trim().split("\n").map((l) => JSON.parse(l));
    expect(requests.length).toBeGreaterThan(0);
    const auth = requests.map((r) => r.authorization);
    expect(auth.every((a: string) => a === `Bearer ${SECRET}`)).toBe(true);

    // Diagnostics and the hover on the kernel: the measurement of the code now in the file.
    const d = await waitFor("the not-timed diagnostic", () => diagnostics.find((x) => x.code === "not-timed"), 10000);
    expect(d.message).toContain("not timed");
    expect(d.message).not.toContain("faster");
    const hover = await conn.sendRequest(HoverRequest.type, {
      textDocument: { uri: docUri() }, position: { line: kernel, character: 1 },
    });
    const md = (hover?.contents as MarkupContent).value;
    expect(md).toContain("optimize run on **Triton CPU interpreter**");
    expect(md).not.toContain("stale");
  }, 300000);

  it("declined in the preview: nothing changes and the server offers the result as a code action", async () => {
    decline = true;
    const before = text;
    const wrapper = text.split("\n").indexOf("def add_relu(x, y):");
    const at = { start: { line: wrapper + 1, character: 4 }, end: { line: wrapper + 1, character: 4 } };
    const actions = await conn.sendRequest(CodeActionRequest.type, { textDocument: { uri: docUri() }, range: at, context: { diagnostics: [] } }) as CodeAction[];
    const opt = actions.find((a) => a.title === "Optimize with GEAK")!;
    const started = await conn.sendRequest(ExecuteCommandRequest.type, opt.command as Command) as { token: string };
    await waitFor("the second job's end", () => progress.get(started.token)?.find((v) => v.kind === "end"), 240000);
    expect(applied).toHaveLength(2);
    expect(text).toBe(before);
    const again = await conn.sendRequest(CodeActionRequest.type, { textDocument: { uri: docUri() }, range: at, context: { diagnostics: [] } }) as CodeAction[];
    const apply = again.find((a) => a.title.startsWith("Apply GEAK result"));
    expect(apply, JSON.stringify(again.map((a) => a.title))).toBeDefined();
    const edit = apply!.edit!;
    // Choosing the action is the confirmation: its edit does not ask again (VS Code would show
    // its refactor preview with the edit unchecked).
    expect(Object.values(edit.changeAnnotations ?? {}).some((a) => a.needsConfirmation)).toBe(false);
    const after = applyTextEdits(text, (edit.documentChanges![0] as TextDocumentEdit).edits as TextEdit[]);
    expect(after).toContain("BLOCK=1024");
  }, 300000);
});

describe("the install check", () => {
  it("accepts the Python that has GEAK and reads the server's settings", async () => {
    const p = await probe(PYTHON);
    expect(p.ok).toBe(true);
    if (p.ok) expect(p.settings).toContain("applyUntimed");
  });

  it("says how to install GEAK into a Python that lacks it", async () => {
    const bare = fs.mkdtempSync(path.join(os.tmpdir(), "geak-bare-"));
    try {
      const r = spawnSync("python3", ["-m", "venv", "--without-pip", bare]);
      expect(r.status, String(r.stderr)).toBe(0);
      const python = path.join(bare, "bin", "python");
      const { PYTHONPATH: _drop, ...env } = process.env;
      const p = await probe(python, env);
      expect(p.ok).toBe(false);
      if (!p.ok) {
        expect(p.reason).toBe("not-installed");
        const { message, install } = probeMessage(p);
        expect(message).toContain(`GEAK is not installed in ${python}`);
        expect(message).toContain("from a GEAK checkout");
        expect(install).toBe(`${python} -m pip install -e '/path/to/geak[lsp]'`);
      }
    } finally {
      fs.rmSync(bare, { recursive: true, force: true });
    }
  }, 30000);

  it("says when the interpreter does not exist", async () => {
    const p = await probe("/nonexistent/python3");
    expect(p.ok).toBe(false);
    if (!p.ok) expect(p.reason).toBe("missing-python");
  });
});

describe("package.json's settings match the server's schema (geak_lsp/settings.py)", () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "../../package.json"), "utf8"));
  const props: Record<string, { default?: unknown; enum?: unknown[]; minimum?: number; maximum?: number; type?: unknown }> =
    pkg.contributes.configuration.properties;
  const code = [
    "import json",
    "from geak_lsp import settings as s",
    "d = s.Settings()",
    "out = {}",
    "for key, (field, check) in s.SCHEMA.items():",
    "    out[key] = {'default': getattr(d, field)}",
    "print(json.dumps(out))",
  ].join("\n");
  const server: Record<string, { default: unknown }> = JSON.parse(
    spawnSync(PYTHON, ["-c", code], { encoding: "utf8" }).stdout || "{}");
  /** Does the server's own check accept this value for the setting? */
  const accepts = (key: string, values: unknown[]): boolean[] => {
    const r = spawnSync(PYTHON, ["-c",
      "import json, sys\nfrom geak_lsp import settings as s\nkey, vals = json.load(sys.stdin)\n" +
      "print(json.dumps([s.SCHEMA[key][1](v) is None for v in vals]))"], { input: JSON.stringify([key, values]), encoding: "utf8" });
    return JSON.parse(r.stdout);
  };

  it("every server setting is contributed, with the server's default", () => {
    expect(Object.keys(server).length).toBeGreaterThan(10);
    for (const [key, { default: dflt }] of Object.entries(server)) {
      const p = props[`geak.${key}`];
      expect(p, `geak.${key}`).toBeDefined();
      // Where the server's "unset" is null, the extension's is "local" / "" (a string setting).
      const expected = key === "runner.url" && dflt === null ? "local" : key === "interpreter" && dflt === null ? "" : dflt;
      expect(p.default, `geak.${key}`).toEqual(expected);
    }
  });

  it("enums and integer ranges are the ones the server accepts", () => {
    for (const [key] of Object.entries(server)) {
      const p = props[`geak.${key}`];
      if (p.enum) {
        expect(accepts(key, p.enum), `geak.${key} enum`).toEqual(p.enum.map(() => true));
        expect(accepts(key, ["not-a-value"]), `geak.${key}`).toEqual([false]);
      }
      if (p.type === "integer") {
        expect(accepts(key, [p.minimum! - 1, p.minimum, p.maximum, p.maximum! + 1]), `geak.${key} range`).toEqual([false, true, true, false]);
      }
    }
  });
});
