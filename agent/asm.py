"""What the compiler made of a kernel: a compile stage's text (``KernelResources.listing``) read
as instructions grouped by the kernel source line they came from, and counted.

Pure text, no torch: the compile itself runs in the runner's workers (``runner.aot``); this
module only reads what came back. The line info is Triton's own: ``.loc`` directives in PTX
and AMDGCN, ``//## File "...", line N`` comments in the SASS that ``nvdisasm
--print-line-info`` prints from the cubin's .debug_line, ``!dbg`` locations in LLVM IR and
``loc(...)`` attributes in Triton's MLIR (ttir, ttgir). Code that Triton inlines from its own
library (``tl.sum``'s combine function, in ``triton/language/standard.py``) is put under the
line of the kernel that called it where the listing says so (PTX and AMDGCN name the call
chain); SASS and the IRs name the library's own line.

Every instruction gets its kinds (``kinds``): global loads and stores with their width in bits
(``ld.global.v4.b32``, ``LDG.E.128`` and ``global_load_dwordx4`` are 128-bit), asynchronous
copies from global to shared memory (``cp.async``, ``LDGSTS``, TMA), shared-memory loads and
stores, barriers, tensor-core instructions (``mma``, ``wgmma``, ``HMMA``, ``HGMMA``, ``mfma``),
the warpgroup fences and waits around ``wgmma`` (``WARPGROUP.ARRIVE``, ``wgmma.wait_group``),
fused multiply-adds, spills (local / scratch loads and stores) and atomics. AMD's loads through
the scalar unit (``s_load_dword*``: the kernel's arguments, and a ``tl.load`` whose address is
the same for the whole wavefront) are ``uniform_load``, apart from the vector memory's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

KINDS = ("global_load", "uniform_load", "global_store", "async_copy", "shared_load", "shared_store", "barrier",
         "tensor_core", "warpgroup", "fma", "spill_load", "spill_store", "atomic")


@dataclass
class Block:
    """Consecutive instructions attributed to one source line (file as the listing names it)."""

    file: Optional[str]
    line: Optional[int]
    instructions: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- reading a listing


_SASS_LOC = re.compile(r'^\s*//## File "([^"]*)", line (\d+)')
_SASS_INSTR = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(.*?)\s*;")
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)")
_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?')
_CALLERS = re.compile(r"@\[ ([^\s:@\[\]]+):(\d+):\d+")
_PTX_INSTR = re.compile(r"^\s*(@!?%\w+\s+)?[a-z][\w.:]*(\s|;)")
_GCN_INSTR = re.compile(r"^\s*[a-z][a-z0-9_]*(\s|$)")
_MLIR_LOCDEF = re.compile(r'^#(loc\d*) = loc\((.*)\)\s*$')
_MLIR_USE = re.compile(r"loc\(#(loc\d*)\)\s*$")
_LL_DBG = re.compile(r"!dbg !(\d+)")
_LL_META = re.compile(r"^!(\d+) = (?:distinct )?!(\w+)\((.*)\)\s*$")


def blocks(listing: str, stage: str) -> list[Block]:
    """The listing's instructions in order, grouped into runs of one source line."""
    reader = {"sass": _sass, "ptx": _asm, "amdgcn": _asm, "llir": _llir}.get(stage, _mlir)
    out: list[Block] = []
    for file, line, instr in reader(listing, stage):
        if not out or (out[-1].file, out[-1].line) != (file, line):
            out.append(Block(file, line))
        out[-1].instructions.append(instr)
    return out


def _is_triton(path: str) -> bool:
    return "/triton/language/" in path or "/triton/runtime/" in path


def _sass(text: str, stage: str):
    file = line = None
    for raw in text.splitlines():
        m = _SASS_LOC.match(raw)
        if m:
            file, line = m.group(1), int(m.group(2))
            continue
        m = _SASS_INSTR.match(raw)
        if m:
            yield file, line, " ".join(m.group(1).split())


def _asm(text: str, stage: str):
    """PTX and AMDGCN: ``.file N "path"`` (AMD: ``"dir" "name"``) and ``.loc N LINE COL``."""
    files: dict[str, str] = {}
    for raw in text.splitlines():  # PTX names its files after the code
        m = _FILE.match(raw)
        if m:
            files[m.group(1)] = f"{m.group(2).rstrip('/')}/{m.group(3)}" if m.group(3) else m.group(2)
    file = line = None
    in_code = stage == "ptx"
    for raw in text.splitlines():
        s = raw.split("//")[0] if stage == "ptx" else raw.split(";")[0]
        if _FILE.match(s):
            continue
        m = _LOC.match(s)
        if m:
            file, line = files.get(m.group(1)), int(m.group(2)) or None
            if file and _is_triton(file):  # Triton's library inlined: its caller's line
                for name, ln in _CALLERS.findall(raw[len(s):]):
                    full = next((f for f in files.values() if f.rsplit("/", 1)[-1] == name), None)
                    if full and not _is_triton(full):
                        file, line = full, int(ln)
                        break
            continue
        if stage == "ptx":
            if s.lstrip().startswith(".section"):
                break  # debug sections follow the code
            if _PTX_INSTR.match(s) and s.rstrip().endswith(";"):
                yield file, line, " ".join(s.strip().rstrip(";").split())
            continue
        stripped = s.strip()
        if stripped.endswith(":"):
            if stripped.startswith(".Lfunc_end"):
                in_code = False  # the kernel's code ends; its metadata follows
            elif not stripped.startswith("."):
                in_code = True  # the kernel's label
            continue
        if in_code and _GCN_INSTR.match(s):
            yield file, line, " ".join(stripped.split())


def _mlir(text: str, stage: str):
    """Triton's MLIR (ttir, ttgir): each op ends in ``loc(#locN)``; ``#locN = loc("file":L:C)``,
    a name over another location (``loc("x"(#loc7))``) or a call site (the callee's line is
    taken, as in the assembly)."""
    defs = {}
    for raw in text.splitlines():
        m = _MLIR_LOCDEF.match(raw.strip())
        if m:
            defs[m.group(1)] = m.group(2)

    def resolve(name, depth=0):
        body = defs.get(name, "")
        m = re.match(r'"([^"]*)":(\d+):\d+', body)
        if m:
            return m.group(1), int(m.group(2))
        m = re.search(r"#(loc\d*)", body)
        return resolve(m.group(1), depth + 1) if m and depth < 50 else (None, None)
    for raw in text.splitlines():
        s = raw.strip()
        if not s or s.startswith("#") or s.startswith("}") or s.startswith("module") or s.startswith("tt.func"):
            continue
        m = _MLIR_USE.search(s)
        if m:
            file, line = resolve(m.group(1))
            yield file, line, " ".join(s[:m.start()].split())


def _llir(text: str, stage: str):
    meta = {}
    for raw in text.splitlines():
        m = _LL_META.match(raw.strip())
        if m:
            meta[m.group(1)] = (m.group(2), m.group(3))

    def field_of(body, key):
        m = re.search(r"\b%s: (?:!)?(\"[^\"]*\"|\w+)" % key, body)
        return m.group(1).strip('"') if m else None

    def file_of(node, depth=0):
        kind, body = meta.get(node, ("", ""))
        if kind == "DIFile":
            name, d = field_of(body, "filename"), field_of(body, "directory")
            return name if not d or (name or "").startswith("/") else f"{d.rstrip('/')}/{name}"
        ref = field_of(body, "file") or field_of(body, "scope")
        return file_of(ref, depth + 1) if ref and depth < 50 else None
    in_fn = False
    for raw in text.splitlines():
        s = raw.strip()
        if s.startswith("define "):
            in_fn = True
            continue
        if s == "}":
            in_fn = False
            continue
        if not in_fn or not s or s.endswith(":") or s.startswith(";"):
            continue
        m = _LL_DBG.search(s)
        file = line = None
        if m and m.group(1) in meta:
            body = meta[m.group(1)][1]
            ln = field_of(body, "line")
            line = int(ln) if ln and ln.isdigit() and int(ln) else None
            file = file_of(field_of(body, "scope") or "")
        yield file, line, " ".join(re.sub(r",?\s*!dbg !\d+", "", s).split())


# --------------------------------------------------------------------------- kinds


def _ptx_width(op: str) -> int:
    m = re.search(r"\.v(\d)\b", op)
    n = int(m.group(1)) if m else 1
    m = re.search(r"\.[busf](\d+)\b", op)
    return n * (int(m.group(1)) if m else 32)


def _sass_width(op: str) -> int:
    for part in reversed(op.split(".")[1:]):
        if part in ("64", "128"):
            return int(part)
        if part in ("U8", "S8"):
            return 8
        if part in ("U16", "S16"):
            return 16
    return 32


def _gcn_width(op: str) -> int:
    m = re.search(r"_dwordx(\d)$|_b(\d+)$", op)
    if m:
        return 32 * int(m.group(1)) if m.group(1) else int(m.group(2))
    if op.endswith("dword"):
        return 32
    if "short" in op or op.endswith("_d16") or "d16" in op:
        return 16
    if "byte" in op:
        return 8
    return 32


def kinds(instr: str, stage: str) -> dict[str, int]:
    """What one instruction is: ``{kind: width in bits (memory) or 1}``; empty for the rest."""
    s = re.sub(r"^@!?%?\w+\s+", "", instr.strip())
    op = s.split()[0] if s.split() else ""
    k: dict[str, int] = {}
    if stage == "ptx":
        if op.startswith(("ld.global", "ld.volatile.global")):
            k["global_load"] = _ptx_width(op)
        elif op.startswith("st.global"):
            k["global_store"] = _ptx_width(op)
        elif op.startswith("cp.async") and not op.startswith(("cp.async.commit", "cp.async.wait",
                                                               "cp.async.bulk.commit", "cp.async.bulk.wait")):
            k["async_copy"] = 1
        elif op.startswith(("ld.shared", "ldmatrix")):
            k["shared_load"] = _ptx_width(op)
        elif op.startswith(("st.shared", "stmatrix")):
            k["shared_store"] = _ptx_width(op)
        elif op.startswith(("bar.sync", "barrier.sync", "bar.arrive", "barrier.arrive", "bar.warp.sync")):
            k["barrier"] = 1
        elif op.startswith(("mma.", "wgmma.mma_async")):
            k["tensor_core"] = 1
        elif op.startswith("wgmma."):
            k["warpgroup"] = 1
        elif op.startswith("fma."):
            k["fma"] = 1
        elif op.startswith("ld.local"):
            k["spill_load"] = _ptx_width(op)
        elif op.startswith("st.local"):
            k["spill_store"] = _ptx_width(op)
        elif op.startswith(("atom.", "red.")):
            k["atomic"] = 1
    elif stage == "sass":
        base = op.split(".")[0]
        if base == "LDG":
            k["global_load"] = _sass_width(op)
        elif base == "STG":
            k["global_store"] = _sass_width(op)
        elif base in ("LDGSTS", "UTMALDG", "UBLKCP"):
            k["async_copy"] = 1
        elif base in ("LDS", "LDSM"):
            k["shared_load"] = _sass_width(op)
        elif base in ("STS", "STSM", "UTMASTG"):
            k["shared_store" if base != "UTMASTG" else "global_store"] = _sass_width(op)
        elif base in ("BAR", "WARPSYNC", "SYNCS"):
            k["barrier"] = 1
        elif base in ("HMMA", "IMMA", "DMMA", "BMMA", "HGMMA", "QGMMA", "IGMMA", "BGMMA"):
            k["tensor_core"] = 1
        elif base == "WARPGROUP":
            k["warpgroup"] = 1
        elif base in ("FFMA", "HFMA2", "DFMA", "FFMA2"):
            k["fma"] = 1
        elif base == "LDL":
            k["spill_load"] = _sass_width(op)
        elif base == "STL":
            k["spill_store"] = _sass_width(op)
        elif base in ("ATOM", "ATOMG", "RED", "REDG", "ATOMS"):
            k["atomic"] = 1
    elif stage == "amdgcn":
        if op.startswith(("global_load", "buffer_load", "flat_load")):
            k["global_load"] = _gcn_width(op)
        elif op.startswith(("s_load", "s_buffer_load")):
            k["uniform_load"] = 1
        elif op.startswith(("global_store", "buffer_store", "flat_store")):
            k["global_store"] = _gcn_width(op)
        elif op.startswith(("ds_read", "ds_load")):
            k["shared_load"] = _gcn_width(op)
        elif op.startswith(("ds_write", "ds_store")):
            k["shared_store"] = _gcn_width(op)
        elif op in ("s_barrier",):
            k["barrier"] = 1
        elif op.startswith(("v_mfma", "v_smfmac")):
            k["tensor_core"] = 1
        elif op.startswith(("v_fma", "v_fmac", "v_pk_fma")):
            k["fma"] = 1
        elif op.startswith("scratch_load"):
            k["spill_load"] = _gcn_width(op)
        elif op.startswith("scratch_store"):
            k["spill_store"] = _gcn_width(op)
        elif op.startswith(("global_atomic", "buffer_atomic", "flat_atomic", "ds_add")):
            k["atomic"] = 1
    else:  # ttir, ttgir, llir: Triton's and LLVM's ops, read by name
        name = op if "=" not in s else (s.split("=", 1)[1].split() or [""])[0]
        name = name.strip('"')
        if name in ("tt.load", "tt.descriptor_load") or (stage == "llir" and "ld.global" in s):
            k["global_load"] = 0
        elif name in ("tt.store", "tt.descriptor_store") or (stage == "llir" and "st.global" in s):
            k["global_store"] = 0
        elif name in ("ttg.async_copy_global_to_local", "ttng.async_tma_copy_global_to_local"):
            k["async_copy"] = 1
        elif name == "ttg.local_load":
            k["shared_load"] = 0
        elif name in ("ttg.local_store", "ttg.local_alloc"):
            k["shared_store"] = 0
        elif name in ("tt.dot", "ttng.warp_group_dot", "ttng.tc_gen5_mma") or "mma" in s.split("(")[0]:
            k["tensor_core"] = 1
        elif name in ("tt.atomic_rmw", "tt.atomic_cas"):
            k["atomic"] = 1
    return k


def summarize(instructions: list[str], stage: str) -> dict:
    """Counts over instructions: ``instructions``, then per kind its count, and for memory kinds
    ``{"count": n, "bits": {width: n}}`` (width 0: not known at this stage)."""
    out: dict = {"instructions": len(instructions)}
    for instr in instructions:
        for kind, width in kinds(instr, stage).items():
            if kind in ("uniform_load", "barrier", "tensor_core", "warpgroup", "fma", "async_copy", "atomic"):
                out[kind] = out.get(kind, 0) + 1
            else:
                d = out.setdefault(kind, {"count": 0, "bits": {}})
                d["count"] += 1
                d["bits"][str(width)] = d["bits"].get(str(width), 0) + 1
    return out


def count(summary: dict, kind: str) -> int:
    v = summary.get(kind, 0)
    return v["count"] if isinstance(v, dict) else int(v)


def vector_split(summary: dict, kind: str) -> tuple[int, int]:
    """(vector, scalar) instructions of a memory kind: wider than 32 bits is vector."""
    bits = (summary.get(kind) or {}).get("bits", {}) if isinstance(summary.get(kind), dict) else {}
    vec = sum(n for w, n in bits.items() if int(w) > 32)
    return vec, sum(bits.values()) - vec


def describe(summary: dict) -> str:
    """One line: ``12 instr; ld.global 2 (128-bit x2); ...``."""
    parts = [f"{summary.get('instructions', 0)} instr"]
    names = {"global_load": "global load", "uniform_load": "scalar-unit load", "global_store": "global store", "async_copy": "async copy",
             "shared_load": "shared load", "shared_store": "shared store", "barrier": "barrier",
             "tensor_core": "tensor core", "warpgroup": "warpgroup fence/wait", "fma": "fma", "spill_load": "spill load",
             "spill_store": "spill store", "atomic": "atomic"}
    for kind in KINDS:
        v = summary.get(kind)
        if not v:
            continue
        if isinstance(v, dict):
            widths = ", ".join(f"{w}-bit x{n}" for w, n in sorted(v["bits"].items(), key=lambda x: -int(x[0]))
                               if w != "0")
            parts.append(f"{names[kind]} {v['count']}" + (f" ({widths})" if widths else ""))
        else:
            parts.append(f"{names[kind]} {v}")
    return "; ".join(parts)


# --------------------------------------------------------------------------- source files


def source_path(listed: Optional[str], files: dict[str, str]) -> Optional[str]:
    """The project-relative path of a file the listing names (an absolute path in the worker's
    copy of the tree): the longest path of ``files`` it ends with; None for other files
    (Triton's own, for instance)."""
    if not listed:
        return None
    best = None
    for rel in files:
        if (listed == rel or listed.endswith("/" + rel)) and (best is None or len(rel) > len(best)):
            best = rel
    return best


def by_line(report_blocks: list[Block], stage: str, files: dict[str, str]) -> list[dict]:
    """Per source line (the project's files first, in file and line order): the file (project-relative where it is the
    project's), the line, its text, its instructions in listing order and their summary."""
    acc: dict[tuple, list[str]] = {}
    for b in report_blocks:
        rel = source_path(b.file, files)
        acc.setdefault((rel or b.file or "", b.line or 0), []).extend(b.instructions)
    out = []
    for (file, line), instrs in sorted(acc.items(), key=lambda kv: (kv[0][0] not in files, kv[0][0], kv[0][1])):
        text = None
        if file in files and line:
            lines = files[file].splitlines()
            text = lines[line - 1].strip() if line <= len(lines) else None
        out.append({"file": file or None, "line": line or None, "source": text,
                    "instructions": instrs, "summary": summarize(instrs, stage)})
    return out


# --------------------------------------------------------------------------- reports


CUT_PREFIX = "# [listing cut:"


def kernel_doc(res, files: dict[str, str]) -> dict:
    """One compiled launch config (a ``KernelResources`` with a listing) for tools: its config
    and resources, the summary of the whole listing, and per source line its instructions."""
    stage = res.listing_stage or ""
    bl = blocks(res.listing or "", stage) if res.listing else []
    lines = by_line(bl, stage, files)
    return {"kernel": res.kernel, "arch": res.arch, "stage": stage, "num_warps": res.num_warps,
            "num_stages": res.num_stages, "constexprs": dict(res.constexprs), "arg_types": res.arg_types,
            "arg_names": res.arg_names, "registers": res.registers, "spill_bytes": res.spill_bytes,
            "shared_bytes": res.shared_bytes, "occupancy_pct": res.occupancy_pct, "error": res.error,
            "cut": bool(res.listing and CUT_PREFIX in res.listing),
            "source_files": sorted({x["file"] for x in lines if x["file"] in files}),
            "summary": summarize([i for b in bl for i in b.instructions], stage),
            "lines": lines}


def pairs(original: list, candidate: list) -> list[tuple]:
    """Original and candidate launch configs side by side: by kernel name (then in order);
    kernels left over on both sides are paired in order (a renamed kernel), the rest alone."""
    orig = [r for r in original if r.variant is None]
    cand = [r for r in candidate if r.variant is None]
    out, left_o, left_c = [], [], list(cand)
    for r in orig:
        same = [c for c in left_c if c.kernel == r.kernel]
        if same:
            out.append((r, same[0]))
            left_c.remove(same[0])
        else:
            left_o.append(r)
    for r in left_o:
        out.append((r, left_c.pop(0) if left_c else None))
    out += [(None, c) for c in left_c]
    return out


def compiled_terms(res) -> dict:
    """The figures the compiled difference compares, for one launch config (None: unknown)."""
    s = summarize([i for b in blocks(res.listing, res.listing_stage or "") for i in b.instructions],
                  res.listing_stage or "") if res is not None and res.listing else None
    if res is None:
        return {}
    out = {"registers": res.registers, "spill_bytes": res.spill_bytes, "shared_bytes": res.shared_bytes,
           "occupancy_pct": res.occupancy_pct}
    if s is not None:
        out["instructions"] = s["instructions"]
        for kind in ("global_load", "global_store"):
            vec, scalar = vector_split(s, kind)
            out[kind + "_vector"], out[kind + "_scalar"] = vec, scalar
        for kind in ("uniform_load", "async_copy", "shared_load", "shared_store", "barrier", "tensor_core", "fma",
                     "spill_load", "spill_store"):
            out[kind] = count(s, kind)
    return out


_TERMS = [("registers", "registers"), ("spill_bytes", "spills (bytes)"), ("shared_bytes", "shared (bytes)"),
          ("occupancy_pct", "occupancy %"), ("instructions", "instructions"),
          ("global_load_vector", "global loads, vector"), ("global_load_scalar", "global loads, scalar"),
          ("global_store_vector", "global stores, vector"), ("global_store_scalar", "global stores, scalar"),
          ("uniform_load", "scalar-unit loads"), ("async_copy", "async copies to shared"),
          ("shared_load", "shared loads"), ("shared_store", "shared stores"), ("barrier", "barriers"),
          ("tensor_core", "tensor-core instr"), ("fma", "fma"), ("spill_load", "spill loads"),
          ("spill_store", "spill stores")]
_ALWAYS = ("registers", "spill_bytes", "shared_bytes", "occupancy_pct", "instructions")


def compiled_difference(original: list, candidate: list) -> Optional[dict]:
    """What changed in compiled terms between the original's launch configs and the
    candidate's (``KernelResources`` with listings, one compile of each): per pair its kernel
    name, config, which side it is only on (``side``: both | original | candidate), an error,
    and rows ``[label, original, candidate, changed]`` (text; ``-`` unknown). Rows of the
    instruction mix that are zero on both sides are left out. None when neither side has a
    report. For the CLI (``render_compiled_diff``), the editor's results view and the GEAK
    loop's reflector."""
    if not original and not candidate:
        return None
    arch = (original or candidate)[0].arch
    stage = next((r.listing_stage for r in original + candidate if r.listing_stage), None)
    kernels = []
    for o, c in pairs(original, candidate):
        name = (o or c).kernel if (o is None or c is None or o.kernel == c.kernel) else f"{o.kernel} -> {c.kernel}"
        cfgs = [r.config_text for r in (o, c) if r is not None]
        entry = {"kernel": name, "config": cfgs[0] if len(set(cfgs)) == 1 else " -> ".join(cfgs),
                 "side": "candidate" if o is None else "original" if c is None else "both",
                 "error": (o.error if o and o.error else c.error if c and c.error else None), "rows": []}
        kernels.append(entry)
        if entry["error"]:
            continue
        to, tc = compiled_terms(o), compiled_terms(c)
        for key, label in _TERMS:
            a, b = to.get(key), tc.get(key)
            if a is None and b is None:
                continue
            if key not in _ALWAYS and not a and not b:
                continue
            fmt = (lambda v: "-" if v is None else f"{v:.0f}") if key == "occupancy_pct" else \
                (lambda v: "-" if v is None else str(v))
            entry["rows"].append([label, fmt(a), fmt(b), a != b])
    return {"arch": arch, "stage": stage, "kernels": _distinct(kernels, pairs(original, candidate))}


def _distinct(kernels: list[dict], launched: list[tuple]) -> list[dict]:
    """One entry per different compile: launches that compiled to the same figures once; those
    that share a kernel and config but not their figures (another dtype, or an argument Triton
    specialised differently: divisible by 16, equal to 1) told apart by their argument types or
    their place."""
    import json
    seen, out = set(), []
    for entry, (o, c) in zip(kernels, launched):
        key = json.dumps([entry[k] for k in ("kernel", "config", "side", "error", "rows")])
        if key not in seen:
            seen.add(key)
            out.append((entry, (c or o).arg_types))
    groups: dict[tuple, list] = {}
    for entry, types in out:
        groups.setdefault((entry["kernel"], entry["config"]), []).append((entry, types))
    for same in groups.values():
        if len(same) < 2:
            continue
        by_types = len({types for _, types in same}) == len(same)
        for i, (entry, types) in enumerate(same):
            entry["config"] += f"; {types}" if by_types else f"; launch {i + 1} of {len(same)}, specialised differently"
    return [entry for entry, _ in out]


def statement_spans(source: str) -> list[tuple[int, int]]:
    """The 1-based first and last lines of each statement of ``source`` that spans several lines
    (a compound statement: its header, up to its body): the compiler gives an instruction the
    line of one part of such a statement (``tl.load(`` on one line, its mask on the next holds
    the load), so a view treats its lines as one. Empty when ``source`` does not parse."""
    import ast
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.stmt) or node.end_lineno is None:
            continue
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
            last = max(node.lineno, body[0].lineno - 1)  # a header: def, for, if, while, with
        else:
            last = node.end_lineno
        if last > node.lineno:
            out.append((node.lineno, last))
    return sorted(out)


def statement_of(spans: list[tuple[int, int]]) -> dict[int, int]:
    """Line -> the first line of the multi-line statement holding it (lines of ``statement_spans``)."""
    return {ln: start for start, end in spans for ln in range(start, end + 1)}
