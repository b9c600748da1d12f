// The bundle loads in Node with a stand-in `vscode` and exports activate/deactivate.
// Every name the bundle reads from `vscode` is given as a constructible stub.
const fs = require("node:fs");
const Module = require("node:module");
const path = require("node:path");
const file = path.resolve(process.argv[2] || path.join(__dirname, "../../dist/extension.js"));
const text = fs.readFileSync(file, "utf8");
const names = new Set();
for (const m of text.matchAll(/\b(?:code|vscode\w*|vscode_\d+|Is|\w+)\.([A-Z]\w+)/g)) names.add(m[1]);
const stub = {};
for (const n of names) stub[n] = class {};
const load = Module._load;
Module._load = function (req, ...rest) { return req === "vscode" ? stub : load.call(this, req, ...rest); };
const ext = require(file);
if (typeof ext.activate !== "function" || typeof ext.deactivate !== "function") {
  console.error(`${file}: no activate/deactivate export`);
  process.exit(1);
}
console.log(`${path.basename(file)} loads; exports ${Object.keys(ext).join(", ")}`);
