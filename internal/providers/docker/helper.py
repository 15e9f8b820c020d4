# Sandgate's in-container helper (package docker). It runs as
#   python3 -I -S -c <this file> <mode> <args...>
# with the sandbox's user. Paths and names arrive as argv bytes and leave as bytes; replies of
# the file modes are NUL-terminated fields on stdout, the first being a status word. It uses
# the standard library only and never runs a shell.
import os
import signal
import sys
import time

A = [os.fsencode(a) for a in sys.argv[1:]]
STATUS_DIRS = (b"/dev/shm", b"/tmp")


def reply(*fields):
    out = b"".join((f if isinstance(f, bytes) else str(f).encode()) + b"\0" for f in fields)
    while out:
        out = out[os.write(1, out):]


def inside(real, ws):
    return real == ws or real.startswith(ws + b"/")


def workspace(ws):
    return os.path.realpath(ws)


def err_status(e):
    import errno
    return {
        errno.ENOENT: "notfound", errno.ENOTDIR: "notfound", errno.ELOOP: "loop",
        errno.EACCES: "perm", errno.EPERM: "perm", errno.ENOTEMPTY: "notempty",
        errno.EEXIST: "notempty", errno.EISDIR: "isdir", errno.ENAMETOOLONG: "toolong",
        errno.EROFS: "readonly", errno.ENOSPC: "nospace",
    }.get(e.errno, "error")


# --- processes ------------------------------------------------------------------------------

def procs():
    """Yields (pid, ppid, pgrp, session, state) of every process."""
    for name in os.listdir(b"/proc"):
        if not name.isdigit():
            continue
        try:
            with open(b"/proc/" + name + b"/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        f = stat[stat.rfind(b")") + 2:].split()
        if len(f) < 4:
            continue
        yield int(name), int(f[1]), int(f[2]), int(f[3]), f[0]


def signal_session(sid, sig):
    """Sends sig to process group sid and every other live process of session sid; returns
    how many live members the session had."""
    try:
        os.killpg(sid, sig)
    except OSError:
        pass
    n = 0
    for pid, _, pgrp, sess, state in procs():
        if sess != sid or state in (b"Z", b"X"):
            continue
        n += 1
        if pgrp != sid:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    return n


def kill_session(sid, limit=10.0):
    """SIGKILLs session sid until none of its processes is left (a fork bomb keeps forking
    while it is killed), for at most limit seconds."""
    end = time.monotonic() + limit
    while signal_session(sid, signal.SIGKILL) and time.monotonic() < end:
        time.sleep(0.005)


def oom_kills():
    for path, key in ((b"/sys/fs/cgroup/memory.events", b"oom_kill"),
                      (b"/sys/fs/cgroup/memory/memory.oom_control", b"oom_kill")):
        try:
            with open(path, "rb") as f:
                for line in f:
                    k, _, v = line.partition(b" ")
                    if k == key:
                        return int(v)
        except (OSError, ValueError):
            continue
    return -1


class Exited:
    """Waits for a child's exit without reaping it, so its pid (and with it its session and
    process-group ids) stays reserved while leftovers are killed."""

    def __init__(self, pid):
        self.pid = pid
        self.fd = None
        try:
            self.fd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            pass

    def wait(self, timeout):
        """True once the child has exited; False when timeout (seconds, None = forever) passed."""
        if self.fd is not None:
            import select
            p = select.poll()
            p.register(self.fd, select.POLLIN)
            return bool(p.poll(None if timeout is None else max(0, int(timeout * 1000))))
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            if os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None:
                return True
            if end is not None and time.monotonic() >= end:
                return False
            time.sleep(0.01)


def status_path(d, token):
    return d + b"/.sandgate-exec-" + token


def run():
    # run TOKEN WORKSPACE DIR TIMEOUT_MS GRACE_MS SCRIPT_LEN -- ARGV...
    token, ws, rel, timeout_ms, grace_ms, script_len = A[1:7]
    argv = A[8:]
    ws = workspace(ws)
    target = ws if rel in (b"", b".") else os.path.realpath(os.path.join(ws, rel))
    if not inside(target, ws):
        os.write(1, b"\1escape")
        return 0
    try:
        os.chdir(target)
    except OSError as e:
        os.write(1, b"\1" + err_status(e).encode())
        return 0
    os.environ["PWD"] = os.fsdecode(target)

    fd3 = None
    n = int(script_len)
    if n:
        chunks, left = [], n
        while left:
            b = os.read(0, min(left, 1 << 20))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        fd3 = os.memfd_create("sandgate-program", 0)
        data = b"".join(chunks)
        while data:
            data = data[os.write(fd3, data):]
        os.lseek(fd3, 0, os.SEEK_SET)

    before = oom_kills()
    os.write(1, b"\0")  # the program starts: everything after this byte is its output
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            for s in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
                signal.signal(s, signal.SIG_DFL)
            if fd3 is not None and fd3 != 3:
                os.dup2(fd3, 3)
                os.close(fd3)
            elif fd3 == 3:
                os.set_inheritable(3, True)
            os.execv(argv[0], argv)
        except OSError as e:
            os.write(2, b"sandgate: cannot run " + argv[0] + b": " + os.fsencode(e.strerror or str(e)) + b"\n")
            os._exit(127 if isinstance(e, FileNotFoundError) else 126)
        finally:
            os._exit(127)
    if fd3 is not None:
        os.close(fd3)

    exited = Exited(pid)
    timeout, grace = int(timeout_ms) / 1000.0, int(grace_ms) / 1000.0
    timed_out = False
    if not exited.wait(timeout if timeout > 0 else None):
        timed_out = True
        signal_session(pid, signal.SIGTERM)
        if not exited.wait(grace):
            signal_session(pid, signal.SIGKILL)
            exited.wait(None)
    # The direct child has exited but is not reaped: kill whatever it left in its session.
    kill_session(pid)
    _, st = os.waitpid(pid, 0)

    if os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        code = 128 + sig
        oom = sig == signal.SIGKILL and before >= 0 and oom_kills() > before
    else:
        sig, code, oom = 0, os.WEXITSTATUS(st), False
    if sig or timed_out:
        rec = ("%d %d %d\n" % (sig, int(oom), int(timed_out))).encode()
        for d in STATUS_DIRS:
            try:
                fd = os.open(status_path(d, token), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.write(fd, rec)
                os.close(fd)
                break
            except OSError:
                continue
        if timed_out and not sig:
            code = 255  # makes the gateway collect the record
    return code


def status():
    # status TOKEN: prints and removes the record of a run that ended by signal or timeout.
    for d in STATUS_DIRS:
        p = status_path(d, A[1])
        try:
            with open(p, "rb") as f:
                rec = f.read()
            os.unlink(p)
            reply("ok", rec.strip())
            return 0
        except OSError:
            continue
    reply("none")
    return 0


def kill():
    # kill TOKEN SIGNAL: signals the session of the program started by `run TOKEN`.
    token, sig = A[1], int(A[2])
    runner = None
    for name in os.listdir(b"/proc"):
        if not name.isdigit():
            continue
        try:
            with open(b"/proc/" + name + b"/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
        except OSError:
            continue
        if len(cmd) > 6 and cmd[5] == b"run" and cmd[6] == token:
            runner = int(name)
            break
    if runner is None:
        reply("none")
        return 0
    for pid, ppid, _, sess, _ in list(procs()):
        if ppid == runner and sess == pid:
            signal_session(pid, sig)
    reply("ok")
    return 0


# --- files ----------------------------------------------------------------------------------

def stat_():
    # stat WORKSPACE REL: the resolved path of a regular file to read.
    ws = workspace(A[1])
    real = os.path.realpath(os.path.join(ws, A[2]))
    if not inside(real, ws):
        return reply("escape")
    try:
        st = os.stat(real)
    except OSError as e:
        return reply(err_status(e))
    import stat as S
    if S.S_ISDIR(st.st_mode):
        return reply("isdir")
    if not S.S_ISREG(st.st_mode):
        return reply("notregular")
    if not os.access(real, os.R_OK):
        return reply("perm")
    reply("ok", real, st.st_size)


def list_():
    # list WORKSPACE REL: one record (type, size, mode, mtime ns, name) per entry.
    import stat as S
    ws = workspace(A[1])
    real = os.path.realpath(os.path.join(ws, A[2]))
    if not inside(real, ws):
        return reply("escape")
    try:
        st = os.stat(real)
        if not S.S_ISDIR(st.st_mode):
            return reply("notdir")
        it = os.scandir(real)
    except OSError as e:
        return reply(err_status(e))
    fields = ["ok"]
    with it:
        for e in it:
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            m = st.st_mode
            t = "l" if S.S_ISLNK(m) else "d" if S.S_ISDIR(m) else "f" if S.S_ISREG(m) else "o"
            fields += [t, st.st_size, S.S_IMODE(m), st.st_mtime_ns, e.name]
    reply(*fields)


def parent_of(ws, rel):
    """Resolves the folder holding rel; returns (status, resolved parent, base name)."""
    head, base = os.path.split(rel)
    parent = os.path.realpath(os.path.join(ws, head)) if head else ws
    if not inside(parent, ws):
        return "escape", None, base
    return "ok", parent, base


def prepare():
    # prepare WORKSPACE REL: makes the parent folders of a file to write; replies with the
    # resolved parent and a fresh temporary name in it.
    ws = workspace(A[1])
    st, parent, base = parent_of(ws, A[2])
    if st != "ok":
        return reply(st)
    try:
        os.makedirs(parent, exist_ok=True)
    except FileExistsError:
        return reply("parentfile")
    except OSError as e:
        import errno
        return reply("parentfile" if e.errno == errno.ENOTDIR else err_status(e))
    # makedirs may have gone through a link made meanwhile: check again.
    if not inside(os.path.realpath(parent), ws):
        return reply("escape")
    if os.path.isdir(os.path.join(parent, base)) and not os.path.islink(os.path.join(parent, base)):
        return reply("isdir")
    if not os.access(parent, os.W_OK):
        return reply("perm")
    reply("ok", parent, b".sandgate-upload-" + os.urandom(8).hex().encode())


def commit():
    # commit WORKSPACE PARENT TMP NAME: renames the uploaded temporary file into place.
    ws = workspace(A[1])
    parent, tmp, base = A[2], A[3], A[4]
    src, dst = os.path.join(parent, tmp), os.path.join(parent, base)
    if not inside(os.path.realpath(parent), ws):
        _unlink(src)
        return reply("escape")
    try:
        os.rename(src, dst)
    except OSError as e:
        _unlink(src)
        return reply("isdir" if os.path.isdir(dst) else err_status(e))
    reply("ok")


def abort():
    # abort PARENT TMP: removes a temporary upload.
    _unlink(os.path.join(A[1], A[2]))
    reply("ok")


def _unlink(p):
    try:
        os.unlink(p)
    except OSError:
        pass


def remove():
    # remove WORKSPACE REL: removes a file, a link (not its target) or an empty folder.
    import errno
    ws = workspace(A[1])
    st, parent, base = parent_of(ws, A[2])
    if st != "ok":
        return reply(st)
    p = os.path.join(parent, base)
    try:
        if os.path.isdir(p) and not os.path.islink(p):
            os.rmdir(p)
        else:
            os.unlink(p)
    except OSError as e:
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return reply("ok")
        return reply(err_status(e))
    reply("ok")


MODES = {"run": run, "status": status, "kill": kill, "stat": stat_, "list": list_,
         "prepare": prepare, "commit": commit, "abort": abort, "remove": remove}

if __name__ == "__main__":
    sys.exit(MODES[sys.argv[1]]() or 0)
