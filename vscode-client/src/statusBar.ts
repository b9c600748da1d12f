/** The status bar item: runner and device when idle; the running jobs, the last one named with
 * its best verified speedup so far, while jobs run. Driven by the server's geak/jobStatus alone,
 * keyed by job id (the progress notifications are for people). Clicking it shows the log. */

import * as vscode from "vscode";
import type { ClientSettings } from "./settings";
import type { JobStatus } from "./wire";

export const JOB_STATUS = "geak/jobStatus";

/** geak/jobStatus (its type is generated from the wire schema). */
export type { JobStatus };

export interface JobView {
  title: string;
  message: string;
  best?: string;
}

/** A job as the status bar says it: "optimizing add_relu", its last message, its best speedup. */
export function jobView(s: JobStatus): JobView {
  const verb = s.kind === "benchmark" ? "benchmarking" : "optimizing";
  return { title: `${verb} ${s.name}${s.state === "queued" ? " (queued)" : ""}`, message: s.message, best: speedupText(s.bestSpeedup) };
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
  const more = jobs.length > 1 ? ` (+${jobs.length - 1})` : "";
  return {
    text: `$(sync~spin) GEAK: ${j.title}${j.best ? ` — best ${j.best}` : ""}${more}`,
    tooltip: `${jobs.map((x) => `${x.title}: ${x.message}`).join("\n")}\nrunner ${where}`,
  };
}

export class StatusBar implements vscode.Disposable {
  readonly item: vscode.StatusBarItem;
  /** Queued and running jobs by job id, in the order they started. */
  private readonly jobs = new Map<string, JobView>();
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

  /** geak/jobStatus: a job started, moved on, or ended. A best speedup once seen stays shown
   * while the job runs (a later status without one does not take it back). */
  status(s: JobStatus): void {
    if (s.state !== "queued" && s.state !== "running") {
      this.jobs.delete(s.job);
    } else {
      const view = jobView(s);
      view.best ??= this.jobs.get(s.job)?.best;
      this.jobs.set(s.job, view);
    }
    this.render();
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
