// Package sdadapter is the one providers.Sandbox over a sandboxd client
// (internal/sandboxd/remote): executions, package installs, files, stateful contexts, kept
// executions, reattaching and preview ports, written once for every provider whose sandboxes
// run sandboxd as a daemon — docker (a container) and kubernetes (a pod).
//
// A backend supplies only what is its own (Config): how it reaches the sandbox's daemon
// (ClientFunc), what it does when the daemon cannot be reached (UnreachedFunc) or has served
// (ServedFunc), and what a connection that broke mid-request means on its side (BrokenFunc:
// docker asks its engine, kubernetes the API server, whether the sandbox is gone). Everything
// else — the checks before a call, the order they run in, the spooling of uploads and the
// mapping of sandboxd's answers onto faults — is here, so the same input gets the same fault
// on every such provider. The lexical path rules are wspath's (providers.CleanPath,
// providers.CleanEntry), which sandboxd applies too, and local_subprocess, which runs
// sandboxd's Runtime in its own process, answers alike; the providertest group faults/ pins
// that on every provider.
//
// # Faults
//
// Before anything reaches the daemon: a bad execution spec is CheckExecSpec's fault; a bad
// path is wspath's (fault.Policy for NUL bytes, absolute paths and escapes; fault.Validation
// for the workspace folder itself as the target of a write or a removal, and for names and
// paths too long); a closed handle is fault.Conflict; an operation the sandbox cannot do
// because it runs no daemon of its own (Config.Transient) is fault.Capability.
//
// From the daemon: sandboxd's own fault kinds stand as they are (fault.NotFound, fault.Conflict,
// fault.Policy for an escape through a symlink, fault.TooLarge, fault.Full, …); a request it
// never received is fault.Provision wrapping providers.ErrUnreached (nothing ran); a
// connection that broke is the backend's BrokenFunc's answer (fault.Gone when the sandbox is
// gone, else fault.Provision); an execution cut short by the provider's Destroy (Running) is
// fault.Gone; an error once the caller's context ended is ctx.Err().
package sdadapter
