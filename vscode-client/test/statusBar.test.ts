import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import { trackProgress, type ProgressClient } from "../src/progress";
import { bestSpeedup, StatusBar } from "../src/statusBar";

const mock = vscode as unknown as typeof import("./vscode.mock");
const base = { interpreter: "", device: "auto" as const, strategy: "auto", provider: null, model: null, runnerUrl: "local" };

function fakeClient() {
  let create: ((p: { token: string }) => void) | undefined;
  const progress = new Map<string, (v: unknown) => void>();
  const sendNotification = vi.fn(async () => undefined);
  const client = {
    onRequest: (_t: unknown, h: (p: { token: string }) => void) => { create = h; return { dispose() {} }; },
    onProgress: (_t: unknown, token: string, h: (v: unknown) => void) => { progress.set(token, h); return { dispose: () => progress.delete(token) }; },
    sendNotification,
  } as unknown as ProgressClient;
  return { client, create: (token: string) => create!({ token }), send: (token: string, v: unknown) => progress.get(token)!(v), sendNotification, progress };
}

describe("the status bar", () => {
  beforeEach(() => mock.resetMock());

  it("reads the best verified speedup from the server's progress", () => {
    expect(bestSpeedup("iteration 2/3: 2 of 4 verified, best verified 1.42x")).toBe("1.42x");
    expect(bestSpeedup("tuning launch settings ...")).toBeUndefined();
  });

  it("shows runner and device, then the running job with its best speedup, then idle again", async () => {
    const status = new StatusBar({ ...base, runnerUrl: "http://gpu-box:8765", device: "cuda" });
    status.setState("running");
    expect(status.text).toBe("$(rocket) GEAK: gpu-box:8765 · cuda");
    const f = fakeClient();
    trackProgress(f.client, status);
    f.create("geak-j1");
    f.send("geak-j1", { kind: "begin", title: "GEAK: optimizing add_relu", cancellable: true, message: "starting", percentage: 0 });
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing add_relu");
    f.send("geak-j1", { kind: "report", message: "iteration 1/3: 1 of 1 verified, best verified 1.31x", percentage: 40 });
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing add_relu — best 1.31x");
    f.send("geak-j1", { kind: "report", message: "iteration 2/3: 0 of 1 verified", percentage: 70 });
    expect(status.text).toContain("best 1.31x");
    expect(mock.progressRuns[0].reports).toContainEqual({ message: "iteration 1/3: 1 of 1 verified, best verified 1.31x", increment: 40 });
    f.send("geak-j1", { kind: "end", message: "applied: 1.31x faster" });
    expect(status.text).toBe("$(rocket) GEAK: gpu-box:8765 · cuda");
    expect(f.progress.has("geak-j1")).toBe(false);
  });

  it("cancelling the notification cancels the job on the server", async () => {
    const status = new StatusBar(base);
    status.setState("running");
    const f = fakeClient();
    trackProgress(f.client, status);
    f.create("geak-j2");
    f.send("geak-j2", { kind: "begin", title: "GEAK: benchmarking f", cancellable: true });
    expect(mock.progressRuns[0].options).toMatchObject({ cancellable: true, location: mock.ProgressLocation.Notification });
    mock.progressRuns[0].cancel.fire();
    expect(f.sendNotification).toHaveBeenCalledWith(expect.objectContaining({ method: "window/workDoneProgress/cancel" }), { token: "geak-j2" });
  });

  it("says when the server is not running", () => {
    const status = new StatusBar(base);
    status.setState("failed");
    expect(status.text).toBe("$(warning) GEAK");
    expect(mock.statusItems[0].command).toBe("geak.showLog");
  });
});
