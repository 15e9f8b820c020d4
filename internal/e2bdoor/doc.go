// Package e2bdoor is Sandgate's E2B edge: E2B's REST API, its in-sandbox daemon envd and its
// code interpreter, served on Sandgate's domain so that code written for E2B's SDKs (e2b,
// @e2b/code-interpreter, and what is built on them) runs on Sandgate unchanged — pointed at
// the gateway by E2B_API_URL and E2B_SANDBOX_URL (both <public_url>/e2b; Path) with a
// Sandgate API key as E2B_API_KEY (docs/e2b-door.md).
//
// It is an edge beside internal/api and internal/mcp: it calls the domain's exported methods
// (internal/sandbox) only — every policy, quota, audit and ordering rule applies exactly as on
// the REST API — and shares with the e2b provider nothing but E2B's wire shapes
// (internal/providers/e2b/wire). The gateway mounts it behind /v1's authentication, rate and
// open-request limits, the credential read by Credential.
//
// Identity. A request is its API key's principal. The control plane takes the key as
// X-API-KEY; a sandbox's create and connect answers hand the caller's own key back as the
// sandbox's envd and traffic access tokens, which E2B's SDKs send with every request to the
// sandbox (X-Access-Token, E2B-Traffic-Access-Token): the sandbox plane is authenticated by the
// same key — revoked, it closes both — and a sandbox is reached only by its owner (another
// principal's id is not found: 404 on the control plane, 502 on the sandbox plane as E2B's
// proxy answers for a sandbox that does not exist).
//
// The mapping (details in each file's comment):
//   - a sandbox is a session of the caller's; its id is the session's. Template → profile
//     (Options.Templates, else the template's own name), metadata → labels, envVars → the
//     session's environment, timeout → its lifetime (E2B's default 15 s; autoPause: paused,
//     not destroyed, when it ends), kill → destroy, pause → pause, connect → resume
//     (sandboxes.go);
//   - envd's processes are the session's background processes, by their pid in the sandbox
//     (processes.go); its files are the session's workspace, shown at E2B's home, /home/user
//     (paths.go, filesystem.go, files.go);
//   - the code interpreter's contexts are the session's stateful contexts, its results the
//     domain's rich results (interp.go).
//
// What E2B offers and the door does not is refused — with E2B's status for bad input and a
// message naming it — never dropped; the door reports envd version EnvdVersion so that the
// SDKs refuse later envd features themselves (errors.go, docs/e2b-door.md).
package e2bdoor
