package gateway

import (
	_ "embed"

	"github.com/sandgate/sandgate/internal/providers"
)

// bedrockType is the seed's bedrock_agentcore provider type: its block is accepted for
// compatibility, but no provider has shipped for it, so no profile may name it.
const bedrockType = "bedrock_agentcore"

// bedrockBlock is the bedrock_agentcore block as the configuration file writes it.
type bedrockBlock struct {
	Region      string `koanf:"region" json:"region"`
	NetworkMode string `koanf:"network_mode" json:"network_mode"` // default sandbox
}

//go:embed bedrock.go
var bedrockSource []byte

// bedrockBackend reserves the type: a block without a factory.
func bedrockBackend() providers.Backend {
	return providers.Backend{
		Type:        bedrockType,
		NewBlock:    func() providers.Block { return new(bedrockBlock) },
		Summary:     "BedrockAgentCore is accepted for compatibility with the seed; no provider ships yet.",
		SchemaName:  "BedrockAgentCore",
		BlockSource: bedrockSource,
	}
}

// ApplyDefaults sets network_mode to sandbox when unset.
func (b *bedrockBlock) ApplyDefaults() {
	if b.NetworkMode == "" {
		b.NetworkMode = "sandbox"
	}
}

// Validate finds nothing: no profile may name the type (validateBlocks says so).
func (b *bedrockBlock) Validate(providers.Profile) []providers.Problem { return nil }

// Options is nil: nothing is built from the block.
func (b *bedrockBlock) Options(providers.Profile) any { return nil }
