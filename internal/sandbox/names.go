package sandbox

import (
	"fmt"
	"sort"

	"github.com/sandgate/sandgate/internal/fault"
)

// printable checks the caller-chosen text that listings show back (session names, label
// keys and values, snapshot names): a control character in it — C0 (U+0000–U+001F), DEL
// (U+007F) or C1 (U+0080–U+009F) — would be printed raw by CLIs and consoles (an ESC starts
// a terminal escape sequence), so it is refused with fault.Validation naming it. what names
// the text ("session name").
func printable(what, text string) error {
	for i, r := range text {
		if r < 0x20 || r >= 0x7F && r <= 0x9F {
			return fault.New(fault.Validation, "%s %q contains the control character U+%04X at byte %d; "+
				"names and labels are shown in terminals and consoles, so control characters (U+0000–U+001F, U+007F–U+009F) are not allowed", what, text, r, i)
		}
	}
	return nil
}

// printableSession checks a new session's name and labels (printable).
func printableSession(name string, labels map[string]string) error {
	if err := printable("session name", name); err != nil {
		return err
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the first offender, the same every time
	for _, k := range keys {
		if err := printable("label key", k); err != nil {
			return err
		}
		if err := printable(fmt.Sprintf("label %q's value", k), labels[k]); err != nil {
			return err
		}
	}
	return nil
}
