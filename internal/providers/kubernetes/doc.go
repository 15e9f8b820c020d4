// Package kubernetes is the kubernetes provider: one Pod per sandbox, reached through the
// Kubernetes API with k8s.io/client-go (docs/semantics.md §12, "kubernetes").
//
// Pods. A managed sandbox is a Pod named sandgate-<12 hex> in the profile's namespace; its id
// is "<namespace>/<pod>". Labels: app.kubernetes.io/managed-by=sandgate,
// sandgate.io/installation=<the gateway's installation id> and sandgate.io/sandbox=true, then
// kubernetes.labels, then sandgate.io/sandbox-name=<pod> last (labels may not use the reserved
// keys); NetworkPolicies and SandboxClaims (and, with network_policy, the claimed pod
// through the claim's pod metadata) carry the installation label too, and snapshot metadata records it. Several installations may
// share a namespace: Attach treats another installation's pod or claim as gone, and Destroy
// leaves it alone (objects without the label, made before installation ids, are taken).
// Nothing lists or sweeps pods by label. The single container "sandbox" runs sandboxd (see
// "Data path" below) with working folder kubernetes.workspace (default /workspace) and HOME
// set to it. Hardened defaults, which kubernetes.security_context (pod level) and
// kubernetes.container_security_context are merged over:
//   - pod: runAsNonRoot, runAsUser/runAsGroup/fsGroup 65532, seccomp RuntimeDefault, no
//     service-account token (automountServiceAccountToken false), no service links,
//     shareProcessNamespace (the pod's pause process is PID 1 and reaps orphans), restartPolicy
//     Never, terminationGracePeriodSeconds 5, activeDeadlineSeconds = 2 × the idle timeout,
//     optional runtimeClassName (Kata, gVisor), service account, pull secrets, node selector;
//   - container: no privilege escalation, not privileged, all capabilities dropped, read-only
//     root file system (always, when the policy lists file-system paths), emptyDir volumes at
//     the workspace and /tmp, an emptyDir (medium Memory) at /.sandgate/run for sandboxd's
//     socket and state file, kubernetes.env;
//   - policy cpu and memory_mb become requests equal to limits;
//   - policy disk_mb becomes the workspace emptyDir's sizeLimit. The kubelet enforces it by
//     evicting the pod once the workspace holds more (it measures periodically): programs see
//     no ENOSPC, the sandbox ends, and the session's next use makes a new, empty one with a
//     notice. The test's played node does not enforce it (there is no kubelet); only the
//     pod spec is checked.
//
// With kubernetes.network_policy, a policy whose egress is not allow gets an egress
// NetworkPolicy named after the pod, selecting it by its name label, created before the pod:
// deny allows nothing, allowlist allows its CIDRs (a bare IP is a /32 or /128). Domain names
// cannot be expressed: under strict they are a fault.Policy error before any API call,
// otherwise a warning and they are dropped. Without network_policy the provider does not
// declare policy_network and refuses (strict) or warns about a non-allow egress.
//
// Create waits, at most kubernetes.create_timeout, with a watch, for the pod to be Running
// and Ready; a terminal phase, a deletion or the timeout is a fault.Provision error carrying
// the pod's last reason, and the pod and its NetworkPolicy are removed. Attach parses
// "<namespace>/<pod>" (a bare name uses the configured namespace); a missing pod, one being
// deleted or one that has ended (Succeeded, Failed) is fault.Gone; a pending pod gets the same
// bounded wait. Destroy deletes the NetworkPolicy and the pod (only objects carrying the
// managed-by label); a missing object is no error. Attached profiles (attach_to) bind to
// their target and never create or delete anything.
//
// agent-sandbox (kubernetes.agent_sandbox, kubernetes-sigs/agent-sandbox): Create makes a
// SandboxClaim (extensions.agents.x-k8s.io/v1beta1) named sandgate-<12 hex> on the configured
// SandboxWarmPool, waits for its Ready condition and status.sandbox.name, follows the Sandbox
// (agents.x-k8s.io/v1beta1; its agents.x-k8s.io/pod-name annotation, else its own name) to the
// Pod, and waits for that Pod like a created one. The id is "<namespace>/<claim>"; Destroy
// deletes the claim (and the controller the sandbox). Pod shape and resources then come from
// the SandboxTemplate, so the provider does not declare the file-system and resource policy
// dimensions in this mode.
//
// Identity. Agent mode uses the gateway's own identity: kubernetes.kubeconfig when set, else
// the in-cluster service account, else the default kubeconfig loading rules (KUBECONFIG,
// ~/.kube/config). User mode impersonates the principal (rest.ImpersonationConfig): the user is
// Credentials.User, else the Subject, and the groups Credentials.Groups, else the principal's
// Groups, all of them (client-go sends one Impersonate-Group header each). No user is a
// fault.Policy error before any call. Impersonating clients are cached per identity. They
// create, wait for, attach to and exec in pods and create NetworkPolicies and claims; deletion
// and clean-up always run as the gateway itself.
//
// # Data path
//
// Every execution, package installation, file operation and stateful context goes to sandboxd
// (internal/sandboxd, documented in its doc.go: process sessions, the kill of the whole tree
// on timeout or cancellation, 128+n exit codes, bounded output, confinement with os.Root, OOM
// reporting, contexts), the pod's sandbox container's command:
//
//	<sandboxd.path> serve --socket /.sandgate/run/sd.sock --workspace <workspace>
//	    --state-file /.sandgate/run/contexts.json --await-token
//
// kubernetes.sandboxd.path defaults to /usr/local/bin/sandboxd, where images labelled
// dev.sandgate.sandboxd (sandgate/sandbox-python, built by images/sandbox) ship it. The
// /.sandgate/run emptyDir outlives restarts of the container within the pod, so a restarted
// sandboxd reports the contexts it lost (ContextReset). The provider therefore declares
// stateful, and python and bash. With kubernetes.sandboxd.image, the image need not ship
// sandboxd: an init container "sandboxd-install" made from that image runs `<sandboxd.path>
// install /.sandgate/bin` (sandboxd copies its own executable, so that image needs no shell
// or cp) into an emptyDir the sandbox container runs /.sandgate/bin/sandboxd from (pods the
// provider creates only; New refuses it with agent_sandbox or attach_to).
//
// Transport: an exec tunnel. The gateway reaches sandboxd through pods/exec (client-go
// remotecommand: WebSocket, falling back to SPDY; standard input and output, no tty) of
// `<sandboxd.path> proxy --socket /.sandgate/run/sd.sock` in the sandbox container, which
// joins the exec's streams to sandboxd's socket; the streams become one connection of the
// runtime API (remote.StreamConn, remote.NewDialClient). There is one runtime client per
// (pod, identity), kept alive between calls, so an exec is opened per connection, not per
// call; Destroy and Close close them. In user mode the tunnel is opened by the impersonating
// client, so the API server authorizes pods/exec (create and get) per user, as before. Why
// not the pod network: the gateway may run outside the cluster, where pod IPs are not
// routable, and the API server's pods/proxy, the usual way in from outside, refuses pod IPs
// it considers local (loopback, link-local), which is what the test node uses; the exec
// tunnel goes wherever the API server's exec goes (gateway → kube-apiserver → kubelet →
// container runtime exec of the proxy), with the same authentication, authorization and
// audit as any exec. While sandboxd does not listen yet (a pod is Ready as soon as its
// container started), a dial tries again, at most 20 s.
//
// With kubernetes.sandboxd.transport: pod_ip, for a gateway that reaches the pod network,
// sandboxd also listens on TCP port 8888 (--listen :8888; the container declares the port),
// which it opens only once it has its token. The gateway dials <pod IP>:8888; every
// connection starts with PUT /v1/token (the same token, accepted again; it also tells a
// served port from one that only accepts), and when that fails the token is first given
// through one exec tunnel. Executions then skip the API server altogether. The token travels
// on the pod network in clear, like every request's bearer header: use it where that network
// is trusted or encrypted (a CNI with encryption, a service mesh).
//
// Secret. Each pod has its own 256-bit token, in the pod's sandgate.io/sandboxd-token
// annotation (AnnotationSandboxdToken) — never in the pod spec or an environment variable.
// Pods the provider creates get it at creation; a claimed warm pod or an attached pod gets it
// when it is bound, by an update carrying the pod's resourceVersion, so two gateway replicas
// agree (on a conflict one reads the pod again and takes the stored token), before sandboxd
// gets it. sandboxd starts without a secret (--await-token) and answers every request but
// PUT /v1/token with 503 until one is set; the first request on every tunnel connection is
// that PUT (remote.SetTokenOn: the first token wins, the same one again is accepted, another
// one is refused with 409), so the token is set before anything can run and sandboxed code
// never sees it. The pods have no service-account token and no downward API of their
// annotations, so code in the pod cannot read the annotation; a restarted gateway reads it
// back (Attach) and reattaches to the same sandboxd, contexts included. Who may read the
// pod's annotations may also exec into it. Limit: programs in the pod run as sandboxd's user
// (the hardened defaults grant no capability to switch users, which the restricted Pod
// Security Standard forbids) and could replace its socket with a listener of their own; such
// a listener would receive the pod's own token, which gives access to nothing but that same
// sandbox (there is no TCP listener in this mode). They can also stop or kill sandboxd: the
// gateway then ends the pod's running execution at its timeout + 10 s (internal/sandbox), and
// the sandbox's later operations fail until the session is destroyed — harm to their own
// sandbox only.
//
// Attached pods (attach_to, pods the provider did not create) must run sandboxd the same
// way: `<sandboxd.path> serve --await-token --socket /.sandgate/run/sd.sock --workspace
// <workspace>`; when the tunnel cannot reach it (no binary at the path, nothing listening),
// operations fail with a fault.Provision error saying so. agent-sandbox: the SandboxTemplate
// in deploy/kubernetes/agent-sandbox.yaml runs sandboxd like this, so claimed sandboxes are
// stateful too.
//
// Mapping: ExecSpec becomes a sandboxd ExecRequest (providers.RuntimeRequest: standard input
// read ahead, the timeout enforced by sandboxd), its Result an ExitStatus
// (providers.RuntimeStatus); InstallPackages runs `python3 -m pip install --user` (the root
// file system is read-only; packages land under HOME, the workspace); uploads are spooled on
// the gateway first, so one that breaks or is over the limit never reaches the pod. sandboxd's
// fault kinds stand; a tunnel that breaks is fault.Gone when the pod is gone, else
// fault.Provision; pods/exec refused by RBAC is fault.Forbidden. Destroy ends the executions
// this provider runs in the sandbox (fault.Gone).
//
// Preview ports: DialPort opens sandboxd's port tunnel over the same channel as every other
// call (an exec stream, or TCP to the pod IP), so no Service or port-forward is made and the
// pod's NetworkPolicy is untouched.
//
// # Snapshots
//
// With kubernetes.snapshot_dir (Config.SnapshotDir, an absolute folder on the gateway's host;
// with several replicas a volume they all mount) a managed profile declares snapshots
// (providers.Snapshotter); without it, and for attached profiles, it does not, and the
// methods are fault.Capability errors. Snapshot reaches the pod's sandboxd as the gateway
// (whatever the identity mode, like deletion), over the usual channel, and has it stream the
// workspace as a gzip-compressed tar (sandboxd's ArchiveWorkspace: folders, regular files —
// sparse ones as their data regions, further names of a file as hard links — and symlinks
// as links with their modes and modification times, no owners; FIFOs, sockets and devices
// left out; /tmp, processes and contexts are not captured). The stream goes into
// a hidden temporary file in the folder, which is synced and renamed to
// sandgate-snapshot-<id>.tar.gz only once complete — sandboxd breaks the stream off when it
// fails midway, so a partial archive is never kept — with sandgate-snapshot-<id>.json
// (SnapshotMetadata: owner, session, profile, pod, size) beside it for operators. The ref is
// the archive's file name alone: a ref that is anything else (a path, "..") is never opened,
// so refs cannot lead out of the folder, and the folder may move. SizeBytes is the archive
// file's size. The sandbox keeps running meanwhile.
//
// Restore creates a sandbox exactly as Create does (a pod, a claim in agent-sandbox mode, for
// the principal's identity) and streams the archive into its sandboxd's ExtractWorkspace,
// which takes only an empty workspace and refuses absolute names, ".." elements, entries
// through the archive's own symlinks, hard links to anything but a file extracted before
// them, device nodes and repeated names, drops setuid and setgid, writes runs of zero
// blocks as holes, and stops once it would write more than the policy's disk_mb
// (fault.TooLarge); on any failure the new sandbox is destroyed again. An unknown or missing
// archive is fault.NotFound. DeleteSnapshot removes the archive and its metadata file;
// missing files and refs that are not snapshot file names are no error.
//
// Not built: CSI VolumeSnapshots (a workspace on a PersistentVolumeClaim whose CSI driver
// snapshots it) — the workspace is an emptyDir, which no CSI driver can snapshot. Pods are
// never paused (capability pause is false): the Kubernetes API has no freezer, and deleting a
// pod loses its processes, which is what idle_action: snapshot already offers.
package kubernetes
