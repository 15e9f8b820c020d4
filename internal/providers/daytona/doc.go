// Package daytona is the daytona provider (isolation container): sandboxes on Daytona, its
// cloud or a self-hosted deployment, through Daytona's API and each sandbox's toolbox
// (docs/semantics.md §12, daytona). The HTTP client is our own, written from Daytona's public
// API and toolbox specifications; no Daytona code is vendored.
//
// # Configuration and policy (New, Create)
//
//   - the API key is read from the variable api_key_env names (default DAYTONA_API_KEY) when
//     the provider is built; missing or empty stops start-up (fault.Config). api_url
//     (default https://app.daytona.io/api) selects the deployment;
//   - a sandbox comes from snapshot, or is built from image (a one-line Dockerfile
//     `FROM <image>`, Daytona's buildInfo), or from Daytona's default snapshot; image and
//     snapshot together are a configuration error;
//   - policy cpu and memory_mb become the sandbox's cpu (whole cores) and memory (whole GiB).
//     Daytona sizes only sandboxes built from an image, so resources force the image path
//     (default image python:3.12-slim), and a pinned snapshot with resources is a
//     configuration error. A value that is not whole (cpu 0.5, memory_mb 512) is refused
//     under strict and rounded up with a warning otherwise;
//   - network_egress deny → networkBlockAll; allowlist → networkAllowList, the CIDRs
//     comma-joined (a bare address becomes /32 or /128). Entries that are not CIDRs (domains)
//     are a fault.Policy error under strict, dropped with a warning otherwise;
//   - autoStopInterval = ceil(idle_timeout / 1 min) minutes (seed); env_vars become the
//     sandbox's env; target its region; labels app.kubernetes.io/managed-by=sandgate,
//     sandgate.io/profile=<profile>, sandgate.io/installation=<the gateway's installation id>
//     and code-toolbox-language=python.
//
// Create waits (polling GET /sandbox/{id}) until the sandbox is started, at most
// create_timeout (default 5 minutes: an image may be built first); a sandbox that fails is
// deleted. Attach (GET) starts a stopped or archived sandbox (auto-stop) and waits; unknown,
// destroyed, failed and foreign sandboxes (without the managed-by label) are fault.Gone.
// Destroy deletes (a missing or foreign sandbox is left alone). List returns the profile's
// sandboxes (GET /sandbox?labels=…).
//
// # Executions (Exec, InstallPackages)
//
// Daytona offers /process/execute and /process/code-run (stdout and stderr merged into one
// result, which the seed reported as stdout on exit 0 and stderr otherwise) and sessions,
// whose commands keep stdout and stderr apart. The provider keeps them apart, so it uses
// neither of the first two for programs (/process/execute only runs its own small commands): each command or context-less code runs through
// a fresh toolbox session (POST /process/session, …/exec with runAsync, the command's log
// followed over its WebSocket, GET …/command/{id} for the exit code, DELETE afterwards).
// What runs in the session is a wrapper script the provider uploads, with the program's text
// (never an argument: any size works), its standard input (empty: /dev/null) and a kill
// script, into a fresh folder of the provider's scratch folder ($TMPDIR/sandgate in the
// sandbox, outside the workspace; removed after each execution):
//
//   - the wrapper changes to the working folder, exports the variables single-quoted (names
//     are validated; nothing in a value is interpreted), sets PYTHONUNBUFFERED=1 and starts
//     the program — `/bin/sh <file>` for a command, `python3 <file>`, `bash <file>` — in a
//     process session of its own (setsid, when the image has it), waits for it and kills what
//     it left running (so `sleep 100 &` does not hold the call);
//   - at the timeout the provider runs the kill script (/process/execute) for SIGTERM to the
//     program's process group, SIGKILL after KillGrace (default 2 s), and reports TimedOut;
//     output written before is kept. When ctx ends it sends SIGKILL and returns ctx.Err();
//   - the exit code is the program's; a signal shows as 128+n (Daytona reports no signal
//     names, so ExitStatus.Signal stays empty);
//   - Daytona's daemon labels output line by line (each line after 01 01 01 or 02 02 02) and
//     ends a last line without a line break with one; the wrapper ends both streams with a
//     marker line the provider removes, so no line break is invented. Still, the daemon's
//     shell `read` drops NUL bytes, a partial line arrives only with its line break or the
//     end, and output that itself contains 01 01 01 or 02 02 02 switches streams;
//   - a working folder is confined lexically (no "..", no absolute path: fault.Policy) and
//     must exist (fault.NotFound). Daytona's toolbox follows symlinks inside the sandbox,
//     which is the caller's own container: no file of the gateway's host is reachable;
//   - InstallPackages runs `python3 -m pip install --no-input --disable-pip-version-check --`
//     with the names single-quoted.
//
// # Contexts (stateful: true)
//
// Python contexts are Daytona interpreter contexts (POST /process/interpreter/context,
// code over the /process/interpreter/execute WebSocket, DELETE to end one): globals persist.
// An exception gives exit code 1 and its traceback on stderr (Daytona reports it apart); the
// timeout interrupts the code (KeyboardInterrupt, the context lives on: TimedOut);
// an interpreter that dies (the socket closes without a completion) gives ContextLost with
// exit code 1 — Daytona does not report the interpreter's exit status — and the next
// execution starts a fresh one. Daytona's interpreter reports no exit status: sys.exit(n)
// ends an execution normally (exit code 0); it reads no standard input (fault.Validation);
// a working folder is entered with os.chdir before the code. Per-execution variables go to
// Daytona's interpreter as the request's envs, which it sets for that execution: whether a
// TZ among them also moves the interpreter's time zone (time.tzset), as a sandboxd context
// does, is up to Daytona (the contract's stateful/env_applies_per_call, run by TestLive,
// checks it; the fake, built on sandboxd, does). A python context whose
// interpreter vanished with a restart of the sandbox (auto-stop) is made afresh and the
// execution reports ContextReset.
//
// Bash contexts keep no process: each execution is a fresh `bash --noprofile --norc` (through
// a session, as above) that restores the exported variables and working folder the previous
// execution saved in the context's folder of the scratch folder, sources the code and saves
// them again on exit; per-execution variables are put back unless the code changed them
// (bash applies TZ and the locale variables as they are set, so they hold for that
// execution only).
//
// The list of contexts (name, language, Daytona context id, executions) is a JSON file in
// the scratch folder, so every gateway and every handle sees the same. At most MaxContexts.
// An image whose TMPDIR does not survive a restart of the sandbox loses that list with it:
// its contexts then start afresh without a notice.
//
// # Files
//
// WriteFile streams into POST /files/bulk-upload (the daemon writes a temporary file beside
// the destination, creates parents and renames it into place, so a broken-off upload —
// the reader failed, or passed maxBytes: fault.TooLarge — leaves nothing and the previous
// file stands; WriteFile waits, at most 5 s, until the daemon has removed its temporary file
// after such a break); ReadFile streams GET /files/download; ListFiles is GET /files (Daytona
// describes entries after following symlinks and leaves dangling ones out); RemoveFile is
// DELETE /files (a folder only when empty). The folder operations (providers.FileTree) are
// POST /files/folder (MakeDir, parents made), POST /files/move (Move: the toolbox refuses an
// existing destination and a missing parent, so the provider makes the parents and removes a
// file to be replaced first; a folder at the destination is fault.Conflict, as os.Rename
// gives) and DELETE /files?recursive=true (RemoveAll). Paths are workspace-relative,
// confined lexically (providers.CleanPath) and sent absolute under the sandbox's work dir
// (GET /work-dir), which is the workspace.
//
// # Wire details
//
// Calls carry the bearer API key, X-Daytona-Source: sandgate and X-Daytona-SDK-Version: the
// SDK version whose wire format this client implements (the toolbox keeps a command's stdout
// and stderr apart in its logs only for clients announcing 0.167.0 or later). The toolbox is
// reached at the sandbox's toolboxProxyUrl (or GET /sandbox/{id}/toolbox-proxy-url) + "/" +
// id. A toolbox that cannot be reached before anything ran is an error carrying
// providers.ErrUnreached (fault.Gone when the sandbox no longer exists), so the domain
// attaches again (which starts a stopped sandbox) and retries.
//
// The package was tested against a local fake of Daytona (package daytonafake, checked with
// Daytona's official TypeScript SDK), not against Daytona itself; TestLive runs the contract
// suite against a real account when SANDGATE_DAYTONA_E2E=1 and DAYTONA_API_KEY are set. See
// docs/providers/daytona.md.
package daytona
