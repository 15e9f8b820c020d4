//go:build unix && !linux

package sandboxd

func enableSubreaper() bool { return false }

func nowTicks() int64 { return 0 }

type child struct {
	pid, session int
	start        int64
	zombie       bool
}

func adoptedChildren(map[int]struct{}) []child { return nil }
func killOrphan(int, int)                      {}
func reapChild(int) bool                       { return true }
