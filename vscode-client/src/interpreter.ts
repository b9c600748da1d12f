/** Which Python runs the server: geak.interpreter, else the Python extension's active
 * environment (ms-python.python, optional), else python3. */

import * as os from "node:os";
import * as vscode from "vscode";

export type InterpreterSource = "setting" | "python-extension" | "fallback";

export interface Interpreter {
  path: string;
  source: InterpreterSource;
}

export const PYTHON_EXTENSION = "ms-python.python";

/** The subset of the Python extension's API used here. */
interface PythonApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { path: string } | undefined;
    resolveEnvironment(env: { path: string } | string): Promise<{ executable?: { uri?: vscode.Uri } } | undefined>;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
}

export function fallbackPython(): string {
  return process.platform === "win32" ? "python" : "python3";
}

export function expandPath(p: string, folder?: vscode.WorkspaceFolder): string {
  let out = p.trim();
  if (folder) out = out.replace(/\$\{workspaceFolder\}/g, folder.uri.fsPath);
  if (out === "~" || out.startsWith("~/")) out = os.homedir() + out.slice(1);
  return out;
}

async function pythonApi(): Promise<PythonApi | undefined> {
  const ext = vscode.extensions.getExtension<PythonApi>(PYTHON_EXTENSION);
  if (!ext) return undefined;
  try {
    return ext.isActive ? ext.exports : await ext.activate();
  } catch {
    return undefined;
  }
}

export async function chooseInterpreter(setting: string, resource?: vscode.Uri): Promise<Interpreter> {
  const folder = resource ? vscode.workspace.getWorkspaceFolder(resource) : vscode.workspace.workspaceFolders?.[0];
  if (setting.trim()) return { path: expandPath(setting, folder), source: "setting" };
  const api = await pythonApi();
  const envs = api?.environments;
  if (envs) {
    try {
      const active = envs.getActiveEnvironmentPath(resource ?? folder?.uri);
      if (active?.path) {
        const resolved = await envs.resolveEnvironment(active);
        const exe = resolved?.executable?.uri?.fsPath ?? active.path;
        if (exe) return { path: exe, source: "python-extension" };
      }
    } catch {
      // an environment that does not resolve: fall back
    }
  }
  return { path: fallbackPython(), source: "fallback" };
}

/** Fires when the Python extension's active environment changes (nothing if it is absent). */
export async function onInterpreterChange(listener: () => void): Promise<vscode.Disposable | undefined> {
  const api = await pythonApi();
  const ev = api?.environments?.onDidChangeActiveEnvironmentPath;
  return ev ? ev(() => listener()) : undefined;
}
