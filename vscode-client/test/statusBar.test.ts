import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import { trackProgress, type ProgressClient } from "../src/progress";
import { speedupText, StatusBar, type JobStatus } from "../src/statusBar";

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

  it("says a speedup with two decimals, and nothing for none", () => {
    expect(speedupText(1.4213)).toBe("1.42x");
    expect(speedupText(null)).toBeUndefined();
    expect(speedupText(undefined)).toBeUndefined();
  });

  const jobStatus = (over: Partial<JobStatus>): JobStatus => ({
    job: "job-1", token: "geak-j1", uri: "file:///k.py", name: "add_relu", kind: "optimize", state: "running",
    stage: "iteration", message: "", evaluated: 1, verified: 1, done: 1, total: 3, bestSpeedup: null, percentage: null, ...over,
  });

  it("shows runner and device, then the running job with its best speedup from geak/jobStatus, then idle again", () => {
    const status = new StatusBar({ ...base, runnerUrl: "http://gpu-box:8765", device: "cuda" });
    status.setState("running");
    expect(status.text).toBe("$(rocket) GEAK: gpu-box:8765 · cuda");
    status.status(jobStatus({ state: "queued", stage: "", message: "waiting for a free job slot" }));
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing add_relu (queued)");
    status.status(jobStatus({ message: "iteration 1/3: 1 of 1 verified, best verified 1.31x" }));
    // The message is for people: a speedup written in it is not read.
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing add_relu");
    status.status(jobStatus({ bestSpeedup: 1.3149 }));
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing add_relu — best 1.31x");
    status.status(jobStatus({ done: 2, bestSpeedup: null, message: "iteration 2/3" }));
    expect(status.text).toContain("best 1.31x");
    expect(mock.statusItems[0].tooltip).toContain("optimizing add_relu: iteration 2/3");
    status.status(jobStatus({ state: "done", bestSpeedup: 1.3149 }));
    expect(status.text).toBe("$(rocket) GEAK: gpu-box:8765 · cuda");
  });

  it("keys jobs by id: two at once, the last named; one ending leaves the other", () => {
    const status = new StatusBar(base);
    status.setState("running");
    status.status(jobStatus({ job: "job-3", name: "f", bestSpeedup: 2.5 }));
    status.status(jobStatus({ job: "job-4", name: "g", kind: "benchmark" }));
    expect(status.text).toBe("$(sync~spin) GEAK: benchmarking g (+1)");
    status.status(jobStatus({ job: "job-4", name: "g", kind: "benchmark", state: "cancelled" }));
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing f — best 2.50x");
    status.status(jobStatus({ job: "job-3", name: "f", state: "failed" }));
    expect(status.text).toBe("$(rocket) GEAK: local · auto");
    // A job's status with no progress token (a client without window progress) shows the same.
    status.status(jobStatus({ job: "job-5", token: null, name: "h" }));
    expect(status.text).toBe("$(sync~spin) GEAK: optimizing h");
    status.setState("stopped");
    expect(status.text).toBe("$(circle-slash) GEAK");
  });

  it("the progress notification shows the job's reports and ends with it", () => {
    const f = fakeClient();
    const ended: string[] = [];
    trackProgress(f.client, (_t, title, message) => ended.push(`${title}: ${message}`));
    f.create("geak-j1");
    f.send("geak-j1", { kind: "begin", title: "GEAK: optimizing add_relu", cancellable: true, message: "starting", percentage: 0 });
    f.send("geak-j1", { kind: "report", message: "iteration 1/3: 1 of 1 verified", percentage: 40 });
    expect(mock.progressRuns[0].reports).toContainEqual({ message: "iteration 1/3: 1 of 1 verified", increment: 40 });
    f.send("geak-j1", { kind: "end", message: "applied: 1.31x faster" });
    expect(ended).toEqual(["GEAK: optimizing add_relu: applied: 1.31x faster"]);
    expect(f.progress.has("geak-j1")).toBe(false);
  });

  it("cancelling the notification cancels the job on the server", async () => {
    const f = fakeClient();
    trackProgress(f.client);
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
