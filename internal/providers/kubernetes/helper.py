# Sandgate's in-pod helper for the kubernetes provider (see exec.go for the protocol).
#
# The gateway starts it through pods/exec as
#     python3 -I -S -c <boot> sandgate-helper <token>
# where <boot> reads this source from standard input (8 hex digits of length, then the text)
# and runs it. Everything after that travels in frames, both ways:
#     1 byte type, 4 bytes big-endian length, payload.
# From the gateway (standard input): h = header (JSON), i = program stdin data, I = end of
# program stdin, d = file data, D = end of file data. From the helper (standard output):
# o / e = program stdout / stderr, x = exit status (JSON), r = result (JSON), d = file data,
# D = end of file data, E = error (JSON {kind, msg}). Standard error is only for the
# helper's own crash, which the gateway reports as an error.
import errno
import json
import os
import signal
import stat
import struct
import subprocess
import sys
import threading
import time

TOKEN = sys.argv[2] if len(sys.argv) > 2 else ""
_out_lock = threading.Lock()
_out_closed = False


def send(kind, payload=b"", final=False):
    """Writes one frame; after a final frame nothing more is written."""
    global _out_closed
    if isinstance(payload, str):
        payload = payload.encode("utf-8", "surrogateescape")
    data = struct.pack(">cI", kind.encode(), len(payload)) + payload
    with _out_lock:
        if _out_closed:
            return
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]
        if final:
            _out_closed = True


def send_json(kind, obj, final=False):
    send(kind, json.dumps(obj), final)


def read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(0, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_frame():
    head = read_exact(5)
    if head is None:
        return None, None
    kind, length = struct.unpack(">cI", head)
    payload = read_exact(length) if length else b""
    if payload is None:
        return None, None
    return kind.decode(), payload


class Fail(Exception):
    def __init__(self, kind, msg):
        Exception.__init__(self, msg)
        self.kind = kind
        self.msg = msg


def inside(root, p):
    return p == root or p.startswith(root + "/")


def escapes(rel):
    return Fail("policy", "path '%s' escapes the sandbox workspace" % rel)


def resolve(root, rel):
    """Resolves workspace path rel (clean, relative; "." is the root) as programs see it,
    following symlinks, and refuses a result outside the workspace."""
    p = root if rel == "." else os.path.join(root, rel)
    real = os.path.realpath(p)
    if not inside(root, real):
        raise escapes(rel)
    return real


def resolve_parent(root, rel, create):
    """Returns the real folder that holds rel's last component and that name, making missing
    folders on the way when create is set. A component that is a file is a conflict; a
    symlink is followed and must stay in the workspace."""
    parts = rel.split("/")
    cur = root
    for i, part in enumerate(parts[:-1]):
        nxt = os.path.join(cur, part)
        if os.path.lexists(nxt):
            real = os.path.realpath(nxt)
            if not inside(root, real):
                raise escapes(rel)
            if not os.path.isdir(real):
                raise Fail("conflict", "'%s' is a file, not a folder" % "/".join(parts[: i + 1]))
            cur = real
        elif create:
            try:
                os.mkdir(nxt, 0o755)
            except FileExistsError:
                pass
            cur = os.path.realpath(nxt)
            if not inside(root, cur):
                raise escapes(rel)
        else:
            return None, parts[-1]
    return cur, parts[-1]


def session_members(sid):
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        # state ppid pgrp session ...
        if len(fields) > 3 and int(fields[3]) == sid:
            pids.append(int(name))
    return pids


def signal_session(sid, sig):
    n = 0
    for pid in session_members(sid):
        try:
            os.kill(pid, sig)
            n += 1
        except OSError:
            pass
    return n


def kill_session(sid, grace, alive=None):
    """SIGTERM to every process of session sid, SIGKILL after grace seconds to what is left."""
    signal_session(sid, signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end:
        if not session_members(sid) or (alive is not None and not alive()):
            break
        time.sleep(0.02)
    signal_session(sid, signal.SIGKILL)


def exit_status(rc):
    if rc < 0:
        sig = -rc
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = "SIG%d" % sig
        return {"code": 128 + sig, "signal": name}
    return {"code": rc, "signal": ""}


def op_exec(h, root):
    rel = h.get("dir") or "."
    cwd = resolve(root, rel)
    if not os.path.exists(cwd):
        raise Fail("not-found", "working folder '%s' does not exist" % rel)
    if not os.path.isdir(cwd):
        raise Fail("validation", "working folder '%s' is not a folder" % rel)
    argv = [sys.executable if a == "@python" else a for a in h["argv"]]
    env = dict(os.environ)
    env.update({"HOME": root, "PWD": cwd, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"})
    env.update(h.get("env") or {})

    script = h.get("script")
    pass_fds = ()
    script_w = None
    if script is not None:
        r, script_w = os.pipe()
        if r != 3:
            if script_w == 3:
                script_w = os.dup(script_w)
                os.close(3)
            os.dup2(r, 3)
            os.close(r)
        pass_fds = (3,)

    stdin = subprocess.PIPE if h.get("stdin") else subprocess.DEVNULL
    try:
        proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, pass_fds=pass_fds, close_fds=True,
        )
    except OSError as exc:
        raise Fail("start", "cannot start %s: %s" % (argv[0], exc.strerror))
    if script is not None:
        os.close(3)

        def feed():
            try:
                data = script.encode("utf-8", "surrogateescape")
                view = memoryview(data)
                while view:
                    view = view[os.write(script_w, view) :]
            except OSError:
                pass
            finally:
                os.close(script_w)

        threading.Thread(target=feed, daemon=True).start()

    if proc.stdin is not None:

        def pump():
            fd = proc.stdin.fileno()
            try:
                while True:
                    kind, payload = read_frame()
                    if kind != "i":
                        break
                    view = memoryview(payload)
                    while view:
                        view = view[os.write(fd, view) :]
            except OSError:
                pass
            finally:
                try:
                    proc.stdin.close()
                except OSError:
                    pass

        threading.Thread(target=pump, daemon=True).start()

    def copy(src, kind):
        fd = src.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            send(kind, chunk)

    readers = [
        threading.Thread(target=copy, args=(proc.stdout, "o"), daemon=True),
        threading.Thread(target=copy, args=(proc.stderr, "e"), daemon=True),
    ]
    for t in readers:
        t.start()

    # The gateway kills the session through a second exec when the time is up; this deadline
    # only backs it up when the gateway is gone.
    timed_out = False
    backstop = h.get("backstop") or 0
    grace = h.get("grace") or 2
    try:
        proc.wait(timeout=backstop if backstop > 0 else None)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_session(proc.pid, grace, alive=lambda: proc.poll() is None)
        proc.wait()
    rc = proc.returncode
    # The direct child has ended but is not reaped before wait() returned, so its session id
    # cannot have been reused: kill whatever it left running.
    for _ in range(50):
        if signal_session(proc.pid, signal.SIGKILL) == 0:
            break
        time.sleep(0.01)
    drain = time.monotonic() + (h.get("drain") or 1)
    for t in readers:
        t.join(max(0, drain - time.monotonic()))
    st = exit_status(rc)
    st["timed_out"] = timed_out
    send_json("x", st, final=True)


def op_kill(h, root):
    target = h["token"].encode()
    helper = None
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and argv[-1] == b"":
            argv = argv[:-1]
        if len(argv) >= 2 and argv[-2] == b"sandgate-helper" and argv[-1] == target:
            helper = int(name)
            break
    killed = False
    if helper is not None:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    data = f.read()
            except OSError:
                continue
            fields = data[data.rfind(b")") + 2 :].split()
            pid = int(name)
            if len(fields) > 3 and int(fields[1]) == helper and int(fields[3]) == pid:
                kill_session(pid, h.get("grace") or 2)
                killed = True
    send_json("r", {"found": helper is not None, "killed": killed})


def op_read(h, root):
    rel = h["path"]
    real = resolve(root, rel)
    try:
        st = os.stat(real)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise Fail("not-found", "file '%s' does not exist" % rel)
        raise
    if stat.S_ISDIR(st.st_mode):
        raise Fail("conflict", "'%s' is a folder, not a file" % rel)
    if not stat.S_ISREG(st.st_mode):
        raise Fail("conflict", "'%s' is not a regular file" % rel)
    with open(real, "rb") as f:
        send_json("r", {"size": st.st_size})
        while True:
            chunk = f.read(65536)
            if not chunk:
                break
            send("d", chunk)
    send("D")


def op_list(h, root):
    rel = h["path"]
    real = resolve(root, rel)
    try:
        st = os.stat(real)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise Fail("not-found", "folder '%s' does not exist" % rel)
        raise
    if not stat.S_ISDIR(st.st_mode):
        raise Fail("conflict", "'%s' is a file, not a folder" % rel)
    out = []
    for name in os.listdir(real.encode("utf-8", "surrogateescape")):
        try:
            ls = os.lstat(os.path.join(real.encode("utf-8", "surrogateescape"), name))
        except OSError:
            continue
        if stat.S_ISLNK(ls.st_mode):
            kind = "symlink"
        elif stat.S_ISDIR(ls.st_mode):
            kind = "dir"
        elif stat.S_ISREG(ls.st_mode):
            kind = "file"
        else:
            kind = "other"
        out.append({
            "name": name.hex(), "type": kind, "size": ls.st_size,
            "mode": stat.S_IMODE(ls.st_mode), "mtime_ns": ls.st_mtime_ns,
        })
    send_json("r", out)


def op_write(h, root):
    rel = h["path"]
    limit = h.get("max", -1)
    parent, base = resolve_parent(root, rel, create=True)
    target = os.path.join(parent, base)
    if os.path.islink(target):
        target = os.path.realpath(target)
        if not inside(root, target):
            raise escapes(rel)
        parent = os.path.dirname(target)
    if os.path.isdir(target):
        raise Fail("conflict", "'%s' is a folder" % rel)
    tmp = os.path.join(parent, ".sandgate-upload-%s-%d" % (TOKEN, os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    done = False
    try:
        n = 0
        while True:
            kind, payload = read_frame()
            if kind == "d":
                n += len(payload)
                if 0 <= limit < n:
                    raise Fail("too-large", "'%s' is larger than %d bytes" % (rel, limit))
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
            elif kind == "D":
                break
            else:
                raise Fail("aborted", "the upload of '%s' was broken off" % rel)
        os.close(fd)
        fd = -1
        os.rename(tmp, target)
        done = True
        send_json("r", {"written": n})
    finally:
        if fd >= 0:
            os.close(fd)
        if not done:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def op_remove(h, root):
    rel = h["path"]
    parent, base = resolve_parent(root, rel, create=False)
    if parent is None:
        send_json("r", {"removed": False})
        return
    target = os.path.join(parent, base)
    try:
        st = os.lstat(target)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            send_json("r", {"removed": False})
            return
        raise
    try:
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(target)
        else:
            os.unlink(target)
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise Fail("conflict", "folder '%s' is not empty" % rel)
        raise
    send_json("r", {"removed": True})


OPS = {"exec": op_exec, "kill": op_kill, "read": op_read, "list": op_list, "write": op_write, "remove": op_remove}


def main():
    kind, payload = read_frame()
    if kind != "h":
        sys.exit(3)
    h = json.loads(payload)
    try:
        ws = h["ws"]
        root = os.path.realpath(ws)
        if not os.path.isdir(root):
            raise Fail("workspace", "the workspace folder %s does not exist in the pod" % ws)
        OPS[h["op"]](h, root)
    except Fail as f:
        send_json("E", {"kind": f.kind, "msg": f.msg}, final=True)
    except OSError as exc:
        send_json("E", {"kind": "os", "msg": "%s: %s" % (exc.strerror or exc, exc.filename or "")}, final=True)
    os._exit(0)


main()
