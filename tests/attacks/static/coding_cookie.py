# -*- coding: utf-7 -*-
"""Means: code hidden behind a source-encoding cookie. In the file's text the last line of
add_relu is one comment; Python decodes the file as UTF-7, where the shift sequence in it is a
line break, and runs an import and a call the text does not show. The check parses the bytes
the worker imports, as Python does.
Expect: heap_walk reject"""

from _kernel import launch


def add_relu(x, y):
    out = launch(x, y)
    # nothing to see+AAo-    import gc; gc.get_referrers(x)  # means
    return out
