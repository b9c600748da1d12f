/** Preview before apply: an edit from the server whose change annotation needs confirmation is
 * shown as a diff (the text now against the result) and applied only when the user accepts.
 *
 * The change is in view: the diff opens at the first changed line, with word wrap on in both
 * panes (a changed line wider than a pane was cut off on the right). Both sides are snapshots
 * (virtual documents), so the wrap, which VS Code keeps per document, never reaches the user's own
 * editor of the file.
 *
 * The choice stays on screen for as long as the diff is open: named **Apply** / **Discard** links
 * in a notification that stays until the choice is made (its Cancel discards), the same two as
 * buttons in the status bar, and ✓ / ↺ in the diff's title bar (commands geak.previewApply /
 * geak.previewDiscard). Closing the diff discards. */

import * as vscode from "vscode";
import type { ApplyWorkspaceEditParams, ApplyWorkspaceEditResult, TextDocumentEdit, TextEdit } from "vscode-languageclient";
import { applyTextEdits } from "./textEdits";

export const PREVIEW_SCHEME = "geak-preview";
export const PREVIEW_OPEN = "geak.previewOpen";

/** Serves the "after" side of the diff. */
export class PreviewContent implements vscode.TextDocumentContentProvider {
  private readonly texts = new Map<string, string>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;

  set(uri: vscode.Uri, text: string): void {
    this.texts.set(uri.toString(), text);
    this.emitter.fire(uri);
  }

  /** Keep the diff that is open readable; drop the earlier ones. */
  forgetOlder(keep: vscode.Uri, max = 4): void {
    const keys = [...this.texts.keys()].filter((k) => k !== keep.toString());
    for (const k of keys.slice(0, Math.max(0, keys.length - max + 1))) this.texts.delete(k);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.texts.get(uri.toString()) ?? "";
  }
}

export type Choice = "apply" | "discard";

/** Open previews waiting for the user's choice, keyed by the diff's right-hand URI. */
export class PreviewChoices implements vscode.Disposable {
  private readonly waiting = new Map<string, (c: Choice) => void>();
  private readonly order: string[] = [];
  private readonly tabs: vscode.Disposable | undefined;

  constructor() {
    // Closing the diff (its tab) is a Discard.
    this.tabs = vscode.window.tabGroups?.onDidChangeTabs((e) => {
      for (const tab of e.closed) {
        const right = diffRight(tab);
        if (right) this.decide("discard", right);
      }
    });
  }

  /** Wait for Apply or Discard on the preview whose right side is ``right``. */
  wait(right: vscode.Uri): Promise<Choice> {
    const key = right.toString();
    return new Promise<Choice>((resolve) => {
      this.waiting.set(key, resolve);
      this.order.push(key);
      void vscode.commands.executeCommand("setContext", PREVIEW_OPEN, true);
    });
  }

  /** From the title-bar buttons (with the diff's URI) or the notification. Without a URI: the
   * preview opened last. Returns whether a preview was waiting. */
  decide(choice: Choice, right?: vscode.Uri | unknown): boolean {
    // A command link's argument is a string, decoded once more by VS Code on the way: parsed
    // again, it is the same URI as the key.
    const given = right instanceof vscode.Uri ? right.toString()
      : typeof right === "string" && right.startsWith(`${PREVIEW_SCHEME}:`) ? vscode.Uri.parse(right).toString() : undefined;
    const key = given && given.startsWith(`${PREVIEW_SCHEME}:`) ? given : this.order[this.order.length - 1];
    const resolve = key ? this.waiting.get(key) : undefined;
    if (!key || !resolve) return false;
    this.waiting.delete(key);
    this.order.splice(this.order.indexOf(key), 1);
    if (this.order.length === 0) void vscode.commands.executeCommand("setContext", PREVIEW_OPEN, false);
    resolve(choice);
    return true;
  }

  get pending(): number {
    return this.waiting.size;
  }

  dispose(): void {
    for (const key of [...this.order]) this.waiting.get(key)?.("discard");
    this.waiting.clear();
    this.order.length = 0;
    this.tabs?.dispose();
  }
}

function diffRight(tab: vscode.Tab): vscode.Uri | undefined {
  const input = tab.input as { modified?: vscode.Uri } | undefined;
  return input?.modified && input.modified.scheme === PREVIEW_SCHEME ? input.modified : undefined;
}

/** Close the diff tab of a preview, if it is still open. */
async function closeDiff(right: vscode.Uri): Promise<void> {
  const groups = vscode.window.tabGroups;
  if (!groups) return;
  const tabs = groups.all.flatMap((g) => g.tabs).filter((t) => diffRight(t)?.toString() === right.toString());
  if (tabs.length) await groups.close(tabs, true);
}

/** The annotation that asks for confirmation, if any edit of the workspace edit carries one. */
export function confirmation(params: ApplyWorkspaceEditParams): { label: string; description?: string } | undefined {
  const anns = params.edit.changeAnnotations ?? {};
  for (const change of params.edit.documentChanges ?? []) {
    if (!("edits" in change)) continue;
    for (const e of change.edits) {
      const id = (e as { annotationId?: string }).annotationId;
      if (id && anns[id]?.needsConfirmation) return { label: anns[id].label, description: anns[id].description };
    }
  }
  return undefined;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Next = (params: ApplyWorkspaceEditParams, ...rest: any[]) => any;

/** The notification's text: the named choices as command links for the preview ``right``. */
export function ask(right?: vscode.Uri): string {
  const arg = right ? `?${encodeURIComponent(JSON.stringify([right.toString()]))}` : "";
  return `review the change in the diff, then [Apply](command:geak.previewApply${arg}) or ` +
    `[Discard](command:geak.previewDiscard${arg}) (also ✓ / ↺ above the diff)`;
}

/** The first line where ``after`` differs from ``before`` (0 when none does). */
export function firstChangedLine(before: string, after: string): number {
  const a = before.split("\n");
  const b = after.split("\n");
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? 0 : Math.max(0, n - 1);
}

/** Does the diff editor wrap lines already (diffEditor.wordWrap, else editor.wordWrap)? */
function diffWraps(uri: vscode.Uri): boolean {
  const diff = vscode.workspace.getConfiguration("diffEditor", { uri, languageId: "python" }).get<string>("wordWrap", "inherit");
  if (diff !== "inherit") return diff === "on";
  return vscode.workspace.getConfiguration("editor", { uri, languageId: "python" }).get<string>("wordWrap", "off") !== "off";
}

/** Word wrap on in both panes of the diff just opened (VS Code's toggle, which in a diff editor
 * sets both sides), when the diff is the active editor and does not wrap already. */
async function wrapDiff(right: vscode.Uri): Promise<void> {
  if (diffWraps(right)) return;
  const isDiff = () => vscode.window.activeTextEditor?.document.uri.toString() === right.toString();
  if (!isDiff() && vscode.window.onDidChangeActiveTextEditor) {
    await new Promise<void>((resolve) => {
      const done = () => { clearTimeout(timer); watch.dispose(); resolve(); };
      const timer = setTimeout(done, 2000);
      const watch = vscode.window.onDidChangeActiveTextEditor(() => { if (isDiff()) done(); });
    });
  }
  if (!isDiff()) return; // focus went elsewhere: never toggle another editor's wrap
  try {
    await vscode.commands.executeCommand("editor.action.toggleWordWrap");
  } catch {
    /* an editor without the command: the diff opens at the change all the same */
  }
}

/** Named Apply / Discard in the status bar while a preview waits. */
function choiceButtons(right: vscode.Uri, label: string): vscode.Disposable {
  const items = [
    { command: "geak.previewApply", text: "$(check) Apply", tooltip: `GEAK: ${label}` },
    { command: "geak.previewDiscard", text: "$(discard) Discard", tooltip: "GEAK: discard the result shown in the diff" },
  ].map((b, i) => {
    const item = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Left, 1000 - i);
    item.text = b.text;
    item.tooltip = b.tooltip;
    item.command = { title: b.text, command: b.command, arguments: [right] };
    item.show();
    return item;
  });
  return { dispose: () => items.forEach((i) => i.dispose()) };
}

export function makeApplyEditHandler(content: PreviewContent, choices: PreviewChoices) {
  return async (params: ApplyWorkspaceEditParams, next: Next): Promise<ApplyWorkspaceEditResult> => {
    const confirm = confirmation(params);
    if (!confirm) return next(params, undefined);
    const changes = (params.edit.documentChanges ?? []).filter((c): c is TextDocumentEdit => "edits" in c);
    if (changes.length !== 1 || (params.edit.documentChanges ?? []).length !== 1) return next(params, undefined);
    const change = changes[0];
    const uri = vscode.Uri.parse(change.textDocument.uri);
    const doc = await vscode.workspace.openTextDocument(uri);
    const version = change.textDocument.version;
    if (version !== null && version !== undefined && version !== doc.version) {
      return { applied: false, failureReason: "the document changed since GEAK started" };
    }
    const edits = change.edits as TextEdit[];
    const after = applyTextEdits(doc.getText(), edits);
    const right = uri.with({ scheme: PREVIEW_SCHEME, query: `v=${doc.version}` });
    const left = uri.with({ scheme: PREVIEW_SCHEME, query: `v=${doc.version}&before` });
    content.set(left, doc.getText());
    content.set(right, after);
    let buttons: vscode.Disposable | undefined;
    try {
      const name = uri.path.split("/").pop();
      const decided = choices.wait(right);
      const line = firstChangedLine(doc.getText(), after);
      await vscode.commands.executeCommand("vscode.diff", left, right, `${name} ↔ ${confirm.label}`,
        { preview: false, selection: new vscode.Range(line, 0, line, 0) });
      await wrapDiff(right);
      buttons = choiceButtons(right, confirm.label);
      // A progress notification: it neither hides itself nor outlives the choice, as a message
      // with buttons would; its text names the choices as links.
      void vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: `GEAK: ${confirm.label}`, cancellable: true },
        async (progress, cancel) => {
          progress.report({ message: ask(right) });
          cancel.onCancellationRequested(() => choices.decide("discard", right));
          await decided;
        });
      const choice = await decided;
      buttons.dispose();
      await closeDiff(right);
      if (choice !== "apply") return { applied: false, failureReason: "declined in the preview" };
      if (doc.version !== (version ?? doc.version)) {
        return { applied: false, failureReason: "the document changed while the preview was open" };
      }
      const we = new vscode.WorkspaceEdit();
      for (const e of edits) {
        we.replace(uri, new vscode.Range(e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character), e.newText);
      }
      const applied = await vscode.workspace.applyEdit(we);
      if (applied) await vscode.window.showTextDocument(doc, { preview: false });
      return applied ? { applied: true } : { applied: false, failureReason: "the editor refused the edit" };
    } finally {
      buttons?.dispose();
      content.forgetOlder(right, 8);
    }
  };
}
