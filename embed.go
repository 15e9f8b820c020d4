// Package sandgate holds repository-level assets embedded into the gateway binary.
package sandgate

import _ "embed"

// OpenAPI is the contract, served verbatim at /openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
