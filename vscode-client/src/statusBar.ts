/** The status bar item: runner and device when idle; the running job and its best verified
 * speedup so far while one runs (from the server's geak/jobStatus). Clicking it shows the log. */

import * as vscode from "vscode";
import type { ClientSettings } from "./settings";

export const JOB_STATUS = "geak/jobStatus";

/** geak/jobStatus: where a job stands, as numbers (sent at each change by a server that offers
 * ServerCapabilities.experimental.geakJobStatus). */
export interface JobStatus {
  job: string;
  token?: string | null;
  uri: string;
  name: string;
  kind: string;
  state: "queued" | "running" | "done" | "failed" | "cancelled";
  stage: string;
  message: string;
  evaluated: number;
  verified: number;
  done: number;
  total?: number | null;
  bestSpeedup?: number | null;
  percentage?: number | null;
}

export interface JobView {
  title: string;
  message: string;
  best?: string;
}

/** A speedup as the status bar shows it: 1.4213 -> "1.42x". */
export function speedupText(x: number | null | undefined): string | undefined {
  return typeof x === "number" && Number.isFinite(x) ? `${x.toFixed(2)}x` : undefined;
}

export function runnerText(s: ClientSettings): string {
  if (!s.runnerUrl || s.runnerUrl === "local") return "local";
  try {
    const u = new URL(s.runnerUrl);
    return u.protocol === "file:" ? "spool" : u.host;
  } catch {
    return s.runnerUrl;
  }
}

export function statusText(s: ClientSettings, jobs: JobView[], state: "starting" | "running" | "stopped" | "failed"): { text: string; tooltip: string } {
  const where = `${runnerText(s)} · ${s.device}`;
  if (state === "failed") return { text: "$(warning) GEAK", tooltip: "GEAK: the server is not running; click for the log" };
  if (state === "starting") return { text: "$(loading~spin) GEAK", tooltip: `GEAK: starting (${where})` };
  if (state === "stopped") return { text: "$(circle-slash) GEAK", tooltip: "GEAK: stopped" };
  if (jobs.length === 0) {
    const strategy = s.strategy === "auto" ? (s.provider && s.model ? "llm" : "tune") : s.strategy;
    return { text: `$(rocket) GEAK: ${where}`, tooltip: `GEAK: runner ${runnerText(s)}, device ${s.device}, strategy ${strategy}` };
  }
  const j = jobs[jobs.length - 1];
  const name = j.title.replace(/^GEAK:\s*/, "");
  const more = jobs.length > 1 ? ` (+${jobs.length - 1})` : "";
  return {
    text: `$(sync~spin) GEAK: ${name}${j.best ? ` — best ${j.best}` : ""}${more}`,
    tooltip: `${jobs.map((x) => `${x.title}: ${x.message}`).join("\n")}\nrunner ${where}`,
  };
}

export class StatusBar implements vscode.Disposable {
  readonly item: vscode.StatusBarItem;
  private readonly jobs = new Map<string, JobView>();
  /** The best verified speedup per progress token, from geak/jobStatus (which may come first). */
  private readonly best = new Map<string, string>();
  private state: "starting" | "running" | "stopped" | "failed" = "starting";

  constructor(private settings: ClientSettings) {
    this.item = vscode.window.createStatusBarItem("geak.status", vscode.StatusBarAlignment.Left, 10);
    this.item.name = "GEAK";
    this.item.command = "geak.showLog";
    this.render();
    this.item.show();
  }

  setSettings(s: ClientSettings): void {
    this.settings = s;
    this.render();
  }

  setState(state: "starting" | "running" | "stopped" | "failed"): void {
    this.state = state;
    if (state !== "running") this.jobs.clear();
    this.render();
  }

  begin(token: string, title: string, message = ""): void {
    this.jobs.set(token, { title, message, best: this.best.get(token) });
    this.render();
  }

  report(token: string, message: string | undefined): void {
    const j = this.jobs.get(token);
    if (!j || message === undefined) return;
    j.message = message;
    this.render();
  }

  end(token: string): void {
    this.jobs.delete(token);
    this.best.delete(token);
    this.render();
  }

  /** geak/jobStatus: the job's best verified speedup so far. */
  status(s: JobStatus): void {
    if (!s.token) return;
    if (s.state !== "queued" && s.state !== "running") {
      this.best.delete(s.token);
      return;
    }
    const best = speedupText(s.bestSpeedup);
    if (!best) return;
    this.best.set(s.token, best);
    const j = this.jobs.get(s.token);
    if (j) {
      j.best = best;
      this.render();
    }
  }

  get text(): string {
    return this.item.text;
  }

  private render(): void {
    const { text, tooltip } = statusText(this.settings, [...this.jobs.values()], this.state);
    this.item.text = text;
    this.item.tooltip = tooltip;
  }

  dispose(): void {
    this.item.dispose();
  }
}
