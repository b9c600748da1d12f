#!/usr/bin/env bash
# The extension in a real VS Code: code-server 4.100.3 (VS Code 1.100.3 for the browser) with the
# built geak.vsix, driven by playwright-core through Debian's Chromium on 127.0.0.1
# (editor.test.ts). Registries only: Debian apt, npm; no other download.
#
#   test/editor/run.sh [all|packages|install|test]     (from anywhere; default: all)
#
#   packages  print the Debian packages this needs that are missing (for one apt call in CI)
#   install   apt-get install the missing ones (root or sudo), then npm ci here: code-server and
#             playwright-core from this folder's package-lock.json; code-server's native modules
#             are compiled against the installed Node headers
#   test      type-check and run editor.test.ts
#
# Env: GEAK_PYTHON (a Python with GEAK installed; default <repo>/.venv/bin/python), GEAK_VSIX
# (default <repo>/vscode-client/geak.vsix: run `npm run package` first), GEAK_EDITOR_OUT
# (screenshots and logs; default test/editor/out), GEAK_EDITOR_DOCS (copy the flow's
# screenshots there), GEAK_CHROMIUM (default /usr/bin/chromium).
#
# What an offline code-server install needs, found the hard way: Node 20 (4.100.3's postinstall
# refuses others) with its headers in /usr/include/node (NodeSource's nodejs ships them;
# npm_config_nodedir points node-gyp there instead of nodejs.org), libkrb5-dev (the kerberos
# module), npm_config_unsafe_perm=true as root (code-server's postinstall insists), and
# npm_config_yes=true (node-pty's post-install runs npx). @vscode/ripgrep's postinstall downloads
# rg from GitHub unless its download cache holds the file: Debian's rg is put there.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CLIENT=$(cd "$HERE/../.." && pwd)
REPO=$(cd "$CLIENT/.." && pwd)
WHAT=${1:-all}
T0=$(date +%s)
step() { echo "== editor test [$(( $(date +%s) - T0 )) s] $*"; }

# Pinned with code-server 4.100.3 (its lib/vscode/npm-shrinkwrap.json): the @vscode/ripgrep
# package and the ripgrep release its postinstall fetches.
RIPGREP_PKG=1.15.11
RIPGREP_RELEASE=v13.0.0-10

missing_packages() {
  local need=()
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v rg >/dev/null 2>&1 || need+=(ripgrep)
  [ -e /usr/include/krb5.h ] || need+=(libkrb5-dev)
  { command -v g++ && command -v make; } >/dev/null 2>&1 || need+=(g++ make)
  { command -v fc-list >/dev/null 2>&1 && [ -n "$(fc-list 2>/dev/null | head -1)" ]; } || need+=(fonts-dejavu-core)
  echo "${need[@]}"
}

install_packages() {
  local need
  need=$(missing_packages)
  [ -z "$need" ] && return 0
  local as_root=""
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "editor test: needs the Debian packages: $need (not root, no sudo)" >&2; exit 2; }
    as_root=sudo
  fi
  step "apt-get install $need"
  # shellcheck disable=SC2086
  DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends $need >/dev/null \
    || { $as_root apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -q --no-install-recommends $need >/dev/null; }
}

check_node() {
  local major hdr
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" = 20 ] || { echo "editor test: code-server 4.100.3 needs Node.js 20, found $(node -v)" >&2; exit 2; }
  hdr=$(sed -n 's/^#define NODE_MAJOR_VERSION \([0-9]*\).*/\1/p' /usr/include/node/node_version.h 2>/dev/null || true)
  [ "$hdr" = "$major" ] || { echo "editor test: no Node $major headers in /usr/include/node (NodeSource's nodejs package has them)" >&2; exit 2; }
}

npm_install() {
  check_node
  local tmp
  tmp=$(mktemp -d)
  # @vscode/ripgrep's postinstall looks in $TMPDIR/vscode-ripgrep-cache-<version>/ before GitHub.
  mkdir -p "$tmp/vscode-ripgrep-cache-$RIPGREP_PKG" "$tmp/rg"
  cp "$(command -v rg)" "$tmp/rg/rg"
  case "$(uname -m)" in
    x86_64) target=x86_64-unknown-linux-musl ;;
    aarch64) target=aarch64-unknown-linux-musl ;;
    *) echo "editor test: no ripgrep target for $(uname -m)" >&2; exit 2 ;;
  esac
  tar -czf "$tmp/vscode-ripgrep-cache-$RIPGREP_PKG/ripgrep-$RIPGREP_RELEASE-$target.tar.gz" -C "$tmp/rg" rg
  step "npm ci (code-server 4.100.3, playwright-core; compiles code-server's native modules)"
  (cd "$HERE" && TMPDIR="$tmp" npm_config_nodedir=/usr npm_config_unsafe_perm=true npm_config_yes=true \
     npm ci --no-audit --no-fund --loglevel=error) > "$tmp/npm-ci.log" 2>&1 \
    || { grep -v 'gyp info' "$tmp/npm-ci.log" | tail -40; rm -rf "$tmp"; exit 1; }
  rm -rf "$tmp"
  # (Not `code-server --help`: any run without --config writes a config under $HOME.)
  [ -x "$HERE/node_modules/.bin/code-server" ] && [ -e "$HERE/node_modules/code-server/lib/vscode/node_modules/@vscode/spdlog/build/Release/spdlog.node" ] \
    && [ -x "$HERE/node_modules/code-server/lib/vscode/node_modules/@vscode/ripgrep/bin/rg" ] \
    || { echo "editor test: code-server's install is incomplete (see above)" >&2; exit 1; }
}

run_test() {
  export GEAK_PYTHON=${GEAK_PYTHON:-$REPO/.venv/bin/python}
  export GEAK_VSIX=${GEAK_VSIX:-$CLIENT/geak.vsix}
  [ -s "$GEAK_VSIX" ] || { echo "editor test: no $GEAK_VSIX (cd vscode-client && npm run package)" >&2; exit 2; }
  [ -x "$HERE/node_modules/.bin/code-server" ] || { echo "editor test: run '$0 install' first" >&2; exit 2; }
  step "tsc, then editor.test.ts"
  cd "$CLIENT"
  npx tsc --noEmit -p test/editor
  npx vitest run --config vitest.editor.config.mts
}

case "$WHAT" in
  packages) missing_packages ;;
  install) install_packages; npm_install; step "installed" ;;
  test) run_test; step "done" ;;
  all) install_packages; npm_install; run_test; step "done" ;;
  *) echo "usage: $0 [all|packages|install|test]" >&2; exit 2 ;;
esac
