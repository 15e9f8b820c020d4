package kubenode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// hostPaths are the folders a kubelet or controller manager makes on the host whatever
// their flags say (the device plugins' socket folder /var/lib/kubelet/device-plugins is
// fixed; the flex-volume folder, the container log links): Stop removes those that Start did
// not find.
var hostPaths = []string{"/var/lib/kubelet", "/usr/libexec/kubernetes", "/var/log/containers"}

// absentPaths returns the hostPaths that do not exist.
func absentPaths() []string {
	var out []string
	for _, p := range hostPaths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			out = append(out, p)
		}
	}
	return out
}

// iptablesState is the set of chains ("table/chain") of iptables or ip6tables.
type iptablesState map[string]bool

// iptablesChains reads the chains of cmd (iptables or ip6tables); nil when cmd is missing.
func iptablesChains(cmd string) (iptablesState, error) {
	if _, err := exec.LookPath(cmd + "-save"); err != nil {
		return nil, nil
	}
	out, err := exec.Command(cmd + "-save").Output()
	if err != nil {
		return nil, fmt.Errorf("%s-save: %w", cmd, err)
	}
	st := iptablesState{}
	table := ""
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case strings.HasPrefix(line, ":"):
			if f := strings.Fields(line[1:]); len(f) > 0 {
				st[table+"/"+f[0]] = true
			}
		}
	}
	return st, nil
}

// removeNewKubeChains removes the KUBE-* chains of cmd that are not in before (the kubelet
// makes KUBE-IPTABLES-HINT, KUBE-KUBELET-CANARY and KUBE-FIREWALL, with jumps to the last
// from INPUT and OUTPUT): first the jumps to them, then their rules, then the chains.
func removeNewKubeChains(cmd string, before iptablesState) error {
	if before == nil {
		return nil
	}
	after, err := iptablesChains(cmd)
	if err != nil {
		return err
	}
	var errs []error
	run := func(args ...string) {
		if out, err := exec.Command(cmd, append([]string{"-w"}, args...)...).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w: %s", cmd, strings.Join(args, " "), err, out))
		}
	}
	var added []string
	for tc := range after {
		if !before[tc] && strings.HasPrefix(tc[strings.Index(tc, "/")+1:], "KUBE-") {
			added = append(added, tc)
		}
	}
	for _, tc := range added {
		table, chain, _ := strings.Cut(tc, "/")
		rules, err := exec.Command(cmd+"-save", "-t", table).Output()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, line := range strings.Split(string(rules), "\n") {
			f := strings.Fields(line)
			if len(f) == 4 && f[0] == "-A" && f[2] == "-j" && f[3] == chain {
				run("-t", table, "-D", f[1], "-j", chain)
			}
		}
	}
	for _, tc := range added {
		table, chain, _ := strings.Cut(tc, "/")
		run("-t", table, "-F", chain)
	}
	for _, tc := range added {
		table, chain, _ := strings.Cut(tc, "/")
		run("-t", table, "-X", chain)
	}
	return errors.Join(errs...)
}
