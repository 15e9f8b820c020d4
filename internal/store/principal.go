package store

import "time"

// Principal is a persisted caller identity.
type Principal struct {
	ID          string
	Issuer      string
	Subject     string
	Username    string
	Email       string
	Groups      []string
	FirstSeenAt time.Time
	LastSeenAt  time.Time
}
