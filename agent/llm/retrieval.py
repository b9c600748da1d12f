"""One-shot retrieval: the corpus kernel most similar to the code at hand (BM25, Okapi).

The corpus is GEAK's own ``examples/`` and ``benchmarks/`` (whichever exist), the same folders
of the user's project, and a directory the user names (``--corpus DIR``): every ``.py`` file that defines a ``@triton.jit``
kernel. Documents are tokenised as code: identifiers split at ``_`` and case changes, with
``tl.*`` calls kept whole (``tl.dot``, ``tl.max``), so "a softmax with tl.max and tl.exp"
finds the softmax kernels. The first iteration queries with the target's code, later ones with
the current candidate's (code similarity beat instruction similarity in the GEAK paper). The
target file itself is never its own example.
"""

from __future__ import annotations

import io
import math
import re
import tokenize
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_DIRS = ("examples", "benchmarks")
MAX_DOC_CHARS = 12000
_WORD = re.compile(r"tl\.\w+|[A-Za-z_][A-Za-z0-9_]*")
_STOP = {"self", "def", "return", "import", "from", "as", "in", "for", "if", "else", "the", "a", "of",
         "and", "or", "not", "is", "none", "true", "false", "with", "to", "torch", "triton", "tl", "x"}


def code_only(text: str) -> str:
    """The text with comments and string literals (docstrings, messages) blanked out:
    similarity of code, not of prose."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return text
    starts = [0]
    for ln in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(ln))
    out = list(text)
    for t in toks:
        if t.type in (tokenize.COMMENT, tokenize.STRING):
            a, b = starts[t.start[0] - 1] + t.start[1], starts[t.end[0] - 1] + t.end[1]
            out[a:b] = " " * (b - a)
    return "".join(out)


def tokens(text: str) -> list[str]:
    out: list[str] = []
    for w in _WORD.findall(code_only(text)):
        if w.startswith("tl."):
            out.append(w)
            w = w[3:]
        for part in re.split(r"_+|(?<=[a-z0-9])(?=[A-Z])", w):
            p = part.lower()
            if len(p) > 1 and p not in _STOP:
                out.append(p)
    return out


@dataclass
class Doc:
    path: str
    text: str
    toks: Counter
    length: int


class BM25:
    def __init__(self, docs: list[Doc], k1: float = 1.5, b: float = 0.75):
        self.docs, self.k1, self.b = docs, k1, b
        self.avg = sum(d.length for d in docs) / len(docs) if docs else 0.0
        df: Counter = Counter()
        for d in docs:
            df.update(d.toks.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}

    def scores(self, query: str) -> list[tuple[float, Doc]]:
        q = Counter(tokens(query))
        out = []
        for d in self.docs:
            s = 0.0
            for t in q:
                f = d.toks.get(t, 0)
                if f:
                    s += self.idf.get(t, 0.0) * f * (self.k1 + 1) / (
                        f + self.k1 * (1 - self.b + self.b * d.length / (self.avg or 1)))
            out.append((s, d))
        return sorted(out, key=lambda x: -x[0])


def corpus_files(extra: Optional[Iterable[Path]] = None, project: Path = PROJECT) -> list[Path]:
    dirs = [project / d for d in DEFAULT_DIRS] + [Path(p) for p in (extra or [])]
    seen, out = set(), []
    for d in dirs:
        if not d.is_dir():
            continue  # benchmarks/ may not exist
        for f in sorted(d.rglob("*.py")):
            r = f.resolve()
            if r not in seen:
                seen.add(r)
                out.append(f)
    return out


class Corpus:
    def __init__(self, files: list[Path]):
        docs = []
        for f in files:
            try:
                text = f.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if "@triton.jit" not in text and "@jit" not in text:
                continue
            toks = Counter(tokens(text))
            docs.append(Doc(str(f), text, toks, sum(toks.values())))
        self.index = BM25(docs)

    def __len__(self) -> int:
        return len(self.index.docs)

    def best(self, query: str, exclude_texts: Iterable[str] = ()) -> Optional[Doc]:
        """The most similar document that is not one of ``exclude_texts`` (the target itself)."""
        skip = {t.strip() for t in exclude_texts}
        for score, d in self.index.scores(query):
            if score > 0 and d.text.strip() not in skip:
                return d
        return None


def example_text(doc: Optional[Doc]) -> str:
    if doc is None:
        return ""
    text = doc.text if len(doc.text) <= MAX_DOC_CHARS else doc.text[:MAX_DOC_CHARS] + "\n# ... (cut)\n"
    try:
        name = str(Path(doc.path).resolve().relative_to(PROJECT))
    except ValueError:
        name = doc.path
    return f"# {name}\n{text}"
