/** Applying LSP text edits to a string (pure): the preview's "after" text, and the end-to-end
 * test's in-memory document. */

export interface Pos { line: number; character: number }
export interface Edit { range: { start: Pos; end: Pos }; newText: string }

/** Offset of an LSP position (UTF-16 code units, as JavaScript strings count). */
export function offsetAt(text: string, pos: Pos): number {
  let line = 0;
  let i = 0;
  while (line < pos.line) {
    const nl = text.indexOf("\n", i);
    if (nl < 0) return text.length;
    i = nl + 1;
    line++;
  }
  const eol = text.indexOf("\n", i);
  const end = eol < 0 ? text.length : eol;
  return Math.min(i + pos.character, end);
}

/** Apply edits made against ``text`` (non-overlapping, any order), as LSP specifies. */
export function applyTextEdits(text: string, edits: readonly Edit[]): string {
  const spans = edits
    .map((e, n) => ({ s: offsetAt(text, e.range.start), e: offsetAt(text, e.range.end), t: e.newText, n }))
    .sort((a, b) => a.s - b.s || a.n - b.n);
  for (let k = 1; k < spans.length; k++) {
    if (spans[k].s < spans[k - 1].e) throw new Error("overlapping text edits");
  }
  let out = "";
  let at = 0;
  for (const sp of spans) {
    out += text.slice(at, sp.s) + sp.t;
    at = sp.e;
  }
  return out + text.slice(at);
}
