/** Is GEAK installed in the chosen interpreter? One short run of that Python before the server
 * starts, which also reads the server's settings schema. Uses child_process only (no vscode). */

import { execFile } from "node:child_process";
import { checkoutWords, installCommand } from "./install";

export const PROBE_CODE = [
  "import json, os, geak_lsp, pygls, lsprotocol",
  "try:",
  "    from geak_lsp import settings as s; keys = sorted(s.SCHEMA)",
  "except Exception:",
  "    keys = None",
  "root = os.path.dirname(os.path.dirname(os.path.abspath(geak_lsp.__file__)))",
  "print(json.dumps({'version': geak_lsp.__version__, 'settings': keys, 'root': root}))",
].join("\n");

export type Probe =
  | { ok: true; python: string; version: string; settings: string[] | null; root?: string }
  | { ok: false; python: string; reason: "missing-python" | "not-installed" | "failed"; detail: string };

export function probe(python: string, env?: NodeJS.ProcessEnv, timeoutMs = 30000): Promise<Probe> {
  return new Promise((resolve) => {
    execFile(python, ["-c", PROBE_CODE], { env, timeout: timeoutMs, windowsHide: true }, (err, stdout, stderr) => {
      if (err && (err as NodeJS.ErrnoException).code === "ENOENT") {
        resolve({ ok: false, python, reason: "missing-python", detail: String(err.message) });
        return;
      }
      if (err) {
        const text = String(stderr || err.message);
        const missing = /ModuleNotFoundError: No module named '(geak_lsp|pygls|lsprotocol)/.exec(text);
        resolve({ ok: false, python, reason: missing ? "not-installed" : "failed", detail: lastLine(text) });
        return;
      }
      try {
        const doc = JSON.parse(String(stdout).trim().split("\n").pop() ?? "");
        resolve({ ok: true, python, version: String(doc.version), settings: Array.isArray(doc.settings) ? doc.settings : null,
          root: typeof doc.root === "string" ? doc.root : undefined });
      } catch {
        resolve({ ok: false, python, reason: "failed", detail: `unexpected output: ${String(stdout).slice(0, 200)}` });
      }
    });
  });
}

function lastLine(text: string): string {
  const lines = text.trim().split("\n").filter((l) => l.trim());
  return lines.length ? lines[lines.length - 1].trim() : text.trim();
}

/** What to tell the user when the server cannot start, with the fix. ``checkout``: a GEAK
 * checkout to install from (one of the workspace's folders), if known. */
export function probeMessage(p: Exclude<Probe, { ok: true }>, checkout?: string): { message: string; install?: string } {
  switch (p.reason) {
    case "missing-python":
      return {
        message: `GEAK: the Python interpreter '${p.python}' was not found. Set geak.interpreter to a Python ` +
          "that has GEAK installed, or select one with the Python extension.",
      };
    case "not-installed": {
      const install = installCommand(p.python, checkout);
      return {
        message: `GEAK is not installed in ${p.python} (${p.detail}). Install it there from ${checkoutWords(checkout)}: ` +
          `\`${install}\`, or point geak.interpreter at a Python that has it.`,
        install,
      };
    }
    default:
      return { message: `GEAK: ${p.python} could not load the GEAK language server: ${p.detail}` };
  }
}
