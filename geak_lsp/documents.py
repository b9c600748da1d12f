"""The targets of open documents, kept current without blocking the event loop.

A small document is parsed where it is asked for (a few milliseconds). A large one (more than
``BACKGROUND_CHARS``) is parsed in a worker thread, one parse per document at a time, always
of its latest text; until that is done, code actions and hovers answer from the document's
last tree when the edit did not move lines (typing inside a line), and otherwise say that GEAK
is still reading the file. So a keystroke in a 6.7 MB file never holds up the server's answers.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from typing import Callable, Optional

from geak_lsp.targets import DocumentTargets, TargetCache, text_key

log = logging.getLogger("geak_lsp")

BACKGROUND_CHARS = 256 * 1024


def apply_change(doc, change) -> bool:
    """Apply an incremental change to a pygls TextDocument by slicing its text, as pygls's own
    ``apply_change`` would, without rewriting the document line by line (pygls 2.1 spends
    about 0.3 s per keystroke on a 6.7 MB file that way). Returns False for what it leaves to
    pygls (a whole-text change, a change past the end, a reversed range)."""
    rng = getattr(change, "range", None)
    if rng is None or not hasattr(doc, "_source"):
        return False
    lines = doc.lines
    r = doc.position_codec.range_from_client_units(lines, rng)
    sl, sc, el, ec = r.start.line, r.start.character, r.end.line, r.end.character
    n = len(lines)
    if sl >= n or el < sl:
        return False
    end = lines[el][ec:] if el < n else ""
    doc._source = "".join(lines[:sl]) + lines[sl][:sc] + change.text + end + "".join(lines[el + 1:])
    return True


class DocumentIndex:
    def __init__(self, cache: TargetCache, document: Callable[[str], object],
                 on_ready: Callable[[str], None] = lambda uri: None, background_chars: int = BACKGROUND_CHARS):
        self.cache = cache
        self.document = document
        """uri -> the open document (pygls TextDocument: ``source``, ``version``)."""
        self.on_ready = on_ready
        self.background_chars = background_chars
        self._keys: dict[str, tuple[object, int, str]] = {}
        self._running: dict[str, asyncio.Future] = {}
        self._running_key: dict[str, str] = {}
        self._newlines: dict[str, int] = {}
        """Newlines in the text of the last tree stored per document."""
        self._again: set[str] = set()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="geak-parse")

    def key(self, uri: str, doc) -> str:
        """The text's key, hashed once per document version."""
        text = doc.source
        memo = self._keys.get(uri)
        if memo is not None and doc.version is not None and memo[0] == doc.version and memo[1] == len(text):
            return memo[2]
        k = text_key(text)
        self._keys[uri] = (doc.version, len(text), k)
        return k

    def big(self, doc) -> bool:
        return len(doc.source) > self.background_chars

    def now(self, uri: str, doc) -> Optional[DocumentTargets]:
        """The targets of the document's current text: computed here for a small document;
        for a large one, if its background parse is done (else it is started and None returned)."""
        key = self.key(uri, doc)
        hit = self.cache.cached(uri, key)
        if hit is not None:
            return hit
        if not self.big(doc):
            return self.cache.get(uri, doc.source, key)
        self._start(uri, doc)
        return None

    def usable(self, uri: str, doc) -> Optional[DocumentTargets]:
        """``now``, or else the last tree while the edit since then moved no lines."""
        hit = self.now(uri, doc)
        if hit is not None:
            return hit
        last = self.cache.last(uri)
        if last is not None and self._newlines.get(uri) == doc.source.count("\n"):
            return last
        return None

    async def wait(self, uri: str, doc, timeout: Optional[float] = None) -> Optional[DocumentTargets]:
        """The targets of the current text, waiting up to ``timeout`` s for a background parse."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            hit = self.now(uri, doc)
            if hit is not None:
                return hit
            fut = self._running.get(uri)
            left = None if deadline is None else deadline - loop.time()
            if fut is None or (left is not None and left <= 0):
                return None
            try:
                await asyncio.wait_for(asyncio.shield(fut), left)
            except asyncio.TimeoutError:
                return None
            except Exception:  # noqa: BLE001 - the parse itself failed: reported by _done
                return None

    def _start(self, uri: str, doc) -> None:
        text, key = doc.source, self.key(uri, doc)
        if uri in self._running:
            if self._running_key.get(uri) != key:
                self._again.add(uri)  # parse the newest text when this one is done
            return
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self._pool, self.cache.compute, uri, text)
        self._running[uri] = fut
        self._running_key[uri] = key
        newlines = text.count("\n")
        fut.add_done_callback(lambda f: self._done(uri, key, newlines, f))

    def _done(self, uri: str, key: str, newlines: int, fut: asyncio.Future) -> None:
        self._running.pop(uri, None)
        self._running_key.pop(uri, None)
        again = uri in self._again
        self._again.discard(uri)
        if fut.cancelled():
            return
        exc = fut.exception()
        if exc is not None:
            log.error("parsing %s failed: %s", uri, exc)
            return
        self.cache.store(uri, key, fut.result())
        self._newlines[uri] = newlines
        if again:  # the text changed while it was parsed: parse the newest one
            try:
                self.now(uri, self.document(uri))
            except Exception:  # noqa: BLE001 - the document was closed
                pass
        try:
            self.on_ready(uri)
        except Exception:  # noqa: BLE001
            log.exception("after parsing %s", uri)

    def forget(self, uri: str) -> None:
        self.cache.forget(uri)
        self._keys.pop(uri, None)
        self._newlines.pop(uri, None)
        self._again.discard(uri)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
