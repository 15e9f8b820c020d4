package store

import "time"

// APIKey is a persisted API key (docs/semantics.md §1 API key). The secret itself is never
// stored: Hash is its SHA-256, Prefix its first characters for display. The identity fields
// are the maker's as they were when the key was made; the key authenticates as them.
type APIKey struct {
	ID          string
	PrincipalID string // the principal that made it, and that it authenticates as
	Name        string
	Prefix      string
	Hash        []byte // SHA-256 of the secret (32 bytes)
	Issuer      string
	Subject     string
	Username    string
	Email       string
	Groups      []string
	Credentials KeyCredentials
	// Profiles, when not nil, are the only profiles the key may use.
	Profiles   []string
	CreatedAt  time.Time
	ExpiresAt  time.Time
	LastUsedAt *time.Time // written at most once a KeyUseInterval (the Postgres store's UseAPIKey)
	RevokedAt  *time.Time
	RevokedBy  string // the principal that revoked it ("" while it is not revoked)
}

// KeyCredentials are the user-mode credentials an API key carries (principal.Credentials as
// its maker's token resolved them), kept as JSON.
type KeyCredentials struct {
	KubernetesUser   string   `json:"kubernetes_user,omitempty"`
	KubernetesGroups []string `json:"kubernetes_groups,omitempty"`
	AWSRoleARN       string   `json:"aws_role_arn,omitempty"`
	RunAs            string   `json:"run_as,omitempty"`
}

// APIKeyFilter selects keys for ListAPIKeys.
type APIKeyFilter struct {
	OwnerID      string // the principal whose keys; with All, ignored
	All          bool   // every principal's
	Limit        int
	AfterCreated time.Time // keyset cursor: strictly older than (AfterCreated, AfterID)
	AfterID      string
}

// KeyUseInterval is how often at most a key's use is recorded (last_used_at) by the Postgres
// store's UseAPIKey, the read authentication makes.
const KeyUseInterval = time.Minute
