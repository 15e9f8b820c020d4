package sandbox

import (
	"time"

	"github.com/sandgate/sandgate/internal/sandbox/page"
)

// encodeCursor is page.Encode.
func encodeCursor(t time.Time, id string) string { return page.Encode(t, id) }

// decodeCursor is page.Decode.
func decodeCursor(c string) (time.Time, string, error) { return page.Decode(c) }
