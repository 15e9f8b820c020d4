// Package docker is the docker provider: one container per sandbox on a Docker engine
// (docs/semantics.md §12, "docker"), reached with github.com/docker/docker's client and API
// version negotiation (Debian's engine 20.10 speaks API 1.41).
//
// Containers. A sandbox is a container of the profile's image running `sleep infinity` under
// docker's init as PID 1 (HostConfig.Init, which reaps orphaned zombies), with working folder
// /workspace, labelled app.kubernetes.io/managed-by=sandgate, sandgate.profile,
// sandgate.owner (the principal's subject) and sandgate.spec (a hash of its configuration).
// Its id is the container's full id, so a restarted gateway re-attaches by id, and
// Provider.SweepOrphans removes the profile's labelled containers that no session claims.
// Always: no-new-privileges, every capability dropped, a pids limit (docker.pids_limit,
// default 256) and optionally a non-root user (docker.user) and an OCI runtime
// (docker.runtime, checked against the engine's installed runtimes). Policy: network_egress
// deny → network mode none; allowlist → refused under strict before any engine call, else a
// warning and unrestricted egress; cpu → NanoCPUs; memory_mb → Memory = MemorySwap;
// fs_allow_read/fs_allow_write → read-only root file system with a volume at /workspace and a
// tmpfs at /tmp. A missing image is pulled unless docker.pull is never.
//
// Attached profiles (environment: attached) bind to their attach_to container instead of
// creating one; the container's own configuration must enforce the profile's policy (checked;
// strict refuses, otherwise a warning). Destroy never removes an attach_to target, nor any
// container without the managed-by label. Its workspace is its working folder (or /workspace).
//
// Warm pool (docker.warm_pool.size): ready containers made for the profile's policy; Create
// claims one atomically (see pool), also across gateway replicas on one engine. A claimed
// container serves one sandbox and is destroyed with it. Close stops the refill goroutine.
//
// sandboxd mode (docker.sandboxd.enabled, or the profile's stateful): the container runs
// sandboxd (cmd/sandboxd) as its entrypoint under docker's init, as docker.user or
// docker.sandboxd.user (default 65532:65532), on a read-only root file system with a volume at
// /workspace and a tmpfs at /tmp. Each container gets a fresh 256-bit secret and a socket
// folder under docker.sandboxd.socket_dir/<profile>/ named by its label sandgate.sandboxd,
// bind-mounted at /.sandgate/run. The secret is the label sandgate.sandboxd-token (read back on
// Attach; only the engine's API shows labels) and never an environment variable, which every
// process of the container, docker-init as PID 1 first, would show in /proc/PID/environ: it
// reaches sandboxd as the file /.sandgate/run/token, written before every start and removed
// by the gateway as soon as sandboxd answers, before any program runs; sandboxd makes itself
// non-dumpable, so programs of the same user cannot read its memory. Executions, files, package
// installs and stateful contexts (providers.Contexts; capability stateful) then go to
// sandboxd over that Unix socket, with one kept-alive client per container; an image without
// the label dev.sandgate.sandboxd gets the gateway's sandboxd binary copied into an anonymous
// volume at /.sandgate/bin before the container starts. Destroy, DrainPool and SweepOrphans
// remove socket folders. The gateway must see the socket folder at the engine's path. What
// follows describes the plain mode.
//
// Executions run through the exec API under a small supervisor, helper.py, run as
// `python3 -I -S -c <helper>` (the image needs python3, as the provider declares python):
//   - a command runs as `/bin/sh -c <command>`, python code as `python3 -c <code>`, bash code
//     as `bash -c <code>`, all through argv; text over 64 KiB goes to the helper's standard
//     input and reaches the program as a memfd on file descriptor 3. The environment is the
//     container's plus HOME=/workspace, LANG=C.UTF-8, PYTHONUNBUFFERED=1 and ExecSpec.Env,
//     passed natively as the exec's Env;
//   - the program runs in its own session (setsid). When it exits, whatever it left running in
//     its session is killed, so `cmd &` holding stdout cannot hang the call; output already
//     written is kept. (A process that left the session holds the stream for at most the
//     engine's 2 s drain.)
//   - a timeout (wall clock from the start of Exec) or a cancelled context sends SIGTERM to the
//     whole session through a second exec, SIGKILL after Provider.KillGrace; the helper also
//     enforces the deadline itself, which matters when a fork bomb leaves no room for another
//     exec. The status then says TimedOut (or Exec returns ctx.Err());
//   - standard input is empty unless ExecSpec.Stdin is set; stdout and stderr are
//     demultiplexed (stdcopy); the exit code comes from exec inspect; a program killed by
//     signal n exits 128+n with Signal "SIG…" (told apart from a plain exit 128+n by a record
//     the helper leaves in /dev/shm). When the kernel's OOM killer ended the program (the
//     container's oom_kill counter moved), a line saying so is appended to its stderr and a
//     warning logged;
//   - InstallPackages runs `python3 -m pip install --no-input -- <packages>`.
//
// Files go through the archive API (CopyToContainer, CopyFromContainer). Paths are resolved
// inside the container by the helper (realpath, so symlinks are followed as programs see
// them) and must stay in the workspace (fault.Policy otherwise); the archive calls then use
// the resolved path. Listing is structured (lstat records, NUL-separated), never `ls`.
// Uploads are spooled on the gateway up to the size limit before the container sees a byte,
// then land in a hidden temporary file renamed into place. A program running concurrently
// could swap a resolved folder for a symlink between resolution and copy; executions leave no
// processes behind, so only a process that escaped its session could.
package docker
