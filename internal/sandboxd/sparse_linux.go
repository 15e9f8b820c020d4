package sandboxd

import "golang.org/x/sys/unix"

// lseek's whence values that find data and holes.
const (
	seekData = unix.SEEK_DATA
	seekHole = unix.SEEK_HOLE
)
