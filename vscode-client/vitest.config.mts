import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// Unit tests: `vscode` is the mock in test/vscode.mock.ts.
export default defineConfig({
  resolve: { alias: { vscode: fileURLToPath(new URL("./test/vscode.mock.ts", import.meta.url)) } },
  test: { include: ["test/*.test.ts"] },
});
