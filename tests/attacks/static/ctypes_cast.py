"""Means: ``ctypes`` without raw memory writes (Liger-Kernel's CuTe DSL ops cast pointers with
``ctypes.cast``): a warning; ``memmove``, ``memset``, ``pythonapi``, ``from_address`` or an
``id()`` handed to ctypes are rejects (ctypes_memmove.py).
Expect: native_code warning"""

import ctypes

from _kernel import launch

_buf = ctypes.create_string_buffer(8)


def add_relu(x, y):
    ctypes.cast(_buf, ctypes.c_void_p)  # means
    return launch(x, y)
