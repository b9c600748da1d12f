import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/e2e/**/*.e2e.test.ts"],
    testTimeout: 300000,
    hookTimeout: 60000,
    fileParallelism: false,
  },
});
