/** The server's job progress (window/workDoneProgress): a notification with a cancel button.
 * Replaces the client library's default handler, which shows only a status bar spinner without
 * cancel. The status bar reads geak/jobStatus instead (statusBar.ts); the end of a job is said
 * once, by jobEnd.ts. */

import * as vscode from "vscode";
import type { BaseLanguageClient } from "vscode-languageclient";
import {
  WorkDoneProgress, WorkDoneProgressCancelNotification, WorkDoneProgressCreateRequest,
  type ProgressToken, type WorkDoneProgressBegin, type WorkDoneProgressEnd, type WorkDoneProgressReport,
} from "vscode-languageserver-protocol";

/** The part of the language client this needs. */
export type ProgressClient = Pick<BaseLanguageClient, "onRequest" | "onProgress" | "sendNotification">;

/** ``onEnd``: told when a job's progress ends (its title and end message). */
export function trackProgress(client: ProgressClient,
  onEnd: (token: string, title: string, message: string | undefined) => void = () => undefined): vscode.Disposable {
  const live = new Set<vscode.Disposable>();
  const onCreate = client.onRequest(WorkDoneProgressCreateRequest.type, ({ token }) => {
    const key = String(token);
    let report: ((v: { message?: string; increment?: number }) => void) | undefined;
    let finish: (() => void) | undefined;
    let reported = 0;
    let title = "GEAK";
    const sub: vscode.Disposable = client.onProgress(WorkDoneProgress.type, token,
      (v: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd) => {
        if (v.kind === "begin") {
          title = v.title;
          void vscode.window.withProgress(
            { location: vscode.ProgressLocation.Notification, title: v.title, cancellable: v.cancellable ?? false },
            (progress, cancel) => {
              cancel.onCancellationRequested(() => {
                void client.sendNotification(WorkDoneProgressCancelNotification.type, { token });
              });
              report = (x) => progress.report(x);
              report({ message: v.message });
              return new Promise<void>((resolve) => { finish = resolve; });
            });
        } else if (v.kind === "report") {
          const pct = typeof v.percentage === "number" ? Math.max(0, Math.min(100, v.percentage)) : undefined;
          const increment = pct !== undefined ? Math.max(0, pct - reported) : undefined;
          if (pct !== undefined) reported = Math.max(reported, pct);
          report?.({ message: v.message, increment });
        } else if (v.kind === "end") {
          finish?.();
          onEnd(key, title, v.message);
          sub.dispose();
          live.delete(sub);
        }
      });
    live.add(sub);
  });
  return {
    dispose: () => {
      onCreate.dispose();
      for (const d of live) d.dispose();
      live.clear();
    },
  };
}
