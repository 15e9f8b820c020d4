// Package local is the local_subprocess provider: each sandbox is a folder on the gateway's
// own host and programs run as the gateway's own user, with NO isolation (docs/semantics.md
// §12, "local_subprocess"). Use it for development and tests only; New logs a warning saying
// so.
//
// A sandbox is a fresh folder "sandgate-sandbox-*" under the configured workdir, and its id is
// the folder's absolute path. Attach reopens such a folder; Destroy ends the executions still
// running in it (their Exec returns fault.Gone) and removes it, and touches nothing else.
//
// The engine is sandboxd's, in process: every sandbox folder has one sandboxd.Runtime, made
// on first use, that runs its executions and contexts and moves its files. Process sessions
// and the kill of the whole tree on timeout or cancel, 128+n exit codes, streamed output,
// standard input, confinement through an os.Root on the folder, and contexts are therefore
// exactly as internal/sandboxd's package doc describes, the same as inside a Docker
// container. What is particular to this provider:
//   - the base environment is minimal, not the gateway's: PATH (the interpreter's folder,
//     then the gateway's PATH), HOME and TMPDIR set to the folder, LANG=C.UTF-8 and
//     PYTHONUNBUFFERED=1; python is the interpreter's sys.executable, resolved once;
//   - output is never dropped by the provider: the domain keeps the head and tail it bounds
//     and counts every byte;
//   - where the gateway may make cgroups (root on a cgroup v2 host), every execution also
//     gets a cgroup of its own, so processes that leave its session (setsid, a double fork)
//     die with it; elsewhere they outlive the execution (New logs which applies);
//   - standard input is streamed from ExecSpec.Stdin, and a Read that blocks does not hold an
//     execution up once its program has ended;
//   - contexts (a Python interpreter's globals, a bash context's working folder and exports)
//     live in the gateway process: Destroy and Close end them, and they do not outlive it;
//   - programs run as the gateway's own user and sandboxd is the gateway's own process, so
//     nothing keeps a program from signalling, stopping (SIGSTOP) or tracing the gateway
//     (or anything else of that user): what this provider promises against the code it runs
//     is the process-tree handling above, not protection. A program killed for its timeout
//     is killed by the gateway; the gateway's own bound on executions (internal/sandbox)
//     cannot help a gateway that was stopped.
//
// Snapshots are the folder's runtime's workspace archive (sandboxd: folders, files — sparse
// ones as their data — and symlinks as links, with modes and times), gzip-compressed into a
// file "sandgate-snapshot-<id>.tar.gz" under the workdir; Restore has a new folder's runtime
// extract one, exactly as sandboxd does in a container or pod (setuid and setgid dropped,
// runs of zeros left as holes). Snapshot folders of the earlier format (copies of the
// folder) are still restored and deleted. DialPort connects to the host's loopback, where the sandbox's
// programs listen (there is no isolation). Nothing freezes a folder's processes: no pause.
//
// The provider does not act for user-mode principals and enforces no policy dimension other
// than the execution timeout; the domain checks both before calling it (docs/semantics.md §9).
// It needs a Unix host; process-tree handling (package procgroup) is most thorough on Linux,
// where it also finds session members through /proc.
package local
