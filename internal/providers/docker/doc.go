// Package docker is the docker provider: one container per sandbox on a Docker engine
// (docs/semantics.md §12, "docker"), reached with github.com/docker/docker's client and API
// version negotiation (Debian's engine 20.10 speaks API 1.41).
//
// Containers. A sandbox is a container of the profile's image running sandboxd (cmd/sandboxd,
// the runtime of internal/sandboxd) as its entrypoint under docker's init as PID 1
// (HostConfig.Init, which reaps orphaned zombies), on a read-only root file system with a
// volume at /workspace (its working folder) and a tmpfs at /tmp; labelled
// app.kubernetes.io/managed-by=sandgate, sandgate.installation, sandgate.profile,
// sandgate.owner (the principal's subject) and sandgate.spec (a hash of its configuration).
// Its id is the container's full id, so a restarted gateway re-attaches by id, and
// Provider.SweepOrphans removes the profile's containers of its installation that no session
// claims.
// Users: programs run as docker.user (default docker.sandboxd.user, else 65532:65532) and
// sandboxd as root in the container with CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_KILL,
// CAP_SETGID and CAP_SETUID only (`serve --run-as <docker.user>`): it starts programs with
// that user's credentials, which keep none of its capabilities, so no program can signal,
// stop, trace or read sandboxd (a different user, a non-dumpable process); it gives the
// workspace and what it writes there to the programs' user. A sandboxd image too old for
// --run-as refuses to start, and Create says so. A docker.sandboxd.user that is not root,
// or a root docker.user, runs sandboxd and programs as one user without added capabilities:
// programs can then stop sandboxd (New logs a warning), and the gateway's own timeout
// (internal/sandbox) is what ends their executions.
//
// Always: no-new-privileges, every capability dropped but those above, a pids limit
// (docker.pids_limit, default 256), oom_score_adj 1000, and optionally an OCI runtime (docker.runtime, checked
// against the engine's installed runtimes). Policy: network_egress deny → network mode none;
// allowlist (and allow with secrets) → network mode none and the egress proxy (below) where
// the gateway runs one and the transport is socket, else refused under strict before any
// engine call (secrets: always), or a warning and unrestricted egress; cpu → NanoCPUs; memory_mb → Memory = MemorySwap (and /tmp at half of it);
// disk_mb → the engine's storage-opt size where its storage driver has one, else a loop-mounted
// ext4 workspace made by the gateway (disk.go: capability policy_disk only where the gateway
// can, i.e. as root next to a local engine). A missing image is pulled unless docker.pull is
// never.
//
// One engine. Every execution, file operation, package install and stateful context
// (providers.Contexts; capability stateful) goes to the container's sandboxd, whose semantics
// internal/sandboxd/doc.go gives once for every provider: a session per execution, the whole
// tree killed on timeout or cancel, 128+n exit codes, bounded head+tail output, stdin, env,
// cwd, confinement to the workspace with os.Root, OOM reporting, contexts. An image without
// the label dev.sandgate.sandboxd gets the gateway's sandboxd binary copied into an anonymous
// volume at /.sandgate/bin before the container starts.
//
// Secret. Each container gets a fresh 256-bit secret, the label sandgate.sandboxd-token (read
// back on Attach; only the engine's API shows labels). It is never an environment variable,
// which every process of the container, docker-init as PID 1 first, would show in
// /proc/PID/environ: it reaches sandboxd as a file in /.sandgate/run, written before every
// start and removed (socket) or emptied (exec) by the gateway as soon as sandboxd answers,
// before any program runs; programs run as another user than sandboxd, which makes itself
// non-dumpable too, so they cannot read its memory.
//
// Transports (docker.sandboxd.transport; by default socket for an engine on a local Unix
// socket, exec otherwise), recorded on each container by the label
// sandgate.sandboxd-transport:
//   - socket: a folder under docker.sandboxd.socket_dir/<installation>/<profile>/, named by the
//     container's label sandgate.sandboxd, is bind-mounted at /.sandgate/run and holds sandboxd's Unix
//     socket; the gateway connects to it directly, with one kept-alive client per container,
//     and checks that the listener is the container's sandboxd (the oldest child of its init),
//     since programs could replace the socket. The gateway must see the folder at the engine's
//     path. Destroy, DrainPool and SweepOrphans remove socket folders.
//   - exec: /.sandgate/run is a volume of the container; each connection is one exec of
//     `sandboxd proxy` (the engine's hijacked exec stream, demultiplexed), kept alive for many
//     requests. Works with any engine the gateway can call — a remote DOCKER_HOST over TCP or
//     SSH — at the cost of the engine hop; nothing of the sandbox is on the gateway's host.
//
// Attached profiles (environment: attached) bind to their attach_to container instead of
// creating one; the container's own configuration must enforce the profile's policy (checked;
// strict refuses, otherwise a warning). Destroy never removes an attach_to target, nor any
// container without the managed-by label. Its workspace is its working folder (or
// /workspace). Such a container runs no sandboxd of its own: each connection is one exec of
// `sandboxd stdio` (its image's, else the gateway's binary copied to /.sandgate/bin/sandboxd on
// its root file system, which must then be writable), a runtime that lives as long as the
// connection, with a fresh secret in the exec's environment. No daemon stays behind and no
// context outlives a connection, so attached profiles are not stateful. Containers made by
// gateways before sandboxd ran in every container are reached the same way.
//
// Warm pool (docker.warm_pool.size): ready containers made for the profile's policy; Create
// claims one atomically (see pool), also across gateway replicas on one engine; a pool is its
// installation's. A claimed
// container serves one sandbox and is destroyed with it. Close stops the refill goroutine.
//
// Uploads are spooled on the gateway up to the size limit before the container sees a byte,
// then streamed to sandboxd, which writes a hidden temporary file and renames it into place.
//
// Parking (managed profiles; park.go, snapshot.go). Pause and Resume are the engine's pause
// and unpause (the cgroup freezer): every process of the container, sandboxd too, stops being
// scheduled, so nothing may be asked of a paused sandbox (Attach would unpause it). A
// snapshot is a local image SnapshotRepository:<id> whose one layer, on the sandbox's base
// image, holds one file: the workspace as the container's sandboxd archives it
// (gzip-compressed; sparse files as their data), labelled with the installation, owner,
// session, profile, format and base. Restore creates a sandbox as Create does and has its sandboxd replace the
// workspace with the archive, within disk_mb, as the kubernetes and local providers restore
// (snapshot.go says why the engine's own archive of the workspace is no longer the capture,
// and how snapshots of that earlier format still restore). DeleteSnapshot removes the image.
//
// Installations. Every container, its volumes and every snapshot image carry the label
// sandgate.installation: the id of the gateway's installation (its database's, the same on
// every replica; Options.Installation), and socket folders and workspace disks live in a
// folder named by it. Several installations can share an engine, with profiles of the same
// name: sweeps, warm pools (claims, refills, drains), and the socket-folder and disk sweeps
// see only their own installation's objects; Attach, Destroy, Pause and snapshots treat
// another installation's as missing. Objects without the label were made by a Sandgate before
// installation ids: attaches and destroys take them (a session of this installation may use
// one), sweeps never remove them, and the first sweep that finds some no session of this
// installation claims logs, once, how many and how to remove them by hand. Census counts an
// engine's objects by installation (gateway dev reports the others).
//
// Egress proxy (egress.go; issue 39). A sandbox whose traffic goes through the gateway's
// egress proxy (internal/egress) is labelled sandgate.egress=proxy and has no network; its
// sandboxd (--egress-dir /.sandgate/run) forwards 127.0.0.1:3128 (an HTTP proxy) and
// 127.0.0.1:53 (DNS; the container gets net.ipv4.ip_unprivileged_port_start=0 and a
// resolver at 127.0.0.1) to the Unix sockets px.sock and ns.sock the gateway serves in its
// socket folder with the sandbox's grant, and writes ca-bundle.pem there (the image's roots
// and the installation's CA, egress-ca.pem). HTTP(S)_PROXY, NO_PROXY, SSL_CERT_FILE,
// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS and PIP_CERT are set, and each
// secret's placeholder in its variable; values stay in the gateway. Attach serves the grant
// again (a restarted gateway); Destroy, sweeps and Close stop it. Such sandboxes never come
// from the warm pool.
//
// Preview ports. DialPort opens sandboxd's tunnel (GET /v1/ports/{port}, upgraded) over the
// container's transport to its loopback: nothing is published on the engine's host, and a
// container without network (egress deny) still has its loopback.
package docker
