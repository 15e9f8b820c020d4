// Package kubernetes is the kubernetes provider: one Pod per sandbox, reached through the
// Kubernetes API with k8s.io/client-go (docs/semantics.md §12, "kubernetes").
//
// Pods. A managed sandbox is a Pod named sandgate-<12 hex> in the profile's namespace; its id
// is "<namespace>/<pod>". Labels: app.kubernetes.io/managed-by=sandgate and
// sandgate.io/sandbox=true, then kubernetes.labels, then sandgate.io/sandbox-name=<pod> last
// (labels may not use the reserved keys). The single container "sandbox" runs
// `sleep infinity` with working folder kubernetes.workspace (default /workspace). Hardened
// defaults, which kubernetes.security_context (pod level) and
// kubernetes.container_security_context are merged over:
//   - pod: runAsNonRoot, runAsUser/runAsGroup/fsGroup 65532, seccomp RuntimeDefault, no
//     service-account token (automountServiceAccountToken false), no service links,
//     shareProcessNamespace (the pod's pause process is PID 1 and reaps orphans), restartPolicy
//     Never, terminationGracePeriodSeconds 5, activeDeadlineSeconds = 2 × the idle timeout,
//     optional runtimeClassName (Kata, gVisor), service account, pull secrets, node selector;
//   - container: no privilege escalation, not privileged, all capabilities dropped, read-only
//     root file system (always, when the policy lists file-system paths), emptyDir volumes at
//     the workspace and /tmp, kubernetes.env;
//   - policy cpu and memory_mb become requests equal to limits.
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
// Executions and files go through pods/exec (client-go remotecommand: WebSocket, falling back
// to SPDY), which needs both the create and the get verbs. Each call runs a small Python
// supervisor, helper.py, sent on the exec's standard input to `python3 -I -S -c <boot>` (the
// image needs python3, as the provider declares python); all data then travels in frames on
// the exec's streams:
//   - a command runs as `/bin/sh -c <command>`, python code as `python3 -c <code>`; text over
//     64 KiB reaches the program on file descriptor 3. The environment is the container's plus
//     HOME=<workspace>, LANG=C.UTF-8, PYTHONUNBUFFERED=1 and ExecSpec.Env, set natively by the
//     helper (pods/exec has no environment of its own), never through a shell string;
//   - the program runs in its own session (setsid). When it exits, whatever it left running in
//     its session is killed and its output drained for at most a second, so `cmd &` holding
//     stdout cannot hang the call;
//   - a timeout (wall clock from the start of Exec) or a cancelled context kills the session
//     through a second exec: the helper of that exec finds the first one by its random token
//     and sends SIGTERM to every process of the program's session, SIGKILL after
//     Provider.KillGrace. The status then says TimedOut (or Exec returns ctx.Err()). The
//     helper also kills the session itself a little later, should the gateway be gone;
//   - standard input is empty unless ExecSpec.Stdin is set; stdout and stderr stay separate;
//     a program killed by signal n exits 128+n with Signal "SIG…";
//   - InstallPackages runs `python3 -m pip install --user` (the root file system is
//     read-only; packages land under the workspace, HOME).
//
// Files are confined to the workspace: the helper resolves paths as programs see them
// (symlinks followed) and refuses results outside it with fault.Policy; listings are
// structured lstat records, never `ls`; uploads land in a hidden temporary file renamed into
// place only when complete and within the size limit.
//
// Destroy also ends the executions this provider runs in the sandbox (fault.Gone).
package kubernetes
