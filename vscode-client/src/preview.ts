/** Preview before apply: an edit from the server whose change annotation needs confirmation is
 * shown as a diff (current text against the result) and applied only when the user accepts.
 *
 * The choice stays on screen for as long as the diff is open: **Apply** and **Discard** are
 * buttons in the diff's title bar (commands geak.previewApply / geak.previewDiscard), and a
 * notification that says so stays until the choice is made (its Cancel discards). Closing the
 * diff discards. */

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
    const key = right instanceof vscode.Uri && right.scheme === PREVIEW_SCHEME
      ? right.toString() : this.order[this.order.length - 1];
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

export const ASK = "review the diff, then Apply (✓) or Discard (↺) at the top right of the diff; Cancel discards";

export function makeApplyEditHandler(content: PreviewContent, choices: PreviewChoices) {
  return async (params: ApplyWorkspaceEditParams, next: Next): Promise<ApplyWorkspaceEditResult> => {
    const ask = confirmation(params);
    if (!ask) return next(params, undefined);
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
    content.set(right, after);
    try {
      const name = uri.path.split("/").pop();
      const decided = choices.wait(right);
      await vscode.commands.executeCommand("vscode.diff", uri, right, `${name} ↔ ${ask.label}`, { preview: false });
      // A progress notification: it neither hides itself nor outlives the choice, as a message
      // with buttons would.
      void vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: `GEAK: ${ask.label}`, cancellable: true },
        async (progress, cancel) => {
          progress.report({ message: ASK });
          cancel.onCancellationRequested(() => choices.decide("discard", right));
          await decided;
        });
      const choice = await decided;
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
      content.forgetOlder(right);
    }
  };
}
