//go:build unix

package local

import (
	_ "embed"

	"github.com/sandgate/sandgate/internal/providers"
)

// Block is a local_subprocess profile's block (`local_subprocess:`) as the configuration file
// writes it. Its comments are the keys' descriptions in config.schema.json.
type Block struct {
	// Workdir holds the per-sandbox workspaces; default the OS temp folder.
	Workdir string `koanf:"workdir" json:"workdir"`
	// Python is the interpreter for language "python"; default "python3" from PATH.
	Python string `koanf:"python" json:"python"`
}

//go:embed block.go
var blockSource []byte

// Backend is the local_subprocess provider type for a providers.Registry: its factory and its
// block, which a profile may leave out (it needs nothing).
func Backend() providers.Backend {
	return providers.Backend{
		Type: TypeName, Factory: Factory,
		NewBlock:      func() providers.Block { return new(Block) },
		BlockOptional: true,
		Provisions:    true,
		Summary:       "LocalSubprocess runs programs on the gateway's host, without isolation (dev/test only).",
		SchemaName:    "LocalSubprocess",
		BlockSource:   blockSource,
	}
}

// ApplyDefaults sets Python to DefaultPython when unset; Workdir stays empty (New uses the
// OS temp folder).
func (b *Block) ApplyDefaults() {
	if b.Python == "" {
		b.Python = DefaultPython
	}
}

// Validate refuses stateful with the queue broker: a context lives in one gateway or worker
// process, and the queue may hand a session's next execution to another.
func (b *Block) Validate(p providers.Profile) []providers.Problem {
	var ps providers.Problems
	if p.Stateful && p.Queued {
		ps.Add("stateful", "a local_subprocess context lives in one worker process while the queue may hand the next execution to another; use a docker profile (sandboxd keeps contexts in the container) or the embedded broker")
	}
	return ps
}

// Options returns the Options New is built from (Logger is the factory's).
func (b *Block) Options(providers.Profile) any {
	return Options{Workdir: b.Workdir, Python: b.Python}
}
