/** When the server does not start, or stops: the reason in one message, with what to do.
 * Pure (no vscode import): the last lines the server wrote to stderr, and the message built
 * from them. */

import { checkoutWords, installCommand } from "./install";

/** The last lines a server process wrote to stderr. */
export class StderrTail {
  private readonly lines: string[] = [];

  constructor(private readonly keep = 20) {}

  push(line: string): void {
    if (!line.trim()) return;
    this.lines.push(line);
    if (this.lines.length > this.keep) this.lines.shift();
  }

  /** The line that says what went wrong: an argparse "error:", a Python exception, else the last. */
  reason(): string | undefined {
    const pick = [...this.lines].reverse().find((l) => /(^|: )error: |^\w+(Error|Exception)\b|^[\w.]+Error: /.test(l.trim()));
    return (pick ?? this.lines[this.lines.length - 1])?.trim();
  }

  clear(): void {
    this.lines.length = 0;
  }
}

export interface StartFailure {
  message: string;
  /** A command that fixes it, for the "Copy" button (when there is one). */
  fix?: string;
}

/** The one message for a server that did not start, or stopped and will not be restarted.
 * ``checkout``: a GEAK checkout to install from, if known (the installed one, or a workspace folder). */
export function serverFailure(python: string, reason: string | undefined, when: "start" | "stopped",
  checkout?: string): StartFailure {
  const what = when === "start"
    ? "GEAK: the language server did not start"
    : "GEAK: the language server stopped and was not restarted";
  const why = reason ? `: ${reason.replace(/\.$/, "")}` : "";
  if (reason && /unrecognized arguments|no such option/i.test(reason)) {
    const fix = installCommand(python, checkout);
    return { message: `${what}${why}. The GEAK in ${python} is older than this extension: update ${checkoutWords(checkout)} ` +
      `and reinstall it (${fix}), then Restart.`, fix };
  }
  if (reason && /ModuleNotFoundError|ImportError/.test(reason)) {
    const fix = installCommand(python, checkout);
    return { message: `${what}${why}. Install GEAK in ${python} from ${checkoutWords(checkout)} (${fix}), or set ` +
      "geak.interpreter to a Python that has it.", fix };
  }
  return { message: `${what}${why}. Its output is in the GEAK log (${python} -m geak_lsp); geak.interpreter chooses the Python.` };
}
