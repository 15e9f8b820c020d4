package remote

import (
	"bytes"
	_ "embed"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the OpenAPI 3.1 description of the API (openapi.yaml), a fresh copy on
// every call.
func OpenAPI() []byte { return bytes.Clone(openAPI) }
