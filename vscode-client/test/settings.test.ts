import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { DEFAULT_SERVER_KEYS, readClientSettings, toServerSettings } from "../src/settings";

const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "package.json"), "utf8"));
const props: Record<string, { default?: unknown; description?: string; markdownDescription?: string; type?: unknown }> =
  pkg.contributes.configuration.properties;

const section = {
  interpreter: "/opt/py/bin/python", device: "interpreter", strategy: "llm", provider: "openai", model: "gpt",
  runner: { url: "http://gpu:8765" }, iterations: 2, applyUntimed: true, colour: "blue",
};

describe("settings sent to the server", () => {
  it("leave out the client's own geak.interpreter and keys the server does not know", () => {
    const out = toServerSettings(section);
    expect(out).not.toHaveProperty("interpreter");
    expect(out).not.toHaveProperty("colour");
    expect(out).toMatchObject({ device: "interpreter", strategy: "llm", provider: "openai", model: "gpt",
      "runner.url": "http://gpu:8765", iterations: 2, applyUntimed: true });
  });

  it("give a server that knows only the boolean interpreter setting the device as that boolean", () => {
    const old = ["strategy", "interpreter", "runner.url"];
    expect(toServerSettings(section, old)).toEqual({ strategy: "llm", interpreter: true, "runner.url": "http://gpu:8765" });
    expect(toServerSettings({ ...section, device: "cuda" }, old).interpreter).toBe(false);
  });

  it("send geak.device to a server that knows it, and never its interpreter path", () => {
    const out = toServerSettings(section, ["device", "interpreter", "strategy"]);
    expect(out).toEqual({ device: "interpreter", strategy: "llm" });
  });

  it("turn an empty model into null", () => {
    expect(toServerSettings({ model: "" }).model).toBeNull();
  });
});

describe("the extension's own view of the settings", () => {
  it("has defaults when nothing is set", () => {
    const s = readClientSettings({ get: () => undefined });
    expect(s).toEqual({ interpreter: "", device: "auto", strategy: "auto", provider: null, model: null, runnerUrl: "local" });
  });

  it("reads geak.interpreter as a path and rejects an unknown device", () => {
    const values: Record<string, unknown> = { interpreter: "  /usr/bin/python3 ", device: "tpu" };
    const s = readClientSettings({ get: <T>(k: string) => values[k] as T });
    expect(s.interpreter).toBe("/usr/bin/python3");
    expect(s.device).toBe("auto");
  });
});

describe("package.json contributes every geak.* setting", () => {
  it("with a description and a default for each setting the server validates", () => {
    for (const key of [...DEFAULT_SERVER_KEYS, "interpreter"]) {
      const p = props[`geak.${key}`];
      expect(p, `geak.${key}`).toBeDefined();
      expect(p.description ?? p.markdownDescription, `geak.${key}`).toBeTruthy();
      expect("default" in p, `geak.${key}`).toBe(true);
    }
  });

  it("with the server's defaults", () => {
    expect(props["geak.strategy"].default).toBe("auto");
    expect(props["geak.iterations"].default).toBe(3);
    expect(props["geak.parallel"].default).toBe(1);
    expect(props["geak.maxJobs"].default).toBe(2);
    expect(props["geak.maxConfigs"].default).toBe(24);
    expect(props["geak.emit"].default).toBe("constants");
    expect(props["geak.applyUntimed"].default).toBe(false);
    expect(props["geak.device"].default).toBe("auto");
    expect(props["geak.interpreter"]).toMatchObject({ type: "string", default: "" });
  });

  it("and no setting that could hold an API key", () => {
    expect(Object.keys(props).filter((k) => /key|token|secret/i.test(k))).toEqual([]);
  });

  it("activates on Python files and contributes the commands", () => {
    expect(pkg.activationEvents).toContain("onLanguage:python");
    const ids = pkg.contributes.commands.map((c: { command: string }) => c.command);
    for (const id of ["geak.optimize", "geak.benchmark", "geak.cancel", "geak.showLog", "geak.setApiKey"]) expect(ids).toContain(id);
  });
});
