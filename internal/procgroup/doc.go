// Package procgroup supervises a program together with every process it starts.
//
// Start runs an exec.Cmd as the leader of a new session and process group (setsid), so the
// program and everything it forks share one session id: its pid. A Process then offers what
// a supervisor needs to end such a tree reliably:
//
//   - Exited reports that the leader has exited without reaping it (Linux: waitid with
//     WNOWAIT), so its pid, and with it the session and process-group ids, stay reserved while
//     the leftovers of the session are killed: no signal can reach an unrelated process that
//     reused the id;
//   - SignalSession signals the process group and, on Linux, every other live process of the
//     leader's tree found through /proc: the members of its session (children that moved to
//     another process group with setpgid are reached too) and the descendants of those that
//     left the session (setsid) while their chain of parents is unbroken. A process whose
//     parent ended after it left the session (a double fork) is out of reach here: it was
//     handed to init or to a subreaper;
//   - Terminate sends SIGTERM to the tree, gives it a grace period to end, then sends
//     SIGKILL — also to the processes it found with the SIGTERM that are no longer found
//     through their parents — and returns once the leader has exited;
//   - KillOthers kills every process of the tree but the leader, which runs on: the end of
//     what an interpreter started for one request;
//   - Wait waits for the leader, SIGKILLs whatever it left running in its session, then reaps
//     it. After Wait no signal is sent any more.
//
// StartIn does the same with the process created inside a cgroup (v2) of its own
// (Cgroups: OpenCgroups on a delegated folder, or DetectCgroups where this process may make
// cgroups, such as root on a cgroup v2 host). The cgroup then holds the session and every
// process that leaves it (setsid, a double fork), since no process leaves a cgroup on its
// own: SignalSession, Terminate, KillOthers and Wait signal the cgroup's processes instead of
// scanning /proc (cgroup.procs, and cgroup.kill for SIGKILL), and Wait removes the cgroup.
//
// ExitStatus turns a reaped process's state into an exit code and a signal name, the way
// shells report them (128+n and "SIGKILL" for signal n).
//
// On Unix systems other than Linux there is no WNOWAIT and no /proc: the leader is reaped as
// soon as it exits, and signalling relies on its process-group id not being reused within
// moments.
package procgroup
