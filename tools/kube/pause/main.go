// Command pause is the infrastructure container of the test node's pods (the pod sandbox that
// holds their namespaces), built locally by scripts/kube-setup.sh because no image registry is
// reachable. It does what a pod's pause container must: stay up as PID 1, reap the orphans
// that are re-parented to it, and exit 0 on SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Reap every exited child; -1 = any child, WNOHANG = do not block.
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
