package sandbox

import (
	"time"

	"github.com/sandgate/sandgate/internal/sandbox/names"
	"github.com/sandgate/sandgate/internal/sandbox/page"
)

// printableSession checks a new session's name and labels (names.Session).
func printableSession(name string, labels map[string]string) error {
	return names.Session(name, labels)
}

// encodeCursor is page.Encode.
func encodeCursor(t time.Time, id string) string { return page.Encode(t, id) }

// decodeCursor is page.Decode.
func decodeCursor(c string) (time.Time, string, error) { return page.Decode(c) }
