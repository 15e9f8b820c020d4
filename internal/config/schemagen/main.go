// Command schemagen writes the configuration's JSON Schema to the file named by its one
// argument: config.Schema with the blocks of the providers the gateway ships, asked of their
// registry (gateway.Schema). It runs through `go generate ./internal/config` (see schema.go).
package main

import (
	"fmt"
	"os"

	"github.com/sandgate/sandgate/internal/gateway"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: schemagen FILE")
		os.Exit(2)
	}
	b, err := gateway.Schema()
	if err == nil {
		err = os.WriteFile(os.Args[1], b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}
