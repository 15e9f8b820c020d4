package providers

import (
	"context"
	"io"

	"github.com/sandgate/sandgate/internal/fault"
)

// The types below are the seed's base-class defaults for optional methods (docs/semantics.md §3:
// "optional methods whose base implementation raises SandboxCapabilityError"). Embed the ones
// matching the capabilities a provider does not declare; a method the embedding type defines
// itself takes precedence. Subject names the provider in the error ("<subject> does not
// support capability: <cap>").

// NoFiles supplies the four file methods of a Sandbox without the files capability: each
// returns fault.Unsupported(Subject, "files") and does nothing else.
type NoFiles struct {
	Subject string
}

// WriteFile returns fault.Unsupported(n.Subject, "files") without reading r.
func (n NoFiles) WriteFile(context.Context, string, io.Reader, int64) (int64, error) {
	return 0, fault.Unsupported(n.Subject, "files")
}

// ReadFile returns fault.Unsupported(n.Subject, "files").
func (n NoFiles) ReadFile(context.Context, string) (io.ReadCloser, error) {
	return nil, fault.Unsupported(n.Subject, "files")
}

// ListFiles returns fault.Unsupported(n.Subject, "files").
func (n NoFiles) ListFiles(context.Context, string) ([]FileInfo, error) {
	return nil, fault.Unsupported(n.Subject, "files")
}

// RemoveFile returns fault.Unsupported(n.Subject, "files").
func (n NoFiles) RemoveFile(context.Context, string) error {
	return fault.Unsupported(n.Subject, "files")
}

// NoPackageInstall supplies Sandbox.InstallPackages for a sandbox without the package_install
// capability.
type NoPackageInstall struct {
	Subject string
}

// InstallPackages returns fault.Unsupported(n.Subject, "package_install") and writes nothing
// to out.
func (n NoPackageInstall) InstallPackages(context.Context, []string, Output) (ExitStatus, error) {
	return ExitStatus{}, fault.Unsupported(n.Subject, "package_install")
}

// NoAttach supplies Provider.Attach for a provider without the attach capability.
type NoAttach struct {
	Subject string
}

// Attach returns fault.Unsupported(n.Subject, "attach").
func (n NoAttach) Attach(context.Context, string, Principal, Policy) (Sandbox, error) {
	return nil, fault.Unsupported(n.Subject, "attach")
}
