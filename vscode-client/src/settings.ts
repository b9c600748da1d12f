/** The geak.* settings: what the extension keeps for itself, and the document the server gets
 * (initializationOptions and workspace/configuration). Pure: no vscode import at run time. */

/** Settings only the extension reads (never sent to the server). */
export const CLIENT_ONLY = ["interpreter"] as const;

/** Settings the server validates, when the server cannot tell us its own list. */
export const DEFAULT_SERVER_KEYS = [
  "strategy", "provider", "model", "runner.url", "iterations", "parallel", "device", "arch",
  "maxJobs", "workers", "trials", "maxConfigs", "taskBudget", "emit", "applyUntimed",
];

export type Device = "auto" | "cuda" | "interpreter";

export interface ClientSettings {
  /** Path of the Python interpreter that runs the server; "" = the Python extension's choice. */
  interpreter: string;
  device: Device;
  strategy: string;
  provider: string | null;
  model: string | null;
  runnerUrl: string;
}

/** The part of vscode.WorkspaceConfiguration this module needs. */
export interface ConfigLike {
  get<T>(key: string): T | undefined;
}

export function readClientSettings(cfg: ConfigLike): ClientSettings {
  const device = cfg.get<string>("device");
  return {
    interpreter: (cfg.get<string>("interpreter") ?? "").trim(),
    device: device === "cuda" || device === "interpreter" ? device : "auto",
    strategy: cfg.get<string>("strategy") ?? "auto",
    provider: cfg.get<string | null>("provider") ?? null,
    model: cfg.get<string | null>("model") || null,
    runnerUrl: cfg.get<string>("runner.url") || "local",
  };
}

function flatten(doc: unknown, prefix = "", out: Record<string, unknown> = {}): Record<string, unknown> {
  if (doc === null || typeof doc !== "object" || Array.isArray(doc)) return out;
  for (const [k, v] of Object.entries(doc as Record<string, unknown>)) {
    const key = prefix + k;
    if (v !== null && typeof v === "object" && !Array.isArray(v)) flatten(v, key + ".", out);
    else out[key] = v;
  }
  return out;
}

/**
 * The `geak` section as the server takes it, from the section VS Code returns (nested, e.g.
 * `{runner: {url}}`). Client-only settings are left out, and only keys the server knows are
 * sent (`serverKeys`, from the server's own schema), so it has nothing to warn about.
 * `geak.device` goes to a server that knows `device`; a server from before that setting takes
 * the boolean `interpreter` (run on the Triton CPU interpreter) instead.
 */
export function toServerSettings(section: unknown, serverKeys: readonly string[] = DEFAULT_SERVER_KEYS): Record<string, unknown> {
  const flat = flatten(section);
  const known = new Set(serverKeys);
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(flat)) {
    if ((CLIENT_ONLY as readonly string[]).includes(k) || k === "device") continue;
    if (v === undefined || !known.has(k)) continue;
    if (k === "model" && v === "") {
      out[k] = null;
      continue;
    }
    out[k] = v;
  }
  const device = flat.device;
  if (typeof device === "string") {
    if (known.has("device")) out.device = device;
    else if (known.has("interpreter")) out.interpreter = device === "interpreter";
  }
  return out;
}
