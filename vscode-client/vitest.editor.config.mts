import { defineConfig } from "vitest/config";

// The real-editor test (test/editor/run.sh): one file, its steps in order, one browser.
export default defineConfig({
  test: {
    include: ["test/editor/**/*.test.ts"],
    testTimeout: 300000,
    hookTimeout: 120000,
    fileParallelism: false,
    bail: 0,
  },
});
