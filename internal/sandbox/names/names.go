// Package names checks the caller-chosen text that listings show back: session names, label
// keys and values, snapshot and API key names.
package names

import (
	"fmt"
	"sort"

	"github.com/sandgate/sandgate/internal/fault"
)

// Printable checks caller-chosen text that listings show back: a control character in it —
// C0 (U+0000–U+001F), DEL (U+007F) or C1 (U+0080–U+009F) — would be printed raw by CLIs and
// consoles (an ESC starts a terminal escape sequence), so it is refused with
// fault.Validation naming it. what names the text ("session name").
func Printable(what, text string) error {
	for i, r := range text {
		if r < 0x20 || r >= 0x7F && r <= 0x9F {
			return fault.New(fault.Validation, "%s %q contains the control character U+%04X at byte %d; "+
				"names and labels are shown in terminals and consoles, so control characters (U+0000–U+001F, U+007F–U+009F) are not allowed", what, text, r, i)
		}
	}
	return nil
}

// Session checks a new session's name and labels (Printable), reporting the first offender
// in the same order every time.
func Session(name string, labels map[string]string) error {
	if err := Printable("session name", name); err != nil {
		return err
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := Printable("label key", k); err != nil {
			return err
		}
		if err := Printable(fmt.Sprintf("label %q's value", k), labels[k]); err != nil {
			return err
		}
	}
	return nil
}
