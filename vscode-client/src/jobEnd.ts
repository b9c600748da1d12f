/** The end of a GEAK job, said once: a notification with the outcome and a button to the
 * results view (from the server's geak/jobEnd). A cancelled job says nothing. A server that
 * does not offer geak/jobEnd (ServerCapabilities.experimental.geakJobEnd) gets its
 * progress-end message shown instead. */

import * as vscode from "vscode";
import type { JobEnd } from "./wire";

export const JOB_END = "geak/jobEnd";
export const SHOW_RESULTS = "Show Results";
export const SHOW_LOG = "Show Log";

export type { JobEnd };

/** What the notification says (pure). */
export function jobEndMessage(e: JobEnd): { text: string; warning: boolean; buttons: string[] } {
  const what = e.kind === "benchmark" ? "Benchmark" : "Optimize";
  const warning = e.outcome === "error" || e.outcome === "fails-own-inputs";
  const message = e.message.replace(/^GEAK:\s*/, "");
  return {
    text: `GEAK ${what} ${e.name}: ${message}`,
    warning,
    buttons: e.results ? [SHOW_RESULTS] : [SHOW_LOG],
  };
}

export class JobEnds implements vscode.Disposable {
  /** Set when the running server offers geak/jobEnd. */
  serverSaysEnds = false;

  constructor(
    private readonly showResults: (target: { uri: string; name: string }) => unknown,
    private readonly showLog: () => unknown,
    private readonly onEnd: (target: { uri: string; name: string }) => unknown = () => undefined,
  ) {}

  /** geak/jobEnd from the server. */
  jobEnded(e: JobEnd): void {
    void this.onEnd({ uri: e.uri, name: e.name });
    const { text, warning, buttons } = jobEndMessage(e);
    const show = warning ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
    void show(text, ...buttons).then((choice) => {
      if (choice === SHOW_RESULTS) void this.showResults({ uri: e.uri, name: e.name });
      else if (choice === SHOW_LOG) void this.showLog();
    });
  }

  /** A job's progress ended with ``message``: said here only for a server without geak/jobEnd. */
  progressEnded(title: string, message: string | undefined): void {
    if (this.serverSaysEnds || !message || message === "cancelled") return;
    void vscode.window.showInformationMessage(`${title}: ${message}`);
  }

  dispose(): void {
    this.serverSaysEnds = false;
  }
}
