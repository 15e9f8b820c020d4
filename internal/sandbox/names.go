package sandbox

import (
	"time"

	"github.com/sandgate/sandgate/internal/sandbox/names"
	"github.com/sandgate/sandgate/internal/sandbox/page"
)

// printable checks caller-chosen text that listings show back (names.Printable).
func printable(what, text string) error { return names.Printable(what, text) }

// printableSession checks a new session's name and labels (names.Session).
func printableSession(name string, labels map[string]string) error {
	return names.Session(name, labels)
}

// encodeCursor is page.Encode.
func encodeCursor(t time.Time, id string) string { return page.Encode(t, id) }

// decodeCursor is page.Decode.
func decodeCursor(c string) (time.Time, string, error) { return page.Decode(c) }
