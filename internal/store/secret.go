package store

import "time"

// Secret is a persisted secret (issue 39; docs/semantics.md, Secrets): a named value a
// principal keeps for its sessions. The value is never stored in the clear: Sealed is it
// sealed under the key KeyID names (the domain's keyring, internal/sandbox/secret), with the
// owner and the name bound to it.
type Secret struct {
	OwnerID string // the principal's id
	Name    string
	// Hosts are the host patterns the value may be sent to (network_allow's syntax).
	Hosts     []string
	KeyID     string
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}
