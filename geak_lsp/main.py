"""``geak-lsp``: the transports (stdio, TCP, the client's pipe or socket), the watch on the
editor's process, and leaving without waiting on job threads blocked in an evaluation."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from typing import Optional

from . import handlers  # noqa: F401 - registers what the server answers
from geak_lsp.server import server

log = logging.getLogger("geak_lsp")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(
        prog="geak-lsp", description="The GEAK language server (stdio by default).",
        epilog="--stdio, --pipe=NAME, --socket=PORT and --clientProcessId=PID are the transport arguments "
               "that editors' client libraries (vscode-languageclient) pass; --tcp makes the server listen.")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--stdio", action="store_true", help="talk over stdin/stdout (the default)")
    how.add_argument("--tcp", action="store_true", help="listen on TCP (--host, --port) instead of stdio")
    how.add_argument("--pipe", metavar="NAME", help="connect to the client's named pipe (a Unix socket path)")
    how.add_argument("--socket", metavar="PORT", type=int, help="connect to the client's TCP port on 127.0.0.1")
    p.add_argument("--clientProcessId", dest="client_pid", metavar="PID", type=int,
                   help="exit when this process (the editor) is gone")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=2087)
    p.add_argument("--log-file", help="write the server's own log here (default: stderr, warnings only)")
    args = p.parse_args(argv)
    logging.basicConfig(filename=args.log_file, level=logging.INFO if args.log_file else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.client_pid:
        _watch_client(args.client_pid)
    if args.tcp:
        server.start_tcp(args.host, args.port)
        _exit_now()
        return 0
    if args.pipe or args.socket:
        sock = _connect(args.pipe, args.socket)
        if sock is None:
            return 2
        server.start_io(sock.makefile("rb"), sock.makefile("wb"))
        _exit_now()
        return 0
    # stdout is the protocol: keep it for pygls and send anything else printed (by any library,
    # in any thread) to stderr, so a stray print can never corrupt a message.
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    server.start_io(sys.stdin.buffer, proto_out)
    _exit_now()
    return 0


def _connect(pipe: Optional[str], port: Optional[int]):
    """The client listens and the server connects (vscode-languageclient's pipe and socket
    transports). Returns the connected socket, or None after saying why."""
    import socket
    try:
        if pipe:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(pipe)
        else:
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.settimeout(None)
        return sock
    except OSError as e:
        where = f"pipe {pipe}" if pipe else f"127.0.0.1:{port}"
        print(f"geak-lsp: cannot connect to the client at {where}: {e}", file=sys.stderr)
        return None


def _watch_client(pid: int, every_s: float = 3.0) -> None:
    """Exit when the editor process that started the server is gone (--clientProcessId)."""
    def watch():
        while True:
            time.sleep(every_s)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                log.warning("the client process %d is gone; exiting", pid)
                _exit_now()
            except PermissionError:
                pass  # it exists, under another user

    threading.Thread(target=watch, name="geak-client-watch", daemon=True).start()


def _exit_now() -> None:
    """After ``exit``: cancel the jobs, let the runner stop its idle workers, and leave without
    waiting for job threads that are blocked in an evaluation (its worker ends with it)."""
    server.jobs.shutdown()
    server.projects.close(wait_s=5.0)
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
