// Package local is the local_subprocess provider: each sandbox is a folder on the gateway's
// own host and programs run as the gateway's own user, with NO isolation (docs/semantics.md §12,
// "local_subprocess"). Use it for development and tests only; New logs a warning saying so.
//
// A sandbox is a fresh folder "sandgate-sandbox-*" under the configured workdir, and its id is
// the folder's absolute path. Attach reopens such a folder; Destroy kills the executions still
// running in it (their Exec returns fault.Gone) and removes it, and touches nothing else.
//
// Executions (Sandbox.Exec):
//   - a command runs as `/bin/sh -c <command>`, python code as `<python> -c <code>` with the
//     interpreter resolved once at start-up (its sys.executable), bash code as `bash -c <code>`.
//     Program text over 64 KiB is handed over through a pipe on file descriptor 3 instead of
//     argv (which the kernel limits to 128 KiB per argument); nothing is written to disk;
//   - every execution gets its own session and process group (setsid). When it times out or
//     its context ends, every process of the session gets SIGTERM, and SIGKILL once the session
//     is still alive after Provider.KillGrace. The status then says TimedOut (or Exec returns
//     ctx.Err()), never a success;
//   - the execution ends when its direct child exits. Processes it left running in its
//     session (`sleep 100 &`) are then killed with SIGKILL: an execution never outlives its
//     call, so a background child holding stdout cannot hang it, and nothing keeps running in
//     a destroyed workspace. Output already written is kept. A process that escaped the
//     session (setsid, double fork into a new session) is not killed; output it holds open is
//     read for at most Provider.DrainDelay more;
//   - standard input is empty (/dev/null) unless ExecSpec.Stdin is set;
//   - the environment is a minimal base, not the gateway's: PATH (the interpreter's folder,
//     then the gateway's PATH), HOME, TMPDIR and PWD set to the workspace or working folder,
//     LANG=C.UTF-8 and PYTHONUNBUFFERED=1 (so output printed before a timeout is not lost in a
//     buffer); ExecSpec.Env is added (and may override) as native values, never through a
//     shell string;
//   - the exit code is the process's, or 128+n with Signal "SIG…" when signal n killed it.
//
// Code with an ExecSpec.Context runs in a stateful context (providers.Contexts): the sandbox's
// sandboxd.Runtime, made in the gateway process on first use, keeps a Python interpreter's
// globals (or a bash context's working folder and exports) between executions. Destroy and
// Close stop its interpreters; contexts do not outlive the gateway process.
//
// Files go through an os.Root opened on the workspace, so "..", absolute paths and symlinks
// leading out of the workspace (including ones programs create) are refused with fault.Policy.
// Uploads stream into a hidden temporary file in the target folder and are renamed into place
// only when complete and within the size limit.
//
// The provider does not act for user-mode principals and enforces no policy dimension other
// than the execution timeout; the domain checks both before calling it (docs/semantics.md §9).
// It needs a Unix host; process-tree handling (package procgroup) is most thorough on Linux,
// where it also finds session members through /proc.
package local
