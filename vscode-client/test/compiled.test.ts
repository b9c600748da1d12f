import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import { COMPILED_SCHEME, type CompiledDoc, CompiledViews, instructionCount, listingLinesFor, sourceLineFor, statementOf, targetOf, viewUri } from "../src/compiled";

const mock = vscode as unknown as typeof import("./vscode.mock");
const SRC = "file:///proj/k.py";

/** A listing as geak.compiledCode answers it: header lines (-1), then runs under source lines 11 and 12. */
function doc(over: Partial<CompiledDoc> = {}): CompiledDoc {
  const text = ["GEAK: add_relu_kernel ...", "", "== add_relu_kernel sm_90 sass", "# k.py:12  x = tl.load(x_ptr + offs)",
    "    @!P0 LDG.E R2, desc[UR4][R4.64]", "    IMAD R3, R2, 0x4, RZ", "# k.py:13  y = tl.load(y_ptr + offs)", "    LDG.E R6, desc[UR4][R8.64]"].join("\n");
  return { uri: SRC, name: "add_relu_kernel", symbol: "add_relu", path: "k.py", arch: "sm_90", stage: "sass", text,
    lines: [-1, -1, -1, 11, 11, 11, 12, 12], spans: [], kernels: ["add_relu_kernel"], error: null,
    archs: ["sm_80", "sm_90", "gfx90a", "gfx942"], stages: ["ttir", "ttgir", "llir", "ptx", "sass"], ...over };
}

function setup(answer: CompiledDoc | { error: string } | undefined = doc()) {
  const fetch = vi.fn(async (_t: unknown) => answer);
  const views = new CompiledViews(fetch, async () => ({ uri: SRC, name: "add_relu_kernel" }));
  mock.workspace.openTextDocument.mockImplementation((async (u: unknown) => ({ uri: u })) as never);
  return { fetch, views };
}

describe("the compiled view", () => {
  beforeEach(() => mock.resetMock());

  it("maps listing lines to source lines and back, and counts instructions without the markers", () => {
    const d = doc();
    expect(listingLinesFor(d, 11)).toEqual([3, 4, 5]);
    expect(sourceLineFor(d, 4)).toBe(11);
    expect(sourceLineFor(d, 0)).toBeUndefined();
    expect(instructionCount(d, listingLinesFor(d, 11))).toBe(2);
  });

  it("treats a statement over several lines as one: the cursor on any of them finds its instructions", () => {
    // `x = tl.load(` on source line 11, its mask on line 12: the compiler gave the load line 12.
    const d = doc({ spans: [[11, 12]] });
    expect(statementOf(d, 12)).toEqual([11, 12]);
    expect(statementOf(d, 13)).toEqual([13, 13]);
    expect(listingLinesFor(d, 11)).toEqual([3, 4, 5, 6, 7]);
    expect(listingLinesFor(d, 12)).toEqual([3, 4, 5, 6, 7]);
  });

  it("names the view after the kernel, GPU and stage, and keeps what to ask for in its URI", () => {
    const u = viewUri(doc());
    expect(u.scheme).toBe(COMPILED_SCHEME);
    expect(u.path).toBe("/add_relu_kernel sm_90 SASS (k.py)");
    expect(targetOf(u)).toEqual({ uri: SRC, name: "add_relu_kernel", arch: "sm_90", stage: "sass" });
  });

  it("opens beside the source without taking the focus, and follows the cursor both ways", async () => {
    const { fetch, views } = setup();
    const source = mock.mockEditor(vscode.Uri.parse(SRC), 11);
    mock.window.visibleTextEditors = [source];
    await views.show([{ uri: SRC, name: "add_relu_kernel" }]);
    expect(fetch).toHaveBeenCalledWith({ uri: SRC, name: "add_relu_kernel", arch: undefined, stage: undefined });
    const [shown, opts] = mock.window.showTextDocument.mock.calls[0] as [{ uri: vscode.Uri }, Record<string, unknown>];
    expect(shown.uri.toString()).toBe(viewUri(doc()).toString());
    expect(opts).toMatchObject({ viewColumn: vscode.ViewColumn.Beside, preserveFocus: true });
    expect(views.provideTextDocumentContent(shown.uri)).toBe(doc().text);

    const listing = mock.mockEditor(shown.uri, 0);
    mock.window.visibleTextEditors = [source, listing];
    views.follow(source as never); // the cursor on source line 12 (0-based 11)
    const marked = [...listing.decorations.values()][0] as vscode.Range[];
    expect(marked.map((r) => r.start.line)).toEqual([3, 4, 5]);
    expect(listing.revealed[0].start.line).toBe(3);
    const after = ([...source.decorations.values()][0] as Array<{ renderOptions: { after: { contentText: string } } }>)[0];
    expect(after.renderOptions.after.contentText).toContain("2 SASS instructions (sm_90)");

    listing.selection = { active: new vscode.Position(7, 0) }; // the cursor on an LDG of source line 13
    views.follow(listing as never);
    expect((source.revealed.at(-1) as vscode.Range).start.line).toBe(12);
    expect(([...listing.decorations.values()][0] as vscode.Range[]).map((r) => r.start.line)).toEqual([6, 7]);
  });

  it("says why when there is nothing to show, and switches the stage from the title bar", async () => {
    const { fetch, views } = setup({ error: "GEAK: no function in this file launches lonely_kernel[grid](...)" });
    await views.show([{ uri: SRC, name: "lonely_kernel" }]);
    expect(mock.window.showWarningMessage).toHaveBeenCalledWith("GEAK: no function in this file launches lonely_kernel[grid](...)");
    expect(mock.window.showTextDocument).not.toHaveBeenCalled();

    fetch.mockResolvedValue(doc());
    await views.show([{ uri: SRC, name: "add_relu_kernel" }]);
    const onScreen = mock.mockEditor(viewUri(doc()));
    onScreen.viewColumn = 2;
    mock.window.visibleTextEditors = [onScreen];
    fetch.mockResolvedValue(doc({ stage: "ptx", text: "ld.global", lines: [-1], spans: [] }));
    mock.window.showQuickPick.mockResolvedValueOnce({ label: "PTX", stage: "ptx" });
    await views.switchStage(viewUri(doc()));
    expect(fetch).toHaveBeenLastCalledWith({ uri: SRC, name: "add_relu_kernel", arch: "sm_90", stage: "ptx" });
    // It replaces the view where it is, and takes the focus there.
    expect(mock.window.showTextDocument.mock.calls.at(-1)![1]).toMatchObject({ viewColumn: 2, preserveFocus: false });
    mock.window.showQuickPick.mockResolvedValueOnce({ label: "gfx942" });
    await views.switchArch(viewUri(doc()));
    expect(fetch).toHaveBeenLastCalledWith({ uri: SRC, name: "add_relu_kernel", arch: "gfx942" });
  });

  it("compiles its open views again when the source is saved", async () => {
    const { fetch, views } = setup();
    await views.show([{ uri: SRC, name: "add_relu_kernel" }]);
    mock.workspace.textDocuments = [{ uri: viewUri(doc()) }];
    mock.saveEmitter.fire({ uri: vscode.Uri.parse(SRC) });
    await vi.waitFor(() => expect(fetch).toHaveBeenCalledTimes(2));
    expect(fetch).toHaveBeenLastCalledWith({ uri: SRC, name: "add_relu_kernel", arch: "sm_90", stage: "sass" });
  });
});
