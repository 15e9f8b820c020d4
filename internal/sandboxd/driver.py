# The driver of a sandboxd python context (embedded in sandboxd, run as `python -u -c <this>`).
#
# It keeps one namespace, __main__'s, across executions ("cells") and runs each cell sandboxd
# sends it. Protocol, on the Unix stream socket inherited as file descriptor 3:
#
#   every message is [4-byte big-endian length][JSON];
#   driver -> sandboxd, once at start:  {"status": "ready", "pid": ..., "version": "3.11.7",
#       "private": "/tmp/sandboxd-python-..."} (its own folder, which sandboxd removes once the
#       driver has ended);
#   sandboxd -> driver, per cell:       {"env": {...}, "dir": "/abs/or/empty",
#       "max_result_bytes": n} with four file descriptors attached (SCM_RIGHTS): the cell's
#       stdin, stdout, stderr, and a pipe carrying the cell's source (UTF-8) until EOF;
#   driver -> sandboxd, per cell:       {"status": "ok"} | {"status": "exit", "code": n} |
#       {"status": "error", "name": ..., "value": ..., "traceback": ...}, after any number of
#       {"status": "result", "data": {mime: value}, "main": bool} (a rich result, as the cell
#       produces it) or {"status": "result", "main": bool, "dropped": {"types": [...],
#       "bytes": n}} (one over the cell's "max_result_bytes", dropped whole).
#
# Between cells the standard descriptors 0, 1 and 2 are /dev/null, so sandboxd sees EOF on a
# cell's pipes as soon as the cell (and any child it left holding them) is done. SIGINT raises
# KeyboardInterrupt inside a cell and is ignored between cells. Works with Python 3.9+
# (socket.recv_fds).
#
# Rich results, as a notebook shows them: the value of the cell's last expression statement
# (the main result; none when it is None or the cell ends with ';'), every display(...), and
# every matplotlib figure shown (plt.show()) or left open at the end of the cell (then
# closed), each a MIME bundle: text/plain, text/html, image/png (base64), ... With IPython
# installed its display machinery makes them (an InteractiveShell, made when first needed or
# when a cell imports IPython, whose formatters and display publisher are the ones
# IPython.display.display uses); without it the same protocol of _repr_*_ methods
# (_repr_mimebundle_, _repr_html_, _repr_png_, ...) is followed here. matplotlib gets the Agg
# backend (MPLBACKEND, unless set) and a private config folder (MPLCONFIGDIR, unless set),
# and pyplot.show renders the open figures as PNG. A cell's results together stay within
# its "max_result_bytes" (a result's size: the bytes of its values as this driver encodes
# them, JSON in UTF-8): one that does not fit is dropped whole and named by its types and
# size.
#
# A cell's "env" applies to that cell only, as far as a running interpreter can take it (see
# apply_env): os.environ, the time zone (TZ, time.tzset) and the character-type locale
# (LC_ALL, LC_CTYPE, LANG: LC_CTYPE, which Python sets from them at start). Afterwards each
# variable the cell left at the value it was given gets back its previous value (or is
# removed), and the time zone and the locale follow. What Python reads only at start
# (PYTHONHASHSEED, PYTHONPATH, PYTHONIOENCODING, PYTHONUTF8, ...) does not change the running
# interpreter; it is in os.environ for the programs the cell starts.


def _sandboxd_main():
    import ast
    import atexit
    import base64
    import builtins
    import importlib.abc
    import io
    import itertools
    import json
    import linecache
    import locale
    import os
    import pprint
    import shutil
    import signal
    import socket
    import struct
    import sys
    import tempfile
    import threading
    import time
    import tokenize
    import traceback
    import types

    own = globals()  # the driver's private globals (see _sandboxd_run), not the cells'
    ctl = socket.socket(fileno=3)
    os.set_inheritable(3, False)  # children of cells must not hold the control socket
    namespace = sys.modules["__main__"].__dict__
    devnull = os.open(os.devnull, os.O_RDWR)
    cells = itertools.count(1)
    sending = threading.Lock()  # a cell's threads may display too

    def encode(value):
        # JSON in the form sandboxd keeps (Go's encoding/json): compact UTF-8, with <, >, &,
        # U+2028 and U+2029 escaped — they occur in strings only — so that a result's size as
        # measured here is its size everywhere. A lone surrogate is escaped too.
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = json.dumps(value, separators=(",", ":"))
        for c, e in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
            text = text.replace(c, e)
        return text.encode("utf-8")

    def send(msg):
        data = encode(msg)
        with sending:
            if threading.current_thread() is not threading.main_thread():
                ctl.sendall(struct.pack(">I", len(data)) + data)
                return
            # An interrupt (a timeout) must not cut a message in two: it waits for the end of
            # the message, then raises in the cell as it would have.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                ctl.sendall(struct.pack(">I", len(data)) + data)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    # ---- rich results ----

    private = None  # the context's own folder (IPython's and matplotlib's files), removed at exit
    try:
        private = tempfile.mkdtemp(prefix="sandboxd-python-")
        atexit.register(shutil.rmtree, private, True)
    except OSError:
        pass
    if private is not None:
        os.environ.setdefault("MPLCONFIGDIR", os.path.join(private, "matplotlib"))
    os.environ.setdefault("MPLBACKEND", "Agg")

    json_types = ("application/json",)
    binary_types = ("image/png", "image/jpeg", "application/pdf")

    class Results:
        # The rich results of the cell that runs: sent as they come, within its byte budget.
        def __init__(self):
            self.lock = threading.Lock()
            self.open = False
            self.budget = 0
            self.used = 0

        def begin(self, budget):
            with self.lock:
                self.open, self.budget, self.used = True, budget, 0

        def end(self):
            with self.lock:
                self.open = False

        def emit(self, data, main=False):
            bundle = {}
            for mime, value in (data or {}).items():
                if not isinstance(mime, str) or value is None:
                    continue
                if isinstance(value, (bytes, bytearray, memoryview)):
                    if mime in binary_types:
                        value = base64.b64encode(bytes(value)).decode("ascii")
                    else:
                        value = bytes(value).decode("utf-8", "replace")
                elif not isinstance(value, str) and not (mime in json_types or mime.endswith("+json")):
                    continue
                bundle[mime] = value
            if not bundle:
                return
            size = 0
            for mime in list(bundle):
                try:
                    size += len(encode(bundle[mime]))
                except (TypeError, ValueError) as e:
                    del bundle[mime]
                    print("sandboxd: the %s data of a result is not JSON and was left out: %s" % (mime, e), file=sys.stderr)
            if not bundle:
                return
            with self.lock:
                if not self.open:
                    return  # a thread of an earlier cell: nobody takes it
                if self.used + size > self.budget:
                    msg = {"status": "result", "main": main, "dropped": {"types": sorted(bundle), "bytes": size}}
                else:
                    self.used += size
                    msg = {"status": "result", "main": main, "data": bundle}
                flush()  # what the cell printed before it comes first
                send(msg)

    results = Results()

    def real_method(obj, name):
        # The method name of obj's class, as IPython looks it up (not an instance attribute,
        # not what a __getattr__ makes up).
        try:
            method = getattr(type(obj), name, None)
        except Exception:
            return None
        if method is None or not callable(method):
            return None
        return getattr(obj, name, None)

    def is_figure(obj):
        for cls in type(obj).__mro__:
            if cls.__module__ == "matplotlib.figure" and cls.__name__ == "Figure":
                return True
        return False

    def figure_png(fig):
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()

    plain_methods = (
        ("text/html", "_repr_html_"),
        ("text/markdown", "_repr_markdown_"),
        ("image/svg+xml", "_repr_svg_"),
        ("image/png", "_repr_png_"),
        ("image/jpeg", "_repr_jpeg_"),
        ("text/latex", "_repr_latex_"),
        ("application/json", "_repr_json_"),
        ("application/javascript", "_repr_javascript_"),
        ("application/pdf", "_repr_pdf_"),
    )

    def formatter_failed(what):
        try:
            sys.stderr.write("sandboxd: %s failed:\n" % what)
            traceback.print_exc()
        except Exception:
            pass

    class PlainFormatter:
        # IPython's formatter protocol, without IPython.
        def format(self, obj, include=None, exclude=None):
            def wanted(mime):
                return (include is None or mime in include) and (exclude is None or mime not in exclude)

            data = {}
            method = real_method(obj, "_repr_mimebundle_")
            if method is not None:
                try:
                    got = method(include=include, exclude=exclude)
                    if isinstance(got, tuple):
                        got = got[0]
                    if isinstance(got, dict):
                        data.update({k: v for k, v in got.items() if wanted(k)})
                except Exception:
                    formatter_failed("%s._repr_mimebundle_" % type(obj).__name__)
            for mime, name in plain_methods:
                if mime in data or not wanted(mime):
                    continue
                method = real_method(obj, name)
                if method is None:
                    continue
                try:
                    got = method()
                except NotImplementedError:
                    continue
                except Exception:
                    formatter_failed("%s.%s" % (type(obj).__name__, name))
                    continue
                if isinstance(got, tuple):
                    got = got[0]
                if got is not None:
                    data[mime] = got
            if "image/png" not in data and wanted("image/png") and is_figure(obj):
                try:
                    data["image/png"] = figure_png(obj)
                except Exception:
                    formatter_failed("rendering the figure")
            if "text/plain" not in data and wanted("text/plain"):
                try:
                    if type(obj) in (list, tuple, dict, set, frozenset):
                        data["text/plain"] = pprint.pformat(obj, width=79, sort_dicts=False)
                    else:
                        data["text/plain"] = repr(obj)
                except Exception:
                    formatter_failed("repr(%s)" % type(obj).__name__)
            return data, {}

        def display(self, *objs, include=None, exclude=None, metadata=None, raw=False, **kwargs):
            for obj in objs:
                if raw:
                    if isinstance(obj, dict):
                        results.emit(obj)
                    continue
                method = real_method(obj, "_ipython_display_")
                if method is not None:
                    method()
                    continue
                data, _ = self.format(obj, include=include, exclude=exclude)
                results.emit(data)

    class Rich:
        # The machinery that formats and displays: IPython's when it imports, else ours.
        def __init__(self):
            self.impl = None
            self.shell = None

        def get(self):
            if self.impl is None:
                self.impl = self.ipython() or PlainFormatter()
            return self.impl

        def ipython(self):
            if private is None:
                return None
            try:
                from IPython.core.displaypub import DisplayPublisher
                from IPython.core.interactiveshell import InteractiveShell
                from traitlets.config import Config
            except Exception:
                return None
            if self.shell is not None:
                return self.ipython_formatter()

            class Publisher(DisplayPublisher):
                def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
                    results.emit(data)

                def clear_output(self, wait=False):
                    pass

            try:
                if InteractiveShell.initialized():
                    shell = InteractiveShell.instance()  # the cell made one: use it
                else:
                    config = Config()
                    config.HistoryManager.enabled = False
                    # Its own namespace: IPython's names (In, Out, exit, ...) stay out of the cell's.
                    shell = InteractiveShell.instance(
                        config=config,
                        ipython_dir=os.path.join(private, "ipython"),
                        user_module=types.ModuleType("_sandboxd_ipython"),
                    )
                shell.display_pub = Publisher(shell=shell, parent=shell)

                def showtraceback(exc_tuple=None, *args, **kwargs):
                    # A formatter's failure (IPython shows it in colour on stdout): on stderr,
                    # as Python prints it.
                    try:
                        sys.stderr.write("sandboxd: formatting a result failed:\n")
                        traceback.print_exception(*(exc_tuple or sys.exc_info()))
                    except Exception:
                        pass

                shell.showtraceback = showtraceback
                png = shell.display_formatter.formatters.get("image/png")
                if png is not None:
                    png.for_type_by_name("matplotlib.figure", "Figure", figure_png)
            except Exception:
                formatter_failed("starting IPython's display machinery")
                return None
            self.shell = shell
            return self.ipython_formatter()

        def ipython_formatter(self):
            shell = self.shell

            class IPythonFormatter:
                def format(self, obj, include=None, exclude=None):
                    return shell.display_formatter.format(obj, include=include, exclude=exclude)

                def display(self, *objs, **kwargs):
                    from IPython.display import display

                    display(*objs, **kwargs)

            return IPythonFormatter()

    rich = Rich()

    def display(*objs, include=None, exclude=None, metadata=None, transient=None, display_id=None, raw=False, clear=False, **kwargs):
        """Show objects as rich results of the cell (IPython's display)."""
        rich.get().display(*objs, include=include, exclude=exclude, metadata=metadata, raw=raw)

    builtins.display = display

    def flush_figures(skip=()):
        # Every open matplotlib figure becomes a result (but those in skip), then all close.
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        try:
            from matplotlib._pylab_helpers import Gcf

            figures = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
        except Exception:
            return
        try:
            for fig in figures:
                if any(fig is s for s in skip):
                    continue
                try:
                    png = figure_png(fig)
                except Exception:
                    formatter_failed("rendering a figure")
                    continue
                results.emit({"text/plain": repr(fig), "image/png": png})
        finally:
            close_figures()

    def close_figures():
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None:
            try:
                pyplot.close("all")
            except Exception:
                pass

    def pyplot_show(*args, **kwargs):
        """Show the open figures as results of the cell (sandboxd's pyplot.show)."""
        flush_figures()

    def after_import(module):
        name = module.__name__
        if name == "matplotlib.pyplot":
            module.show = pyplot_show
        elif name == "IPython":
            rich.get()  # display() of IPython needs its shell: make it now

    class AfterImport(importlib.abc.MetaPathFinder):
        # Calls after_import once matplotlib.pyplot or IPython has been imported.
        names = ("matplotlib.pyplot", "IPython")

        def find_spec(self, fullname, path, target=None):
            if fullname not in self.names:
                return None
            for finder in sys.meta_path:
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
            if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            spec.loader = HookedLoader(spec.loader)
            return spec

    class HookedLoader(importlib.abc.Loader):
        def __init__(self, loader):
            self.loader = loader

        def __getattr__(self, name):
            return getattr(self.loader, name)

        def create_module(self, spec):
            return self.loader.create_module(spec)

        def exec_module(self, module):
            self.loader.exec_module(module)
            try:
                after_import(module)
            except Exception:
                formatter_failed("preparing %s" % module.__name__)

    sys.meta_path.insert(0, AfterImport())

    def quiet(text):
        # The cell ends with ';' (comments aside): its last value is not shown, as in IPython.
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError):
            return False
        for tok in reversed(tokens):
            if tok.type in (tokenize.ENDMARKER, tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            return tok.type == tokenize.OP and tok.string == ";"
        return False

    def compile_cell(text, name):
        # The cell's code and, when it ends with an expression statement, that expression
        # apart, so that its value can be the main result.
        tree = compile(text, name, "exec", ast.PyCF_ONLY_AST)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not quiet(text):
            last = ast.Expression(tree.body.pop().value)
            last = compile(last, name, "eval")
        return compile(tree, name, "exec"), last

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
                code, last = compile_cell(text, name)
                results.begin(max(int(req.get("max_result_bytes") or 0), 0))
                signal.signal(signal.SIGINT, signal.default_int_handler)
                # Figures shown or left open are results also when the cell failed; those of
                # an interrupted cell are closed, not rendered.
                try:
                    exec(code, namespace)
                    value = None if last is None else eval(last, namespace)
                    if value is not None:
                        data, _ = rich.get().format(value)
                        results.emit(data, main=True)
                except KeyboardInterrupt:
                    close_figures()
                    raise
                except BaseException:
                    flush_figures()
                    raise
                flush_figures(skip=(value,))  # a figure that is the main result is shown once
            finally:
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                results.end()
        except SystemExit as e:
            return {"status": "exit", "code": exit_code(e.code)}
        except BaseException as e:
            # The first traceback entries are this function's frames: leave them out.
            tb = e.__traceback__
            while tb is not None and tb.tb_frame.f_globals is own:
                tb = tb.tb_next
            return error_reply(e, tb)
        finally:
            restore_env()
        return {"status": "ok"}

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    detach()
    send({"status": "ready", "pid": os.getpid(), "version": sys.version.split()[0], "private": private or ""})
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
