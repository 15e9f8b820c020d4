# The driver of a sandboxd python context (embedded in sandboxd, run as `python -u -c <this>`).
#
# It keeps one namespace, __main__'s, across executions ("cells") and runs each cell sandboxd
# sends it. Protocol, on the Unix stream socket inherited as file descriptor 3:
#
#   every message is [4-byte big-endian length][JSON];
#   driver -> sandboxd, once at start:  {"status": "ready", "pid": ..., "version": "3.11.7"}
#   sandboxd -> driver, per cell:       {"env": {...}, "dir": "/abs/or/empty"} with four file
#       descriptors attached (SCM_RIGHTS): the cell's stdin, stdout, stderr, and a pipe
#       carrying the cell's source (UTF-8) until EOF;
#   driver -> sandboxd, per cell:       {"status": "ok"} | {"status": "exit", "code": n} |
#       {"status": "error", "name": ..., "value": ..., "traceback": ...}.
#
# Between cells the standard descriptors 0, 1 and 2 are /dev/null, so sandboxd sees EOF on a
# cell's pipes as soon as the cell (and any child it left holding them) is done. SIGINT raises
# KeyboardInterrupt inside a cell and is ignored between cells. Works with Python 3.9+
# (socket.recv_fds).
#
# A cell's "env" applies to that cell only, as far as a running interpreter can take it (see
# apply_env): os.environ, the time zone (TZ, time.tzset) and the character-type locale
# (LC_ALL, LC_CTYPE, LANG: LC_CTYPE, which Python sets from them at start). Afterwards each
# variable the cell left at the value it was given gets back its previous value (or is
# removed), and the time zone and the locale follow. What Python reads only at start
# (PYTHONHASHSEED, PYTHONPATH, PYTHONIOENCODING, PYTHONUTF8, ...) does not change the running
# interpreter; it is in os.environ for the programs the cell starts.


def _sandboxd_main():
    import itertools
    import json
    import linecache
    import locale
    import os
    import signal
    import socket
    import struct
    import sys
    import time
    import traceback

    ctl = socket.socket(fileno=3)
    os.set_inheritable(3, False)  # children of cells must not hold the control socket
    namespace = sys.modules["__main__"].__dict__
    devnull = os.open(os.devnull, os.O_RDWR)
    cells = itertools.count(1)

    def send(msg):
        data = json.dumps(msg).encode("utf-8")
        ctl.sendall(struct.pack(">I", len(data)) + data)

    def recv_exact(n):
        buf = b""
        while len(buf) < n:
            chunk = ctl.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                return None
            buf += chunk
        return buf

    def receive():
        head, fds, _, _ = socket.recv_fds(ctl, 4, 8)
        if not head:
            return None, fds
        if len(head) < 4:
            rest = recv_exact(4 - len(head))
            if rest is None:
                return None, fds
            head += rest
        (n,) = struct.unpack(">I", head)
        body = recv_exact(n)
        if body is None:
            return None, fds
        return json.loads(body.decode("utf-8")), fds

    def flush():
        for stream in (sys.stdout, sys.stderr):
            try:
                if stream is not None:
                    stream.flush()
            except Exception:
                pass

    def detach():
        # End the cell's hold on its pipes: everything written so far is flushed, then
        # /dev/null replaces the pipes.
        flush()
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)

    def exit_code(code):
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        try:
            print(code, file=sys.stderr)
        except Exception:
            pass
        return 1

    def error_reply(exc, tb):
        text = "".join(traceback.TracebackException(type(exc), exc, tb).format())
        try:
            sys.stderr.write(text)
        except Exception:
            pass
        try:
            value = str(exc)
        except Exception:
            value = "<unprintable %s>" % type(exc).__name__
        return {"status": "error", "name": type(exc).__name__, "value": value, "traceback": text}

    def apply_env(env):
        # Sets a cell's variables and what the interpreter derives from them at start; returns
        # the function that undoes it after the cell.
        previous = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        if "TZ" in env:
            time.tzset()
        ctype = None  # (before, chosen) when the cell's env chose LC_CTYPE
        if env.keys() & {"LC_ALL", "LC_CTYPE", "LANG"}:
            before = locale.setlocale(locale.LC_CTYPE)
            try:
                chosen = locale.setlocale(locale.LC_CTYPE, "")
            except locale.Error:  # not installed: Python's start ignores it too
                chosen = before
            if chosen in ("C", "POSIX") and before not in ("C", "POSIX"):
                # Python's start coerces the C locale to UTF-8 (PEP 538, 540): keep UTF-8.
                chosen = locale.setlocale(locale.LC_CTYPE, before)
            ctype = (before, chosen)

        def restore():
            for k, v in previous.items():
                if os.environ.get(k) != env[k]:
                    continue  # the cell changed (or removed) it: its change stays
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v
            if "TZ" in env:
                time.tzset()
            if ctype is not None:
                before, chosen = ctype
                try:
                    if locale.setlocale(locale.LC_CTYPE) == chosen:
                        locale.setlocale(locale.LC_CTYPE, before)
                except locale.Error:
                    pass

        return restore

    def run_cell(req, fds):
        stdin_fd, stdout_fd, stderr_fd, code_fd = fds
        with open(code_fd, "rb") as f:
            source = f.read()
        flush()
        os.dup2(stdin_fd, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        for fd in (stdin_fd, stdout_fd, stderr_fd):
            os.close(fd)
        sys.stdin = open(0, "r", closefd=False)
        # A cell that closed (or dropped) sys.stdout or sys.stderr must not silence the next
        # ones: give them a fresh stream on the same descriptor.
        for stream_name, fd in (("stdout", 1), ("stderr", 2)):
            stream = getattr(sys, stream_name)
            if stream is None or getattr(stream, "closed", False):
                setattr(sys, stream_name, open(fd, "w", buffering=1, errors="backslashreplace", closefd=False))
        restore_env = apply_env(req.get("env") or {})
        try:
            try:
                if req.get("dir"):
                    os.chdir(req["dir"])
                text = source.decode("utf-8")
                # Each cell gets its own name, registered with linecache, so tracebacks show
                # the offending lines (also of functions defined by earlier cells).
                name = "<cell %d>" % next(cells)
                linecache.cache[name] = (len(text), None, text.splitlines(True), name)
                code = compile(text, name, "exec")
                signal.signal(signal.SIGINT, signal.default_int_handler)
                exec(code, namespace)
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
        except SystemExit as e:
            return {"status": "exit", "code": exit_code(e.code)}
        except BaseException as e:
            # The first traceback entry is this function's frame: leave it out.
            tb = e.__traceback__.tb_next if e.__traceback__ is not None else None
            return error_reply(e, tb)
        finally:
            restore_env()
        return {"status": "ok"}

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    detach()
    send({"status": "ready", "pid": os.getpid(), "version": sys.version.split()[0]})
    while True:
        req, fds = receive()
        if req is None or len(fds) != 4:
            for fd in fds:
                os.close(fd)
            if req is None:
                return
            send({"status": "error", "name": "ProtocolError", "value": "expected 4 file descriptors", "traceback": ""})
            continue
        try:
            reply = run_cell(req, fds)
        except KeyboardInterrupt as e:  # an interrupt that came late, outside the cell
            reply = error_reply(e, None)
        finally:
            detach()
        send(reply)


def _sandboxd_run():
    # Cells run in __main__'s namespace, so the driver's code gets a private one: a cell that
    # rebinds a builtin name (open, len, Exception...) cannot break it.
    import builtins
    import types

    main = types.FunctionType(_sandboxd_main.__code__, {"__builtins__": builtins, "__name__": "_sandboxd"})
    del globals()["_sandboxd_main"], globals()["_sandboxd_run"]
    main()


_sandboxd_run()
