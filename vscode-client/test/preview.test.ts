import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import type { ApplyWorkspaceEditParams } from "vscode-languageclient";
import { ask, firstChangedLine, makeApplyEditHandler, PREVIEW_OPEN, PreviewChoices, PreviewContent } from "../src/preview";

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

/** The diff opens as a tab (as VS Code does); returns its right-hand URI once it is open. */
function openDiffs(content: PreviewContent) {
  const seen: { left?: vscode.Uri; right?: vscode.Uri; text?: string; before?: string; options?: unknown; wrapped: number } = { wrapped: 0 };
  mock.commands.executeCommand.mockImplementation(async (id: string, _l: unknown, right: unknown, _t: unknown, options: unknown) => {
    if (id === "vscode.diff") {
      seen.left = _l as vscode.Uri;
      seen.right = right as vscode.Uri;
      seen.options = options;
      seen.text = content.provideTextDocumentContent(seen.right);
      seen.before = content.provideTextDocumentContent(seen.left);
      mock.tabGroupsState.tabs.push({ input: { original: _l, modified: right }, label: "k.py ↔ result" });
      mock.window.activeTextEditor = { document: { uri: right } };
    }
    if (id === "editor.action.toggleWordWrap") seen.wrapped++;
    return mock.registeredCommands.get(id)?.(_l, right);
  });
  return seen;
}

const flush = () => new Promise((r) => setTimeout(r, 0));

describe("preview before apply", () => {
  let content: PreviewContent;
  let choices: PreviewChoices;
  beforeEach(() => {
    mock.resetMock();
    mock.documents.set(URI, { uri: mock.Uri.parse(URI), version: 3, getText: () => TEXT, languageId: "python" });
    content = new PreviewContent();
    choices = new PreviewChoices();
  });

  it("shows the diff; Apply in its title bar applies, closes the diff and the notification", async () => {
    const seen = openDiffs(content);
    const next = vi.fn();
    const pending = makeApplyEditHandler(content, choices)(params(), next);
    await flush();
    await flush();
    expect(seen.text).toBe("def f(x):\n    return x + x\n");
    expect(seen.right!.scheme).toBe("geak-preview");
    // Both sides are snapshots; the diff opens at the changed line, with word wrap on.
    expect(seen.left!.scheme).toBe("geak-preview");
    expect(seen.before).toBe(TEXT);
    expect((seen.options as { selection: vscode.Range }).selection.start).toMatchObject({ line: 1, character: 0 });
    expect(seen.wrapped).toBe(1);
    // Named Apply / Discard in the status bar, for this preview.
    const named = mock.statusItems.map((i) => i.text);
    expect(named).toEqual(["$(check) Apply", "$(discard) Discard"]);
    expect(mock.statusItems[0].command).toMatchObject({ command: "geak.previewApply", arguments: [seen.right] });
    expect(mock.commands.executeCommand).toHaveBeenCalledWith("setContext", PREVIEW_OPEN, true);
    // The notification that stays until the choice: a cancellable progress notification.
    expect(mock.progressRuns).toHaveLength(1);
    expect(mock.progressRuns[0].options).toMatchObject({ title: "GEAK: Apply GEAK result (1.80x faster)", cancellable: true });
    expect(mock.progressRuns[0].reports).toEqual([{ message: ask(seen.right) }]);
    expect(ask(seen.right)).toMatch(/\[Apply\]\(command:geak\.previewApply\?.+\) or \[Discard\]\(command:geak\.previewDiscard\?.+\)/);
    expect(choices.decide("apply", seen.right)).toBe(true); // the title bar passes the diff's URI
    expect(await pending).toEqual({ applied: true });
    for (const item of mock.statusItems) expect(item.dispose).toHaveBeenCalled();
    expect(next).not.toHaveBeenCalled();
    expect(content.provideTextDocumentContent(seen.right!)).toBe(seen.text); // still readable
    const we = mock.workspace.applyEdit.mock.calls[0][0] as InstanceType<typeof mock.WorkspaceEdit>;
    expect(we.replaces).toHaveLength(1);
    expect(we.replaces[0].text).toBe("x + x");
    expect(we.replaces[0].range.start).toMatchObject({ line: 1, character: 11 });
    expect(mock.tabGroupsState.tabs).toHaveLength(0);
    expect(mock.commands.executeCommand).toHaveBeenLastCalledWith("setContext", PREVIEW_OPEN, false);
    expect(choices.decide("apply")).toBe(false); // nothing waits any more
  });

  it("Cancel in the notification, Discard in the title bar, or closing the diff: nothing applied, the server told", async () => {
    openDiffs(content);
    for (const how of ["cancel", "link", "discard", "close"] as const) {
      mock.progressRuns.length = 0;
      const pending = makeApplyEditHandler(content, choices)(params(), vi.fn());
      await flush();
      await flush();
      if (how === "cancel") mock.progressRuns[0].cancel.fire();
      else if (how === "link") {
        // The notification's link passes the URI as a string (command link arguments are JSON).
        const arg = JSON.parse(decodeURIComponent(/previewDiscard\?([^)]+)\)/.exec(String((mock.progressRuns[0].reports[0] as { message: string }).message))![1]));
        expect(choices.decide("discard", arg[0])).toBe(true);
      }
      else if (how === "discard") expect(choices.decide("discard")).toBe(true); // the palette: no URI
      else mock.closeTab(mock.tabGroupsState.tabs[0]);
      expect(await pending, how).toEqual({ applied: false, failureReason: "declined in the preview" });
      expect(mock.tabGroupsState.tabs, how).toHaveLength(0);
    }
    expect(mock.workspace.applyEdit).not.toHaveBeenCalled();
  });

  it("does not toggle word wrap where the diff wraps already, nor in another editor", async () => {
    const seen = openDiffs(content);
    mock.config["wordWrap"] = "on"; // the mock answers every section from one table
    const pending = makeApplyEditHandler(content, choices)(params(), vi.fn());
    await flush();
    await flush();
    expect(seen.wrapped).toBe(0);
    choices.decide("discard");
    await pending;
  });

  it("finds the first changed line", () => {
    expect(firstChangedLine("a\nb\nc\n", "a\nB\nc\n")).toBe(1);
    expect(firstChangedLine("a\nb\n", "a\nb\n")).toBe(0);
    expect(firstChangedLine("a\n", "a\nb\nc\n")).toBe(1);
  });

  it("refuses an edit made for another version of the document", async () => {
    const res = await makeApplyEditHandler(content, choices)(params(true, 2), vi.fn());
    expect(res.applied).toBe(false);
    expect(mock.progressRuns).toHaveLength(0);
  });

  it("passes edits that need no confirmation to the client library", async () => {
    const next = vi.fn(async () => ({ applied: true }));
    await makeApplyEditHandler(content, choices)(params(false), next);
    expect(next).toHaveBeenCalled();
    expect(mock.progressRuns).toHaveLength(0);
  });
});
