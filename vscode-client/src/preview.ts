/** Preview before apply: an edit from the server whose change annotation needs confirmation is
 * shown as a diff (current text against the result) and applied only when the user accepts. */

import * as vscode from "vscode";
import type { ApplyWorkspaceEditParams, ApplyWorkspaceEditResult, TextDocumentEdit, TextEdit } from "vscode-languageclient";
import { applyTextEdits } from "./textEdits";

export const PREVIEW_SCHEME = "geak-preview";

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

export const APPLY = "Apply";
export const DISCARD = "Discard";

export function makeApplyEditHandler(content: PreviewContent) {
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
      await vscode.commands.executeCommand("vscode.diff", uri, right, `${name} ↔ ${ask.label}`, { preview: true });
      const choice = await vscode.window.showInformationMessage(
        ask.label + (ask.description ? ` — ${ask.description}` : ""), APPLY, DISCARD);
      if (choice !== APPLY) return { applied: false, failureReason: "declined in the preview" };
      if (doc.version !== (version ?? doc.version)) {
        return { applied: false, failureReason: "the document changed while the preview was open" };
      }
      const we = new vscode.WorkspaceEdit();
      for (const e of edits) {
        we.replace(uri, new vscode.Range(e.range.start.line, e.range.start.character, e.range.end.line, e.range.end.character), e.newText);
      }
      const applied = await vscode.workspace.applyEdit(we);
      return applied ? { applied: true } : { applied: false, failureReason: "the editor refused the edit" };
    } finally {
      content.forgetOlder(right);
    }
  };
}
