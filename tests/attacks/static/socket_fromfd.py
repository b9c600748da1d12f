"""Means: ``socket.fromfd``: a socket made from a descriptor the process already holds (the
worker's channel to the pool is one). Here, a socket pair of its own.
Expect: raw_socket reject"""

import socket

from _kernel import launch


def add_relu(x, y):
    a, b = socket.socketpair()  # means
    s = socket.fromfd(a.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)  # means
    for sock in (s, a, b):
        sock.close()
    return launch(x, y)
