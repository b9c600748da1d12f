import { beforeEach, describe, expect, it, vi } from "vitest";
import * as vscode from "vscode";
import { chooseInterpreter, fallbackPython, PYTHON_EXTENSION } from "../src/interpreter";

const mock = vscode as unknown as typeof import("./vscode.mock");

function pythonExtension(active: string | undefined, exe?: string, opts: { throws?: boolean; inactive?: boolean } = {}) {
  const exports = {
    environments: {
      getActiveEnvironmentPath: vi.fn(() => (active ? { path: active } : undefined)),
      resolveEnvironment: vi.fn(async () => {
        if (opts.throws) throw new Error("cannot resolve");
        return exe ? { executable: { uri: mock.Uri.file(exe) } } : undefined;
      }),
    },
  };
  const ext = { isActive: !opts.inactive, exports, activate: vi.fn(async () => exports) };
  mock.extensionsById.set(PYTHON_EXTENSION, ext);
  return { ext, exports };
}

describe("the interpreter that runs the server", () => {
  beforeEach(() => mock.resetMock());

  it("is geak.interpreter when set, with ${workspaceFolder} expanded", async () => {
    mock.workspace.workspaceFolders = [{ uri: mock.Uri.file("/proj"), name: "proj", index: 0 }];
    pythonExtension("/env/bin/python", "/env/bin/python");
    const i = await chooseInterpreter("${workspaceFolder}/.venv/bin/python");
    expect(i).toEqual({ path: "/proj/.venv/bin/python", source: "setting" });
  });

  it("is the Python extension's active environment when the setting is empty", async () => {
    const { ext, exports } = pythonExtension("/envs/k", "/envs/k/bin/python", { inactive: true });
    const i = await chooseInterpreter("", mock.Uri.file("/proj/k.py") as unknown as vscode.Uri);
    expect(i).toEqual({ path: "/envs/k/bin/python", source: "python-extension" });
    expect(ext.activate).toHaveBeenCalled();
    expect(exports.environments.getActiveEnvironmentPath).toHaveBeenCalled();
  });

  it("falls back to python3 when the Python extension is absent", async () => {
    const i = await chooseInterpreter("");
    expect(i).toEqual({ path: fallbackPython(), source: "fallback" });
    expect(fallbackPython()).toBe(process.platform === "win32" ? "python" : "python3");
  });

  it("falls back when the Python extension has no environment or cannot resolve it", async () => {
    pythonExtension(undefined);
    expect((await chooseInterpreter("")).source).toBe("fallback");
    pythonExtension("/envs/x", undefined, { throws: true });
    expect((await chooseInterpreter("")).source).toBe("fallback");
  });
});
