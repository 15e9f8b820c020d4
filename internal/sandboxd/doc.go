// Package sandboxd is the runtime of sandboxd, the agent that runs inside every sandbox
// container: it runs programs and stateful code contexts in one workspace folder and moves
// that folder's files. Package remote serves a Runtime over HTTP and is the gateway's client
// of it; cmd/sandboxd is the binary. This package knows nothing of HTTP or of the gateway's
// configuration, so the binary stays small.
//
// # Requests
//
// An ExecRequest gives exactly one of Command, Argv or Code (with Language python or bash);
// anything else, an Env name that is not letters, digits and underscores (not starting with a
// digit), a NUL byte, a negative Timeout or MaxOutput, or a bad context name is a
// fault.Validation error before anything runs. Paths (ExecRequest.Dir and the file methods)
// are relative and slash-separated, "" or "." being the workspace; "..", absolute paths and
// symlinks leading out of the workspace are refused with fault.Policy (files go through an
// os.Root on the workspace).
//
// # Plain executions (ExecRequest.Context == "")
//
//   - Command runs as `/bin/sh -c <command>`, python code as `<python> -c <code>`, bash code as
//     `<bash> -c <code>`, and Argv as is, argv[0] looked up on the PATH of the program's
//     environment (a name with a slash is taken relative to the working folder). Program text
//     over 64 KiB goes through a pipe on file descriptor 3 instead of argv. An argv[0] that
//     is missing gives exit code 127, one that cannot be executed 126, with a "sandboxd: …"
//     line on stderr; a missing interpreter or /bin/sh is a fault.Capability error;
//   - the environment is the base (Options.Env, or a minimal one), then PWD set to the working
//     folder, then ExecRequest.Env; the working folder is Dir (default: the workspace); stdin
//     is ExecRequest.Stdin (or, in process, the StdinReader it streams from), or empty; a
//     copy still blocked in the reader's Read when the program ends is abandoned after
//     Options.DrainDelay;
//   - every execution runs in its own session (setsid, package procgroup). It ends when the
//     program (the direct child) exits; whatever it left running in its session is then
//     killed with SIGKILL, so `sleep 100 &` holding stdout cannot hang the call, and output
//     already written is kept. With Options.Cgroups the execution also has a cgroup of its
//     own, created with it, and every process in it is signalled and killed the same way —
//     also one that escaped the session (setsid, a double fork) — and the cgroup is removed.
//     Without cgroups but with Options.Subreaper (cmd/sandboxd in a container), the runtime's
//     process is the child subreaper of everything it starts: a process that escaped its
//     session becomes its child when its parent exits, and is killed (with its session) once
//     every execution that was running when it started has ended — at the end of the
//     execution that started it, unless others overlapped it. Without either, such a process
//     is not killed; output it holds open is read for at most Options.DrainDelay;
//   - on Timeout (wall clock from the start) or when the caller's context ends, every process
//     of the session gets SIGTERM, and SIGKILL after Options.KillGrace — with the cgroup all
//     of its processes; without it also every descendant that left the session (setsid)
//     while its parents live, found through /proc and remembered, so it gets the SIGKILL
//     even when its parent ended on the SIGTERM. Result.TimedOut says so, or Exec returns
//     ctx.Err() with the partial Result;
//   - Result.ExitCode is the exit status, or 128+n with Result.Signal ("SIGKILL") when signal
//     n killed the program; Result.OOMKilled says the oom_kill counter of
//     /sys/fs/cgroup/memory.events moved during the execution (false without that file).
//
// Output is written to the Streams as it is produced (pipe reads of at most 32 KiB, each
// written on at once), each stream capped at MaxOutput bytes (default DefaultMaxOutput): the
// rest is read and dropped and Result.Truncated is set. The two writers may be called from
// two goroutines, never concurrently for one writer; when both are the same writer, writes are
// serialised.
//
// # Kept executions
//
// Start runs an execution detached from its caller, under an id (ExecRequest.ID): it runs on
// whoever follows it, until its program ends, its Timeout, Stop, or Close. It keeps the start
// and the end of each stream (ExecutionLogBytes in all, package outlog) and, for KeepEnded
// after it ended, how it ended (Execution.End) — unless Forget drops it once its caller has
// its end. Executions lists them; at most MaxExecutions are kept, ended ones making room.
// Only a kept execution may set:
//
//   - StdinOpen: standard input is a pipe that WriteStdin feeds (after Stdin, its first
//     write), writes of concurrent callers never interleaving, until CloseStdin (EOF) or the
//     program's end; a program that does not read blocks the writer once the pipe is full;
//   - PTY: the program runs on a new pseudo-terminal of the given size as its controlling
//     terminal (stdin, stdout and stderr; TERM=xterm-256color unless Env sets it): its
//     output arrives on Stdout only, WriteStdin types into it, CloseStdin sends ^D, and
//     Resize changes its size (the program gets SIGWINCH);
//   - Background: a long-lived process (a server). It does not count as a running execution
//     for the subreaper (above): a process that escapes another execution while only
//     background ones run is ended within a second, and so is one a background process
//     hands over by daemonizing (its parent exits) — run servers in the foreground of their
//     command. Stop ends the whole tree like a timeout: its session, its descendants in
//     sessions of their own (setsid) and, with a cgroup, everything in it.
//
// # Contexts
//
// A context is a named, long-lived interpreter (names: 1 to 64 of A-Z a-z 0-9 _ . -). An
// execution with Context set must give Code in the context's language; a context that does
// not exist is created with that language. Executions in one context run one at a time, in
// arrival order as far as the Go scheduler goes; different contexts run concurrently.
//
// A python context is a persistent `<python> -u -c <driver>` process (driver.py, Python
// 3.9+) in its own session, started in the workspace with the base environment. Per
// execution sandboxd makes fresh pipes for stdin, stdout, stderr and the code and passes them
// over a Unix socket (SCM_RIGHTS); the driver makes them its descriptors 0, 1 and 2, applies
// Env (below), changes to Dir when given (the working folder otherwise stays where earlier
// code left it), and runs the code with exec in __main__'s namespace, which persists.
// Afterwards it puts /dev/null back on 0, 1 and 2, so the execution ends at once unless a
// child it started holds the pipes (then DrainDelay). Outcomes:
//
//   - an exception prints its traceback (without driver frames) to stderr and gives
//     ExitCode 1 and Result.Error; the context lives on;
//   - SystemExit gives its code as ExitCode; the context and its state live on;
//   - on Timeout or cancellation every process of the context's session gets SIGINT, like
//     Ctrl-C in a terminal: KeyboardInterrupt in the code (Result.Error), children started by
//     it end too, and the state survives. Without an answer within KillGrace the whole
//     session is killed;
//   - when the driver dies (os._exit, a signal, the OOM killer, the kill above) the execution
//     reports the exit status (or 128+n and Signal), Result.ContextLost, and a stderr line
//     "sandboxd: the python context '<name>' ended (…); its state is lost and the next
//     execution starts a fresh one". The next execution starts a fresh interpreter.
//
// Processes a python execution starts end with it, as those of a plain execution do: once
// the driver answered (or was interrupted), every other process of the context's session,
// every descendant of the driver (also one in a session of its own), and with a cgroup every
// other process in the context's cgroup is killed; the driver, and so the context's state,
// runs on. A process handed to the subreaper (a double-forked daemon) ends with the
// execution like any escapee; without cgroups or subreaper it is not found. So
// subprocess.Popen, os.system("x &") and multiprocessing workers do not outlive their cell
// (a Popen kept in a variable reports returncode -9 in the next one): a long-lived server
// is a background execution (Start with Background), which counts as one and can be
// stopped.
//
// Env applies to that execution only, as far as a running interpreter can take it: the
// variables are set in os.environ (so programs the code starts get them); TZ also becomes the
// interpreter's time zone (time.tzset: time.localtime, time.strftime, datetime's local time);
// LC_ALL, LC_CTYPE or LANG naming an installed locale also set the LC_CTYPE locale, as
// Python's start does from them (a C or POSIX locale keeps the interpreter's UTF-8 one, as
// Python's start coerces it; the other categories stay as the code set them, and
// locale.setlocale(locale.LC_ALL, "") in the code picks up the execution's variables). After
// the execution each variable the code left at its given value gets back its previous value
// (or is removed) — one the code changed or removed keeps the code's change, as in a bash
// context — and the time zone and LC_CTYPE follow. What Python reads only when it starts does
// not change for an execution: PYTHONHASHSEED (str hashes), PYTHONPATH (sys.path),
// PYTHONIOENCODING and PYTHONUTF8 (the standard streams' encoding), PYTHONDONTWRITEBYTECODE
// and the like are only in os.environ; RestartContext does not apply them either (the
// interpreter starts with the base environment).
//
// # Rich results
//
// Code in a python context also gives rich results, as a notebook shows them
// (Result.Results, in order; each also to Streams.ResultFunc as the code produces it): the
// value of the code's last statement when that is an expression whose value is not None and
// the code does not end with ';' (the main result, Jupyter's execute_result; the statements
// before it run first, then the expression, once), every display(...) (a builtin, as in
// IPython), and every matplotlib figure shown (pyplot.show) or still open at the end of the
// execution — rendered as PNG and closed; one that is the main result is shown once. Each is a
// MIME bundle (RichResult): text/plain (the repr, IPython's pretty form), text/html, image/png,
// image/svg+xml, image/jpeg, application/json, text/markdown, text/latex and any other type an
// object's _repr_mimebundle_ gives. With IPython importable (Debian's python3-ipython) its
// display machinery makes them: an InteractiveShell with its own namespace and a private
// folder, made when a result is first formatted or when the code imports IPython, so that
// IPython.display.display reaches it; none of its names (In, Out, exit, …) enter the code's
// namespace. Without IPython the driver follows the same protocol itself (_repr_mimebundle_,
// then _repr_html_, _repr_markdown_, _repr_svg_, _repr_png_, _repr_jpeg_, _repr_latex_,
// _repr_json_, _repr_javascript_, _repr_pdf_, looked up on the class; text/plain from repr,
// pprint for built-in containers). A format that raises is left out and its traceback goes to
// stderr. matplotlib gets the Agg backend (MPLBACKEND, unless set: programs the code starts
// inherit it) and a config folder of the context's own (MPLCONFIGDIR, unless set), removed
// with the context. A display from a thread of the code counts while the execution runs and
// is lost between executions; an execution that raised keeps the results it gave before and
// shows its open figures; an interrupted one closes them unshown.
//
// An execution's results together stay within ExecRequest.MaxResults (default: the output
// cap, at most DefaultMaxOutput), measured as RichResult.Size: a result that does not fit
// what is left is dropped whole — never cut into invalid bytes — and stays in the list as
// RichResult.Dropped, naming its types and size; later, smaller ones still fit. Data that does
// not have its type's form (a string; valid base64 for image/png, image/jpeg and
// application/pdf; any JSON value for application/json and "+json" types) is left out.
//
// A bash context keeps no process. Each execution is a fresh `bash --noprofile --norc` (same
// session, timeout and output handling as a plain execution) that restores the exported
// variables and working folder the previous execution saved, sources the code, and on exit
// (also `exit N`; an EXIT trap the code sets replaces sandboxd's and loses the state) saves
// `export -p` and the working folder into a private 0700 folder under os.TempDir. Env applies
// to that execution only, unless the code changes the variable; bash applies TZ and the
// locale variables as they are set, so its time zone and locale (and those of the programs it
// starts) are the execution's, and the next execution has the previous ones again. Dir
// overrides the saved working folder. State is kept only when it was saved completely; a
// killed execution may lose its changes.
//
// With Options.StateFile the runtime keeps the names and languages of its contexts in that
// file. A runtime started on a file an earlier one wrote (the sandbox restarted: its
// processes, and so every context's state, are gone) creates a listed context afresh on its
// first execution, which reports Result.ContextReset and a stderr line "sandboxd: the <lang>
// context '<name>' was lost when the sandbox restarted; …", once. CreateContext of such a name
// reports nothing: the caller made it anew.
//
// RestartContext starts a python context's interpreter afresh (globals gone) or makes a bash
// context forget its state; DeleteContext ends and forgets a context. Both first end an
// execution running in it, which reports ContextLost. Close ends every execution and context.
//
// # Ports
//
// DialPort connects to a TCP port on the sandbox's loopback (127.0.0.1, else ::1) from the
// runtime's own network namespace: the gateway's preview ports reach a server a program
// started through it (package remote tunnels the connection), so nothing is published on a
// host. A port nobody listens on is fault.Conflict.
//
// # Files
//
// WriteFile streams into a hidden temporary file in the target folder and renames it into
// place (mode 0644) only when complete and within the size limit, so a failed or oversized
// upload (fault.TooLarge) leaves nothing behind. ReadFile follows symlinks only inside the
// workspace; ListFiles lists without following them; RemoveFile removes a file, a symlink or
// an empty folder, and a missing path is not an error.
//
// # Workspace archives
//
// ArchiveWorkspace writes the whole workspace as a tar stream (the gateway's snapshots):
// folders, regular files and symlinks as links (never followed), with permission bits and
// modification times, no owners; sockets, FIFOs and devices are not content and are left
// out. A file with holes is archived as its data regions only (GNU's PAX sparse format 1.0,
// which GNU tar and bsdtar read), so an archive holds what the files hold, not their
// lengths in zeros. It reads through the workspace's os.Root and copies in constant memory;
// a file that shrinks while it is read fails it (fault.Conflict) rather than giving an
// inconsistent archive. ExtractWorkspace extracts such a stream into an empty workspace
// (fault.Conflict otherwise), more strictly than os.Root alone confines: absolute names,
// ".." elements, entries through a symlink the archive made, hard links to anything but a
// file extracted before them, and device nodes are fault.Policy; other entry types and
// repeated names fault.Validation. What comes back is the same whoever extracts it:
// permission bits, the sticky bit and the times of files and folders are kept, setuid and
// setgid are dropped (the extracting user owns everything), symlinks stay links, empty
// folders stay, and every run of zero blocks becomes a hole — a sparse file comes back
// sparse and a file of zeros takes no room. The caller's byte limit bounds the bytes
// written, holes not counted, and a workspace whose file system fills up (a bounded disk)
// is fault.TooLarge too. A failed extraction empties the workspace again.
package sandboxd
