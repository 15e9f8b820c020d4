package providers

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"

	"github.com/sandgate/sandgate/internal/fault"
)

// An installation is one Sandgate deployment: one database and every gateway replica and
// worker on it. Its id is generated once, by the first gateway that starts on an empty
// database, and kept there (table installation, store.Store.Installation), so every replica
// reads the same one. Providers label everything they create with it (docker: containers,
// volumes, snapshot images, socket folders, workspace disks; kubernetes: pods,
// NetworkPolicies, claims, snapshot metadata), and their sweeps, warm pools and attaches keep
// to their own installation's objects: two installations sharing an engine or a namespace
// never take or remove each other's sandboxes.

// installationID is the form of an installation id: 16 lower-case hex digits (64 random
// bits). It is a valid Docker and Kubernetes label value and a safe path element.
var installationID = regexp.MustCompile(`^[0-9a-f]{16}$`)

// NewInstallationID returns a fresh random installation id (16 lower-case hex digits), the
// candidate a gateway offers its database when none is recorded yet.
func NewInstallationID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// ValidInstallationID reports whether id has the form of an installation id (16 lower-case
// hex digits).
func ValidInstallationID(id string) bool { return installationID.MatchString(id) }

// CheckInstallationID is the check a provider's New makes of the installation id it is
// given (backend names the provider in the message).
//
// Errors: fault.Config when id is empty or not 16 lower-case hex digits (the composition
// root always passes its database's; a test must pass one, e.g. NewInstallationID()).
func CheckInstallationID(backend, id string) error {
	if id == "" {
		return fault.New(fault.Config, "%s: no installation id: the objects this provider makes must name their installation (the gateway passes its database's)", backend)
	}
	if !ValidInstallationID(id) {
		return fault.New(fault.Config, "%s: installation id %q is not 16 lower-case hex digits", backend, id)
	}
	return nil
}
