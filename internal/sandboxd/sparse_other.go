//go:build unix && !linux

package sandboxd

// Elsewhere the whence values differ by system; holes are not looked for (files are archived
// whole, and extraction still turns zero runs into holes).
const (
	seekData = -1
	seekHole = -1
)
