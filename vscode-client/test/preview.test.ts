import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import type { ApplyWorkspaceEditParams } from "vscode-languageclient";
import { APPLY, DISCARD, makeApplyEditHandler, PreviewContent } from "../src/preview";

const mock = vscode as unknown as typeof import("./vscode.mock");
const URI = "file:///proj/k.py";
const TEXT = "def f(x):\n    return x * 2\n";

function params(confirm = true, version = 3): ApplyWorkspaceEditParams {
  return {
    label: "Apply GEAK result (1.80x faster)",
    edit: {
      documentChanges: [{ textDocument: { uri: URI, version }, edits: [
        { range: { start: { line: 1, character: 11 }, end: { line: 1, character: 16 } }, newText: "x + x", annotationId: "geak-result" },
      ] }],
      changeAnnotations: { "geak-result": { label: "Apply GEAK result (1.80x faster)", needsConfirmation: confirm, description: "GEAK replaces f" } },
    },
  } as ApplyWorkspaceEditParams;
}

describe("preview before apply", () => {
  let content: PreviewContent;
  beforeEach(() => {
    mock.resetMock();
    mock.documents.set(URI, { uri: mock.Uri.parse(URI), version: 3, getText: () => TEXT, languageId: "python" });
    content = new PreviewContent();
  });

  it("shows the diff and applies only when accepted", async () => {
    let shown = "";
    let rightUri: vscode.Uri | undefined;
    mock.commands.executeCommand.mockImplementation(async (id: string, _l: unknown, right: unknown) => {
      if (id === "vscode.diff") {
        rightUri = right as vscode.Uri;
        shown = content.provideTextDocumentContent(rightUri);
      }
    });
    mock.window.showInformationMessage.mockResolvedValue(APPLY);
    const next = vi.fn();
    const res = await makeApplyEditHandler(content)(params(), next);
    expect(shown).toBe("def f(x):\n    return x + x\n");
    expect(res).toEqual({ applied: true });
    expect(next).not.toHaveBeenCalled();
    expect(rightUri!.scheme).toBe("geak-preview");
    expect(content.provideTextDocumentContent(rightUri!)).toBe(shown); // the open diff stays readable
    const we = mock.workspace.applyEdit.mock.calls[0][0] as InstanceType<typeof mock.WorkspaceEdit>;
    expect(we.replaces).toHaveLength(1);
    expect(we.replaces[0].text).toBe("x + x");
    expect(we.replaces[0].range.start).toMatchObject({ line: 1, character: 11 });
  });

  it("applies nothing when declined or dismissed, and tells the server", async () => {
    for (const answer of [DISCARD, undefined]) {
      mock.workspace.applyEdit.mockClear();
      mock.window.showInformationMessage.mockResolvedValue(answer);
      const res = await makeApplyEditHandler(content)(params(), vi.fn());
      expect(res.applied).toBe(false);
      expect(res.failureReason).toContain("declined");
      expect(mock.workspace.applyEdit).not.toHaveBeenCalled();
    }
  });

  it("refuses an edit made for another version of the document", async () => {
    const res = await makeApplyEditHandler(content)(params(true, 2), vi.fn());
    expect(res.applied).toBe(false);
    expect(mock.window.showInformationMessage).not.toHaveBeenCalled();
  });

  it("passes edits that need no confirmation to the client library", async () => {
    const next = vi.fn(async () => ({ applied: true }));
    await makeApplyEditHandler(content)(params(false), next);
    expect(next).toHaveBeenCalled();
    expect(mock.window.showInformationMessage).not.toHaveBeenCalled();
  });
});
