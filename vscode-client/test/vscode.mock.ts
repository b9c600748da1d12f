/** A small stand-in for the `vscode` module (aliased in vitest.config.mts): enough of the API
 * for the extension's code to run, with vi.fn()s the tests program and inspect. */
import { vi } from "vitest";

type Listener<T> = (e: T) => unknown;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  event = (l: Listener<T>) => {
    this.listeners.push(l);
    return { dispose: () => { this.listeners = this.listeners.filter((x) => x !== l); } };
  };
  fire(e: T) { for (const l of [...this.listeners]) l(e); }
  dispose() { this.listeners = []; }
}

export class Uri {
  constructor(readonly scheme: string, readonly path: string, readonly query = "") {}
  static parse(s: string) {
    const m = /^([a-z-]+):\/\/([^?]*)(?:\?(.*))?$/.exec(s);
    return m ? new Uri(m[1], m[2], m[3] ?? "") : new Uri("file", s);
  }
  static file(p: string) { return new Uri("file", p); }
  static from(c: { scheme: string; path?: string; query?: string }) { return new Uri(c.scheme, c.path ?? "", c.query ?? ""); }
  get fsPath() { return this.path; }
  with(c: { scheme?: string; path?: string; query?: string }) {
    return new Uri(c.scheme ?? this.scheme, c.path ?? this.path, c.query ?? this.query);
  }
  toString() { return `${this.scheme}://${this.path}${this.query ? "?" + this.query : ""}`; }
}

export class Position { constructor(readonly line: number, readonly character: number) {} }
export class Range {
  readonly start: Position; readonly end: Position;
  constructor(sl: number, sc: number, el: number, ec: number) { this.start = new Position(sl, sc); this.end = new Position(el, ec); }
}
export class WorkspaceEdit {
  readonly replaces: Array<{ uri: Uri; range: Range; text: string }> = [];
  replace(uri: Uri, range: Range, text: string) { this.replaces.push({ uri, range, text }); }
}

export class ThemeColor { constructor(readonly id: string) {} }
export enum TextEditorRevealType { Default = 0, InCenter = 1, InCenterIfOutsideViewport = 2, AtTop = 3 }

/** Editors on screen (tests put them here) and the events the code listens to. */
export const selectionEmitter = new EventEmitter<{ textEditor: unknown }>();
export const saveEmitter = new EventEmitter<{ uri: Uri }>();
export interface MockEditor {
  document: { uri: Uri };
  viewColumn?: number;
  selection: { active: Position };
  decorations: Map<unknown, unknown[]>;
  revealed: Range[];
  setDecorations(type: unknown, ranges: unknown[]): void;
  revealRange(r: Range): void;
}
export function mockEditor(uri: Uri, line = 0): MockEditor {
  const ed: MockEditor = {
    document: { uri }, selection: { active: new Position(line, 0) }, decorations: new Map(), revealed: [],
    setDecorations(type, ranges) { ed.decorations.set(type, ranges); },
    revealRange(r) { ed.revealed.push(r); },
  };
  return ed;
}

export enum StatusBarAlignment { Left = 1, Right = 2 }
export enum ViewColumn { Active = -1, Beside = -2, One = 1 }

/** Tabs: tests add diff tabs and fire their closing. */
export const tabGroupsState = { tabs: [] as Array<{ input: unknown; label: string }> };
const tabsEmitter = new EventEmitter<{ opened: unknown[]; closed: unknown[]; changed: unknown[] }>();
export function closeTab(tab: { input: unknown; label: string }) {
  tabGroupsState.tabs = tabGroupsState.tabs.filter((t) => t !== tab);
  tabsEmitter.fire({ opened: [], closed: [tab], changed: [] });
}

/** Webview panels the code created. */
export const panels: Array<{ title: string; webview: { html: string; cspSource: string }; reveal: ReturnType<typeof vi.fn>;
  dispose: () => void; onDidDispose: (l: () => void) => { dispose(): void }; viewType: string }> = [];
export enum ProgressLocation { SourceControl = 1, Window = 10, Notification = 15 }

/** Settings: section "geak", keys like "runner.url". Tests write `config` directly. */
export const config: Record<string, unknown> = {};
export const configurationUpdates: unknown[] = [];
const configEmitter = new EventEmitter<{ affectsConfiguration(s: string): boolean }>();
export function changeConfig(values: Record<string, unknown>) {
  Object.assign(config, values);
  const keys = Object.keys(values).map((k) => "geak." + k);
  configEmitter.fire({ affectsConfiguration: (s: string) => keys.some((k) => k === s || k.startsWith(s + ".")) });
}

function configuration() {
  const get = (key: string, dflt?: unknown) => (key in config ? config[key] : dflt);
  const nested: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(config)) {
    const parts = k.split(".");
    let o = nested;
    for (const p of parts.slice(0, -1)) o = (o[p] ??= {}) as Record<string, unknown>;
    o[parts[parts.length - 1]] = v;
  }
  return {
    ...nested,
    get,
    has: (k: string) => k in config,
    update: vi.fn(async (k: string, v: unknown) => { configurationUpdates.push([k, v]); }),
    inspect: () => undefined,
  };
}

export const statusItems: Array<{ text: string; tooltip: unknown; command: unknown; show: () => void; dispose: () => void; name?: string }> = [];
export const outputLines: string[] = [];

export const window = {
  activeTextEditor: undefined as unknown,
  visibleTextEditors: [] as MockEditor[],
  onDidChangeTextEditorSelection: selectionEmitter.event,
  createTextEditorDecorationType: vi.fn((options: unknown) => ({ options, dispose: vi.fn() })),
  createOutputChannel: vi.fn((_name: string) => {
    const line = (kind: string) => (m: string) => { outputLines.push(`${kind}: ${m}`); };
    return { info: line("info"), warn: line("warn"), error: line("error"), debug: line("debug"), trace: line("trace"),
      appendLine: line("line"), append: line("append"), show: vi.fn(), dispose: vi.fn(), clear: vi.fn(), replace: vi.fn(),
      hide: vi.fn(), name: "GEAK", logLevel: 2, onDidChangeLogLevel: new EventEmitter<number>().event };
  }),
  createStatusBarItem: vi.fn(() => {
    const item = { text: "", tooltip: undefined as unknown, command: undefined as unknown, show: vi.fn(), dispose: vi.fn() };
    statusItems.push(item);
    return item;
  }),
  showErrorMessage: vi.fn(async (..._a: unknown[]) => undefined as string | undefined),
  showWarningMessage: vi.fn(async (..._a: unknown[]) => undefined as string | undefined),
  showInformationMessage: vi.fn(async (..._a: unknown[]) => undefined as string | undefined),
  showQuickPick: vi.fn(async (..._a: unknown[]) => undefined as unknown),
  showInputBox: vi.fn(async (..._a: unknown[]) => undefined as string | undefined),
  setStatusBarMessage: vi.fn(),
  showTextDocument: vi.fn(async (..._a: unknown[]) => undefined),
  tabGroups: {
    get all() { return [{ tabs: tabGroupsState.tabs }]; },
    onDidChangeTabs: tabsEmitter.event,
    close: vi.fn(async (tabs: Array<{ input: unknown; label: string }>) => { for (const t of tabs) closeTab(t); return true; }),
  },
  createWebviewPanel: vi.fn((viewType: string, title: string) => {
    const disposed = new EventEmitter<void>();
    const panel = {
      viewType, title, webview: { html: "", cspSource: "vscode-webview:" }, reveal: vi.fn(),
      onDidDispose: (l: () => void) => disposed.event(l),
      dispose: () => { disposed.fire(); panels.splice(panels.indexOf(panel), 1); },
    };
    panels.push(panel);
    return panel;
  }),
  withProgress: vi.fn(async (_o: unknown, task: (p: unknown, t: unknown) => Promise<unknown>) => {
    const cancel = new EventEmitter<void>();
    progressRuns.push({ options: _o, reports: [], cancel });
    const run = progressRuns[progressRuns.length - 1];
    return task({ report: (x: unknown) => run.reports.push(x) }, { isCancellationRequested: false, onCancellationRequested: cancel.event });
  }),
};
export const progressRuns: Array<{ options: unknown; reports: unknown[]; cancel: EventEmitter<void> }> = [];

export const documents = new Map<string, { uri: Uri; version: number; getText(): string; languageId: string }>();

export const workspace = {
  workspaceFolders: undefined as undefined | Array<{ uri: Uri; name: string; index: number }>,
  getConfiguration: vi.fn((_section?: string) => configuration()),
  onDidChangeConfiguration: configEmitter.event,
  getWorkspaceFolder: vi.fn((_u: Uri) => workspace.workspaceFolders?.[0]),
  registerTextDocumentContentProvider: vi.fn(() => ({ dispose: vi.fn() })),
  onDidSaveTextDocument: saveEmitter.event,
  textDocuments: [] as Array<{ uri: Uri }>,
  openTextDocument: vi.fn(async (u: Uri) => {
    const d = documents.get(u.toString());
    if (!d) throw new Error(`no document ${u.toString()}`);
    return d;
  }),
  applyEdit: vi.fn(async (_e: WorkspaceEdit) => true),
};

export const registeredCommands = new Map<string, (...a: unknown[]) => unknown>();
export const commands = {
  registerCommand: vi.fn((id: string, fn: (...a: unknown[]) => unknown) => {
    if (registeredCommands.has(id)) throw new Error(`command '${id}' already exists`);
    registeredCommands.set(id, fn);
    return { dispose: () => registeredCommands.delete(id) };
  }),
  executeCommand: vi.fn(async (id: string, ...args: unknown[]) => registeredCommands.get(id)?.(...args)),
};

export const extensionsById = new Map<string, unknown>();
export const extensions = { getExtension: vi.fn((id: string) => extensionsById.get(id)) };

export const env = { clipboard: { writeText: vi.fn(async (_t: string) => undefined) } };

/** SecretStorage in memory. */
export class MemorySecrets {
  readonly values = new Map<string, string>();
  private readonly emitter = new EventEmitter<{ key: string }>();
  onDidChange = this.emitter.event;
  get = vi.fn(async (k: string) => this.values.get(k));
  store = vi.fn(async (k: string, v: string) => { this.values.set(k, v); this.emitter.fire({ key: k }); });
  delete = vi.fn(async (k: string) => { this.values.delete(k); this.emitter.fire({ key: k }); });
  keys = vi.fn(async () => [...this.values.keys()]);
}

export function resetMock() {
  for (const k of Object.keys(config)) delete config[k];
  configurationUpdates.length = 0;
  statusItems.length = 0;
  outputLines.length = 0;
  progressRuns.length = 0;
  documents.clear();
  tabGroupsState.tabs = [];
  panels.length = 0;
  registeredCommands.clear();
  extensionsById.clear();
  window.activeTextEditor = undefined;
  window.visibleTextEditors = [];
  workspace.textDocuments = [];
  workspace.workspaceFolders = undefined;
  vi.clearAllMocks();
}
