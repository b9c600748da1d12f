/** The results view: a webview panel with what a GEAK job tried (configs or candidates, each
 * verdict and speedup, per-case results), from the server's geak.results command. Opened from
 * the "Show GEAK results" quick fix on the target's diagnostic, the link in the hover, the
 * notification at the end of a job, or GEAK: Show Results. */

import * as vscode from "vscode";
import { resultsHtml, type Results } from "./resultsHtml";

export interface Target {
  uri: string;
  name: string;
}

/** Asks the server (workspace/executeCommand geak.results); undefined when it is not running. */
export type Fetch = (target: Target) => Promise<Results | undefined>;

export class ResultsView implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private shown: Target | undefined;

  constructor(private readonly fetch: Fetch) {}

  /** Open (or refresh) the view for a target. */
  async show(target: Target): Promise<void> {
    const data = (await this.fetch(target)) ?? {
      uri: target.uri, name: target.name, symbol: target.name, path: "", runs: [],
      error: "The GEAK language server is not running; see the GEAK log.",
    };
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel("geak.results", `GEAK results: ${target.name}`,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: false }, { enableScripts: false, retainContextWhenHidden: false });
      this.panel.onDidDispose(() => { this.panel = undefined; this.shown = undefined; });
    } else {
      this.panel.reveal(vscode.ViewColumn.Beside, false);
    }
    this.shown = target;
    this.panel.title = `GEAK results: ${target.name}`;
    this.panel.webview.html = resultsHtml(data, this.panel.webview.cspSource);
  }

  /** A job on this target ended: refresh the view if it shows the target. */
  async refresh(target: Target): Promise<void> {
    if (this.panel && this.shown && this.shown.uri === target.uri && this.shown.name === target.name) {
      const data = await this.fetch(target);
      if (data && this.panel) this.panel.webview.html = resultsHtml(data, this.panel.webview.cspSource);
    }
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
