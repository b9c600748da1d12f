/** The install advice names something that works: `pip install -e 'DIR[lsp]'` where DIR is a
 * GEAK checkout (its pyproject.toml names the project geak, with the lsp extra the server needs).
 * "pip install geak" named a package that is not on the package index. */
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { serverFailure } from "../src/errors";
import { CHECKOUT_PLACEHOLDER, findCheckout, installCommand, isCheckout } from "../src/install";
import { probeMessage } from "../src/probe";

const REPO = path.resolve(__dirname, "../..");

/** The directory a `PYTHON -m pip install -e 'DIR[lsp]'` command installs from. */
function installsFrom(command: string): { python: string; dir: string; extra: string } {
  const m = /^(\S+|"[^"]+") -m pip install -e '([^'[]+)\[(\w+)\]'$/.exec(command);
  expect(m, command).not.toBeNull();
  return { python: m![1], dir: m![2], extra: m![3] };
}

describe("install advice", () => {
  it("is pip install -e of a GEAK checkout with the server's extra", () => {
    const checkout = findCheckout([path.join(REPO, "vscode-client", "src")]);
    expect(checkout).toBe(REPO);
    for (const cmd of [
      installCommand("/v/bin/python", checkout),
      serverFailure("/v/bin/python", "geak-lsp: error: unrecognized arguments: --stdio", "start", checkout).fix!,
      serverFailure("/v/bin/python", "ModuleNotFoundError: No module named 'pygls'", "start", checkout).fix!,
      probeMessage({ ok: false, python: "/v/bin/python", reason: "not-installed", detail: "x" }, checkout).install!,
    ]) {
      const { dir, extra } = installsFrom(cmd);
      const pyproject = fs.readFileSync(path.join(dir, "pyproject.toml"), "utf8");
      expect(pyproject).toMatch(/^name = "geak"$/m);
      // The extra carries what the server imports (the probe imports pygls and lsprotocol).
      const line = new RegExp(`^${extra} = \\[(.*)\\]$`, "m").exec(pyproject);
      expect(line?.[1]).toMatch(/"pygls[^"]*"/);
      expect(line?.[1]).toMatch(/"lsprotocol[^"]*"/);
      expect(fs.existsSync(path.join(dir, "geak_lsp", "__main__.py"))).toBe(true);
    }
  });

  it("says where to fill in a checkout when none is known, and never names a package index name", () => {
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "geak-no-checkout-"));
    try {
      fs.writeFileSync(path.join(tmp, "pyproject.toml"), '[project]\nname = "ws"\n');
      expect(isCheckout(tmp)).toBe(false);
      expect(findCheckout([tmp])).toBeUndefined();
      const p = probeMessage({ ok: false, python: "/v/bin/python", reason: "not-installed", detail: "x" });
      expect(p.install).toBe(`/v/bin/python -m pip install -e '${CHECKOUT_PLACEHOLDER}[lsp]'`);
      expect(p.message).toContain("a GEAK checkout (/path/to/geak: where yours is)");
      expect(p.message).not.toMatch(/pip install (-U )?geak\b/);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
});
