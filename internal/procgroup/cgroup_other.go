//go:build unix && !linux

package procgroup

import (
	"errors"
	"syscall"
)

// Cgroups needs Linux (cgroup v2); elsewhere OpenCgroups and DetectCgroups always fail.
type Cgroups struct{}

var errNoCgroups = errors.New("procgroup: cgroups need Linux")

// OpenCgroups fails off Linux.
func OpenCgroups(string) (*Cgroups, error) { return nil, errNoCgroups }

// DetectCgroups fails off Linux.
func DetectCgroups(string) (*Cgroups, error) { return nil, errNoCgroups }

// Parent returns "".
func (c *Cgroups) Parent() string { return "" }

func (c *Cgroups) prepare(*syscall.SysProcAttr) (string, int, error) { return "", -1, errNoCgroups }

func cgroupSignal(string, syscall.Signal)                 {}
func cgroupSignalExcept(string, syscall.Signal, int) bool { return false }
func cgroupPopulated(string) (populated, ok bool)         { return false, false }
func cgroupRemove(string)                                 {}
