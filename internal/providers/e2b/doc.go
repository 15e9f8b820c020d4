// Package e2b is the e2b provider: each sandbox is an E2B sandbox, a Firecracker micro-VM on
// E2B's cloud or a self-hosted E2B (docs/semantics.md §12, "e2b"). It speaks E2B's wire
// protocols itself — the control-plane REST API, envd's Connect-RPC services and HTTP files API,
// and the code interpreter's HTTP API — as described in package wire; no E2B SDK is used.
//
// Capabilities: isolation micro_vm; shell; languages python and bash; files; package install;
// attach; provisions; network policy; interactive and background (kept executions, below);
// stateful only when the template runs E2B's code interpreter (Config.CodeInterpreter:
// code-interpreter-v1 or a template built on it). No resources or filesystem policy: cpu and
// memory come from the template, so the domain refuses a strict profile that sets them and
// warns about a non-strict one; no user mode.
//
// Configuration (Config, from the profile's e2b block): the API key is read from the
// environment variable APIKeyEnv (default E2B_API_KEY) when the provider is built — unset or
// empty is a fault.Config error, so `serve` stops at start; Template (default base); Domain
// (default e2b.app) and APIURL (default https://api.<domain>) for self-hosted E2B; SandboxURL,
// one base URL for every sandbox (see below); Workdir, the workspace (default /home/user,
// the templates' default user's home); EnvVars set at creation; Python for context-less code.
//
// Control plane (https://api.<domain>, header X-API-Key):
//   - Create: POST /sandboxes with templateID, timeout = the profile's idle_timeout in seconds
//     (E2B kills the sandbox when it passes), secure: true (envd then demands the sandbox's
//     access token, sent as X-Access-Token on every envd request), metadata
//     sandgate.managed-by=sandgate, sandgate.profile=<profile> and
//     sandgate.installation=<the gateway's installation id>, envVars,
//     network.allowPublicTraffic false (E2B's proxy then lets requests to the sandbox's other
//     ports, the code interpreter's, through only with the sandbox's traffic access token,
//     sent as E2B-Traffic-Access-Token), and the egress policy: network_egress deny → allow_internet_access: false; allowlist →
//     network.allowOut = network_allow (CIDRs, IPs and domain names, "*.example.com" too) with
//     network.denyOut = [0.0.0.0/0]. Any failure is fault.Provision.
//   - Attach: POST /sandboxes/{id}/connect with the idle timeout: 404 is fault.Gone (the
//     domain's self-heal signal); otherwise it resumes a paused sandbox and extends its
//     timeout. The domain attaches before every operation, so this is the refresh on activity;
//     while an execution runs, POST /sandboxes/{id}/timeout extends it every half idle timeout
//     (a running execution counts as use, docs/semantics.md §8).
//   - Destroy: DELETE /sandboxes/{id}; 404 is fine. ListSandboxes: GET /v2/sandboxes filtered
//     by the metadata above (the live test cleans up with it).
//   - Pause and resume are not used: the domain ends an idle session's sandbox itself, so a
//     paused sandbox would never be resumed; a sandbox someone paused is resumed by connect.
//
// envd (https://49983-<id>.<domain>, or Config.SandboxURL with the routing headers
// E2b-Sandbox-Id and E2b-Sandbox-Port, as the SDKs' E2B_SANDBOX_URL):
//   - Exec runs one process with process.Process/Start (a server stream, JSON codec): a
//     command as /bin/sh -c <command>, python code as <python> -c <code> (with
//     PYTHONUNBUFFERED=1 unless given), bash code as bash -c <code>, in the workspace or
//     ExecSpec.Dir, with ExecSpec.Env as the process's envs (values passed natively). Program
//     text over 64 KiB is written to standard input ahead of the caller's and read by a
//     bootstrap (python: os.read of the byte count; sh and bash: eval "$(head -c N)"), since
//     the kernel refuses longer arguments. Standard input goes by SendInput in 64 KiB chunks,
//     then CloseStdin; without input the process starts with stdin closed. Output is written
//     as the data events arrive. The end event gives the exit code; a process a signal ended
//     (envd: exit code -1, status "signal: killed") reports 128+n and the signal's name.
//   - Timeout and cancellation: the provider sends SIGKILL (SendSignal) and the result says
//     TimedOut (or Exec returns ctx.Err()); the stream's Connect deadline is the timeout plus
//     30 s, so envd kills the process itself should the gateway be gone. envd signals the
//     process it started, not its descendants, and ends a process's stream only when its
//     output pipes close: on real E2B a background child can outlive a timeout, and a
//     command that leaves one running (`sleep 60 &`) returns when that child ends. The fake
//     (sandboxd) kills the whole session, so the contract tests for both pass only there.
//   - Files (Sandbox.WriteFile, ReadFile, ListFiles, RemoveFile) go through
//     filesystem.Filesystem/Stat, ListDir, Move and Remove and the HTTP files API (GET and
//     POST /files?path=, raw bytes). envd confines nothing (the VM is the boundary), so every
//     path is resolved component by component with Stat before use: a symlink is followed
//     only when its target, which envd reports resolved, stays in the workspace, otherwise
//     fault.Policy. A write streams into a hidden .sandgate-upload-<hex> file beside the target,
//     counting bytes against the limit (fault.TooLarge), and is moved into place only when
//     complete; a failed upload's temporary file is removed (should envd create it only after
//     the removal, it stays, hidden from listings). RemoveFile refuses a folder that is not
//     empty (envd would remove it recursively). A program may swap a link between the check
//     and the use: the check keeps callers' paths honest inside their own VM, nothing more.
//   - Folder operations (providers.FileTree: MakeDir, Move, RemoveAll) are
//     filesystem.Filesystem/MakeDir, Move and Remove on paths resolved the same way; since
//     envd answers a folder at Move's destination, a folder moved onto a file or into itself
//     with Internal, the provider stats first and gives sandboxd's faults (fault.Conflict,
//     fault.Validation), and MakeDir on a folder already there is no error.
//   - InstallPackages runs <python> -m pip install <packages>.
//
// Kept executions (providers.Executions; docs/semantics.md §9 "Input and terminals" and
// "Background processes"): every execution that has an id — the domain gives its task id — is
// an envd process tagged with it (StartRequest.tag), so any gateway finds it by the task id:
//   - Start (a background process) starts it as Exec does and returns at envd's start event,
//     with envd's pid. The process outlives the stream: envd runs it until it exits, is
//     signalled, its deadline passes or the sandbox goes. A background process has no
//     deadline unless it has a timeout (the domain gives none unless the caller sets a
//     lifetime; the provider then kills it at that time — TimedOut — and envd 30 s later).
//     envd's List tells Start that a tag is taken (fault.Conflict).
//   - Following: envd replays nothing — Connect gives what a process writes from the moment
//     of connecting. So the gateway that starts a background process keeps its start
//     stream and copies the output into a bounded log (2 MiB per stream: the start and the
//     end), refreshing the sandbox's timeout while the process runs; Reattach through any
//     handle of this provider follows that log from the first byte. The domain's own
//     follower attaches right after Start, so it sees all of the output. Any other follower
//     — another replica streaming the task's output, the gateway that adopts the task after
//     this one died, anyone following an Exec — uses Connect by tag and misses what was
//     written before it connected; the byte offsets it reports count from there. A process
//     that ended within 30 s still gives its end (envd 0.6.12+); later, or on an older envd,
//     it is fault.NotFound, which the domain reports as lost. A broken stream is connected
//     again (three tries); what the process wrote meanwhile is lost.
//   - WriteStdin is SendInput by tag in 64 KiB pieces, to standard input or — when envd
//     refuses that because the process runs on a terminal — typed into the terminal; eof is
//     CloseStdin, or ^D on a terminal (envd refuses CloseStdin there). Exec and Start feed
//     spec.Stdin first: writes through this gateway wait for it and never interleave; a
//     write from another gateway in an execution's first moments may land before it, and
//     writes of two gateways at once may interleave by piece.
//   - Terminals: Exec and Start with a PTY run the command on envd's pty, which every envd
//     with the process service has: one output stream (envd's pty data, written to Stdout),
//     TERM=xterm-256color unless spec.Env sets it, Resize is Update by tag. A command over
//     64 KiB cannot run on a terminal (its text would be typed, and echoed): fault.Validation.
//   - Stop records the stop in the sandbox (an empty file under StoppedDir named by a hash of
//     the id), then sends SIGKILL by tag; a follower on any gateway that sees the process die
//     of a signal looks for that record and reports providers.ErrExecutionStopped. envd
//     signals the process it started only, the command's /bin/sh: its children (a pipeline's
//     other members, what it put in the background) are not signalled and run on until they
//     exit or the sandbox goes — on a terminal the kernel sends SIGHUP to the terminal's
//     foreground jobs as its shell dies, which ends most of them.
//   - Code in a context runs in the code interpreter, not in an envd process: it is not kept
//     and cannot keep an input open (fault.Validation). Provider.Close disconnects this
//     gateway's streams; the processes run on, for another gateway to follow.
//
// Code interpreter (https://49999-<id>.<domain>, or SandboxURL with port 49999), only with
// Config.CodeInterpreter (CodeSandbox implements providers.Contexts):
//   - a Sandgate context is a code-interpreter context (a Jupyter kernel) made with POST
//     /contexts {language, cwd: the workspace}; languages python and bash; at most 16 per
//     sandbox. Names map to the code interpreter's ids in ContextsFile
//     (/tmp/.sandgate/contexts.json in the sandbox, outside the workspace), so every replica
//     and a restarted gateway find the same kernels. Restart is POST
//     /contexts/{id}/restart, delete DELETE /contexts/{id}. Executions counts what this
//     process saw (the kernel's execution_count).
//   - code in a context is POST /execute {code, context_id, env_vars}: stdout and stderr text
//     as it streams, the main result's text (a cell's last expression) on stdout, and an error
//     as exit code 1 with the traceback (colour codes removed) and a last line "Name: value" on
//     stderr (seed: an execution error gives exit 1 and stderr "Name: value"); bash_kernel's
//     errors give the cell's exit status. ContextRestarting (the kernel died and Jupyter
//     restarted it) is ContextLost with exit code 1 — a dead kernel's own exit status is not
//     reported. A context the code interpreter no longer knows is made afresh and the result
//     says ContextReset. At the timeout (or when ctx ends) the request is dropped and the code
//     interpreter interrupts the kernel (KeyboardInterrupt): the state survives. The code
//     interpreter sets env_vars by writing them into a line of code, so values with a quote, a
//     backslash or a line break are refused (fault.Validation), as are a working folder and
//     standard input, which the code interpreter cannot take. Whether a TZ among env_vars
//     also moves the kernel's time zone (time.tzset), as a sandboxd context does, is up to the
//     code interpreter (the contract's stateful/env_applies_per_call, run by TestLive, checks
//     it; e2bfake, built on sandboxd, does).
//
// Tests run against e2bfake, a local fake of all three protocols built on sandboxd, whose
// fidelity is checked with E2B's official JavaScript SDKs; TestLive runs the contract suite
// against real E2B (SANDGATE_E2B_E2E=1 with E2B_API_KEY). Nothing here has been run against
// real E2B by its authors: see docs/providers/e2b.md for what that leaves unverified.
package e2b
