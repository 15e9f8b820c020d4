// Package page is the domain's paging cursor: the position after the last row of a page
// (its time and id), as opaque base64url text a listing's caller hands back for the next.
package page

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// Encode is the cursor of the page after a row made at t with id.
func Encode(t time.Time, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(t.UnixNano(), 10) + ":" + id))
}

// Decode reads a cursor back ("" : the first page, zero time and id). Errors:
// fault.Validation for text Encode did not make.
func Decode(c string) (time.Time, string, error) {
	if c == "" {
		return time.Time{}, "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err == nil {
		if ts, id, ok := strings.Cut(string(b), ":"); ok {
			if n, err := strconv.ParseInt(ts, 10, 64); err == nil && id != "" {
				return time.Unix(0, n), id, nil
			}
		}
	}
	return time.Time{}, "", fault.New(fault.Validation, "cursor %q is not a next_cursor this API returned; start again without it", c)
}
