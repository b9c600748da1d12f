-- Headless Neovim as an independent LSP client of geak-lsp:
--   nvim --headless --clean -u NONE -c "luafile tests/lsp/nvim_optimize.lua"
-- Environment: GEAK_FILE (the file to open), GEAK_LINE (0-based line of the target),
-- GEAK_PYTHON (the interpreter that runs `-m geak_lsp`), GEAK_INIT (initializationOptions, JSON),
-- GEAK_OUT (where the findings are written, JSON), GEAK_EXPECT (text the edited buffer must hold).
-- Opens the file, asks for code actions, runs "Optimize with GEAK", lets Neovim's own
-- workspace/applyEdit handler edit the buffer, then records the buffer, diagnostics and a hover.

local out = os.getenv("GEAK_OUT")
local result = { steps = {} }

local function finish(err)
  result.error = err
  local f = io.open(out, "w")
  f:write(vim.fn.json_encode(result))
  f:close()
  vim.cmd("qa!")
end

local ok, err = pcall(function()
  local file = os.getenv("GEAK_FILE")
  local line = tonumber(os.getenv("GEAK_LINE"))
  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local id = vim.lsp.start_client({
    name = "geak",
    cmd = { os.getenv("GEAK_PYTHON"), "-m", "geak_lsp" },
    root_dir = vim.fn.fnamemodify(file, ":h"),
    init_options = vim.fn.json_decode(os.getenv("GEAK_INIT")),
  })
  assert(id, "the client did not start")
  vim.lsp.buf_attach_client(bufnr, id)
  local client = vim.lsp.get_client_by_id(id)
  assert(vim.wait(30000, function() return client.initialized == true end, 50), "not initialized")
  table.insert(result.steps, "initialized")

  local uri = vim.uri_from_bufnr(bufnr)
  local pos = { line = line, character = 0 }
  local resp = client.request_sync("textDocument/codeAction", {
    textDocument = { uri = uri }, range = { start = pos, ["end"] = pos }, context = { diagnostics = {} },
  }, 10000, bufnr)
  assert(resp and resp.result, "no code action response: " .. vim.inspect(resp))
  result.titles = {}
  local optimize
  for _, a in ipairs(resp.result) do
    table.insert(result.titles, a.title)
    if a.title == "Optimize with GEAK" then optimize = a end
  end
  assert(optimize and optimize.command, "no Optimize with GEAK action")
  local started = client.request_sync("workspace/executeCommand", optimize.command, 10000, bufnr)
  assert(started and started.result and started.result.job, "the command did not start: " .. vim.inspect(started))
  result.job = started.result.job
  table.insert(result.steps, "executed")

  local expect = os.getenv("GEAK_EXPECT")
  local edited = vim.wait(120000, function()
    local text = table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false), "\n")
    return text:find(expect, 1, true) ~= nil and #vim.diagnostic.get(bufnr) > 0
  end, 100)
  result.edited = edited
  result.lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  result.diagnostics = {}
  for _, d in ipairs(vim.diagnostic.get(bufnr)) do
    table.insert(result.diagnostics, { message = d.message, severity = d.severity, lnum = d.lnum,
                                       source = d.source })
  end
  local h = client.request_sync("textDocument/hover", {
    textDocument = { uri = uri }, position = { line = line, character = 4 },
  }, 10000, bufnr)
  result.hover = h and h.result and h.result.contents and h.result.contents.value or vim.NIL
  table.insert(result.steps, "done")
  client.stop()
  vim.wait(3000, function() return client.is_stopped() end, 50)
end)

finish(ok and vim.NIL or tostring(err))
