// Package apigen holds the code oapi-codegen generates from openapi.yaml: the models, the chi
// strict server interface and the embedded spec. It is committed; never edit apigen.gen.go by
// hand. Regenerate with `go generate ./...` after changing openapi.yaml.
package apigen

//go:generate go tool oapi-codegen -config config.yaml ../../../openapi.yaml
