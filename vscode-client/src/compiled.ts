/** The compiled view: what the compiler made of a kernel (SASS, PTX, AMDGCN, Triton's IRs), as a
 * read-only document beside the source, from the server's geak.compiledCode. Opened from the
 * "GEAK: compiled code" code lens on each @triton.jit kernel, the link in a kernel line's hover,
 * or GEAK: Show Compiled Code. The stage and the GPU are switched from the view's title bar.
 *
 * The cursor is followed both ways: on a source line, the listing's lines that came from it are
 * highlighted (and scrolled into view); on a listing line, its source line is. The source line
 * also says how many instructions it compiled to. The view is compiled again when the source
 * is saved. */

import * as vscode from "vscode";
import type { CompiledDoc } from "./wire";

export const COMPILED_SCHEME = "geak-compiled";

export interface CompiledTarget {
  uri: string;
  name: string;
  arch?: string;
  stage?: string;
}

/** geak.compiledCode's answer (its type is generated from the wire schema). */
export type { CompiledDoc };

export type FetchCompiled = (target: CompiledTarget) => Promise<CompiledDoc | { error: string } | undefined>;

const STAGE_NAMES: Record<string, string> = { sass: "SASS", ptx: "PTX", amdgcn: "AMDGCN", llir: "LLVM IR", ttir: "TTIR", ttgir: "TTGIR" };

/** The view's URI: its name reads as the tab's title; the query holds what to ask for. */
export function viewUri(d: { uri: string; name: string; arch: string; stage: string }): vscode.Uri {
  const file = d.uri.split("/").pop() ?? "source";
  const query = JSON.stringify({ uri: d.uri, name: d.name, arch: d.arch, stage: d.stage });
  return vscode.Uri.from({ scheme: COMPILED_SCHEME, path: `/${d.name} ${d.arch} ${STAGE_NAMES[d.stage] ?? d.stage} (${decodeURIComponent(file)})`, query });
}

export function targetOf(view: vscode.Uri): CompiledTarget | undefined {
  try {
    const t = JSON.parse(view.query) as CompiledTarget;
    return typeof t.uri === "string" && typeof t.name === "string" ? t : undefined;
  } catch {
    return undefined;
  }
}

/** The source lines of the statement holding a line: [first, last]. */
export function statementOf(doc: CompiledDoc, sourceLine: number): [number, number] {
  return (doc.spans ?? []).find(([a, b]) => a <= sourceLine && sourceLine <= b) ?? [sourceLine, sourceLine];
}

/** The listing's lines that came from a source line (from any line of its statement). */
export function listingLinesFor(doc: CompiledDoc, sourceLine: number): number[] {
  const [a, b] = statementOf(doc, sourceLine);
  const out: number[] = [];
  doc.lines.forEach((src, i) => { if (src >= a && src <= b) out.push(i); });
  return out;
}

/** The source line a listing line came from. */
export function sourceLineFor(doc: CompiledDoc, listingLine: number): number | undefined {
  const src = doc.lines[listingLine];
  return src === undefined || src < 0 ? undefined : src;
}

/** Instructions (not the '#' source markers) among listing lines. */
export function instructionCount(doc: CompiledDoc, listingLines: number[]): number {
  const text = doc.text.split("\n");
  return listingLines.filter((i) => !(text[i] ?? "").startsWith("#")).length;
}

export class CompiledViews implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly docs = new Map<string, CompiledDoc>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;
  private readonly listingMark: vscode.TextEditorDecorationType;
  private readonly sourceMark: vscode.TextEditorDecorationType;
  private readonly watches: vscode.Disposable[] = [];

  constructor(private readonly fetch: FetchCompiled, private readonly cursorTarget: () => Promise<CompiledTarget | undefined>) {
    const highlight = { isWholeLine: true, backgroundColor: new vscode.ThemeColor("editor.rangeHighlightBackground") };
    this.listingMark = vscode.window.createTextEditorDecorationType(highlight);
    this.sourceMark = vscode.window.createTextEditorDecorationType(highlight);
    this.watches.push(
      vscode.window.onDidChangeTextEditorSelection((e) => this.follow(e.textEditor)),
      vscode.workspace.onDidSaveTextDocument((d) => void this.refresh(d.uri.toString())),
    );
  }

  provideTextDocumentContent(uri: vscode.Uri): string | Thenable<string> {
    const doc = this.docs.get(uri.toString());
    if (doc) return doc.text;
    const target = targetOf(uri); // a view restored after a reload: ask again
    if (!target) return "GEAK: not a compiled view";
    return this.load(target).then((d) => ("error" in d && !("text" in d) ? `GEAK: ${d.error}` : (d as CompiledDoc).text));
  }

  /** geak.showCompiled [{uri, name, arch?, stage?}] (or the target at the cursor): beside the
   * source, or in ``column`` (another stage or GPU replaces the view where it is). */
  async show(arg?: unknown, column?: vscode.ViewColumn): Promise<void> {
    const a = (Array.isArray(arg) ? arg[0] : arg) as Partial<CompiledTarget> | undefined;
    const target = a && typeof a.uri === "string" && typeof a.name === "string"
      ? { uri: a.uri, name: a.name, arch: a.arch, stage: a.stage } : await this.cursorTarget();
    if (!target) {
      void vscode.window.showWarningMessage("GEAK: put the cursor on a Triton kernel or the function that launches it first.");
      return;
    }
    const got = await this.load(target);
    if ("error" in got && !("text" in got)) {
      void vscode.window.showWarningMessage(got.error);
      return;
    }
    const doc = got as CompiledDoc;
    const view = viewUri(doc);
    const shown = await vscode.workspace.openTextDocument(view);
    await vscode.window.showTextDocument(shown, { viewColumn: column ?? vscode.ViewColumn.Beside, preview: true,
      preserveFocus: column === undefined });
    const source = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === doc.uri);
    if (source) this.follow(source);
  }

  /** Title-bar buttons of the view: another stage, or another GPU (its default stage). */
  async switchStage(view?: vscode.Uri): Promise<void> {
    const doc = this.current(view);
    if (!doc) return;
    const stage = await vscode.window.showQuickPick(doc.stages.map((s) => ({ label: STAGE_NAMES[s] ?? s, stage: s, picked: s === doc.stage })),
      { title: `GEAK: compile stage for ${doc.arch}` });
    if (stage) await this.show({ uri: doc.uri, name: doc.name, arch: doc.arch, stage: stage.stage }, this.column(doc));
  }

  async switchArch(view?: vscode.Uri): Promise<void> {
    const doc = this.current(view);
    if (!doc) return;
    const arch = await vscode.window.showQuickPick(doc.archs.map((s) => ({ label: s, picked: s === doc.arch })),
      { title: "GEAK: compile for" });
    if (arch) await this.show({ uri: doc.uri, name: doc.name, arch: arch.label }, this.column(doc));
  }

  /** Where the view of ``doc`` is on screen. */
  private column(doc: CompiledDoc): vscode.ViewColumn | undefined {
    const key = viewUri(doc).toString();
    return vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === key)?.viewColumn;
  }

  private current(view?: vscode.Uri): CompiledDoc | undefined {
    const uri = view instanceof vscode.Uri ? view : vscode.window.activeTextEditor?.document.uri;
    return uri ? this.docs.get(uri.toString()) : undefined;
  }

  private async load(target: CompiledTarget): Promise<CompiledDoc | { error: string }> {
    const what = `GEAK: compiling ${target.name}${target.arch ? ` for ${target.arch}` : ""}`;
    const got = await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: what }, () => this.fetch(target));
    if (!got) return { error: "GEAK: the language server is not running; see the GEAK log." };
    if (!("text" in got)) return got;
    const view = viewUri(got);
    this.docs.set(view.toString(), got);
    this.emitter.fire(view);
    return got;
  }

  /** The source was saved: compile its open views again. */
  private async refresh(sourceUri: string): Promise<void> {
    const open = new Set(vscode.workspace.textDocuments.map((d) => d.uri.toString()));
    for (const [key, doc] of [...this.docs]) {
      if (doc.uri !== sourceUri) continue;
      if (!open.has(key)) {
        this.docs.delete(key);
        continue;
      }
      await this.load({ uri: doc.uri, name: doc.name, arch: doc.arch, stage: doc.stage });
    }
  }

  /** The cursor moved in ``editor``: mark the matching lines in the other side. */
  follow(editor: vscode.TextEditor): void {
    const uri = editor.document.uri;
    const line = editor.selection.active.line;
    if (uri.scheme === COMPILED_SCHEME) {
      const doc = this.docs.get(uri.toString());
      if (!doc) return;
      const src = sourceLineFor(doc, line);
      const listing = src === undefined ? [] : listingLinesFor(doc, src);
      editor.setDecorations(this.listingMark, listing.map((i) => new vscode.Range(i, 0, i, 0)));
      for (const ed of vscode.window.visibleTextEditors.filter((e) => e.document.uri.toString() === doc.uri)) {
        this.markSource(ed, doc, src, listing);
        if (src === undefined) continue;
        const [first, last] = statementOf(doc, src);
        ed.revealRange(new vscode.Range(first, 0, last, 0), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      }
      return;
    }
    if (uri.scheme !== "file") return;
    for (const ed of vscode.window.visibleTextEditors.filter((e) => e.document.uri.scheme === COMPILED_SCHEME)) {
      const doc = this.docs.get(ed.document.uri.toString());
      if (!doc || doc.uri !== uri.toString()) continue;
      const listing = listingLinesFor(doc, line);
      ed.setDecorations(this.listingMark, listing.map((i) => new vscode.Range(i, 0, i, 0)));
      if (listing.length) ed.revealRange(new vscode.Range(listing[0], 0, listing[0], 0), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
      this.markSource(editor, doc, listing.length ? line : undefined, listing);
    }
  }

  private markSource(editor: vscode.TextEditor, doc: CompiledDoc, src: number | undefined, listing: number[]): void {
    if (src === undefined) {
      editor.setDecorations(this.sourceMark, []);
      return;
    }
    const n = instructionCount(doc, listing);
    const [first, last] = statementOf(doc, src);
    editor.setDecorations(this.sourceMark, [{
      range: new vscode.Range(first, 0, last, 0),
      renderOptions: { after: { contentText: `  ◀ ${n} ${STAGE_NAMES[doc.stage] ?? doc.stage} instruction${n === 1 ? "" : "s"} (${doc.arch})`,
        color: new vscode.ThemeColor("editorCodeLens.foreground"), fontStyle: "italic" } },
    }]);
  }

  dispose(): void {
    for (const w of this.watches) w.dispose();
    this.listingMark.dispose();
    this.sourceMark.dispose();
    this.emitter.dispose();
  }
}
