/** How to install GEAK into a Python: from a GEAK checkout (the project is not on the package
 * index), with the language server's extra (pygls, lsprotocol). Pure: node:fs only. */

import * as fs from "node:fs";
import * as path from "node:path";

/** Said when no checkout is known: the user fills in where theirs is. */
export const CHECKOUT_PLACEHOLDER = "/path/to/geak";

/** Is ``dir`` a GEAK checkout: a pyproject.toml whose project is named geak? */
export function isCheckout(dir: string): boolean {
  try {
    const text = fs.readFileSync(path.join(dir, "pyproject.toml"), "utf8");
    return /^\[project\][^[]*^name\s*=\s*["']geak["']/m.test(text);
  } catch {
    return false;
  }
}

/** The first of ``dirs`` (or a folder above one) that is a GEAK checkout. */
export function findCheckout(dirs: Array<string | undefined>): string | undefined {
  for (const start of dirs) {
    if (!start) continue;
    for (let d = path.resolve(start); ; d = path.dirname(d)) {
      if (isCheckout(d)) return d;
      if (path.dirname(d) === d) break;
    }
  }
  return undefined;
}

function quote(s: string): string {
  return s.includes(" ") ? `"${s}"` : s;
}

/** `PYTHON -m pip install -e 'CHECKOUT[lsp]'`: what installs (or updates) GEAK there. */
export function installCommand(python: string, checkout?: string): string {
  return `${quote(python)} -m pip install -e '${checkout ?? CHECKOUT_PLACEHOLDER}[lsp]'`;
}

/** Where the command's checkout comes from, in words, for a message. */
export function checkoutWords(checkout?: string): string {
  return checkout ? `the GEAK checkout at ${checkout}` : `a GEAK checkout (${CHECKOUT_PLACEHOLDER}: where yours is)`;
}
