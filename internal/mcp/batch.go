package mcp

import (
	"bytes"
	"encoding/json"
	"net/http"

	"github.com/sandgate/sandgate/internal/fault"
)

// JSON-RPC batches (one POST carrying an array of messages) exist in MCP 2025-03-26 and
// earlier; 2025-06-18 removed them. The SDK refuses a batch only when the request names
// 2025-06-18 or later in its MCP-Protocol-Version header (a request without the header is
// taken as 2025-03-26), and only after decoding every message of it; a batch it takes is
// one HTTP request however many calls it carries. Calls is what the gateway's edge asks
// first, before the SDK decodes anything: it bounds a batch and tells how many calls it
// carries, each counted against the principal's request rate.

// DefaultMaxBatch is Options.MaxBatch's default: the most messages one JSON-RPC batch may
// carry.
const DefaultMaxBatch = 50

// batchesRemoved is the first MCP protocol version without JSON-RPC batches.
const batchesRemoved = "2025-06-18"

// protocolVersionHeader names the request's MCP protocol version (MCP 2025-06-18 §2.7).
const protocolVersionHeader = "Mcp-Protocol-Version"

// Calls counts the JSON-RPC messages of a POST body to /mcp: 1 for a single message (or for
// a body that is no JSON array; the SDK judges it). A batch (a JSON array) is refused with
//   - fault.Validation under protocol version 2025-06-18 or later (the MCP-Protocol-Version
//     header), which has no batches;
//   - fault.TooLarge past Options.MaxBatch messages, found by decoding no more than
//     MaxBatch+1 of them.
//
// It serves as api.Mount.Calls.
func (h *Handler) Calls(r *http.Request, body []byte) (int, error) {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '[' {
		return 1, nil
	}
	if v := r.Header.Get(protocolVersionHeader); v >= batchesRemoved {
		return 0, fault.New(fault.Validation, "JSON-RPC batches were removed in MCP %s, and this request names protocol version %s (%s): "+
			"send one message per request", batchesRemoved, v, protocolVersionHeader)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the '['
		return 1, nil
	}
	n := 0
	for dec.More() {
		var msg json.RawMessage
		if err := dec.Decode(&msg); err != nil {
			break // malformed: the SDK refuses it
		}
		n++
		if n > h.maxBatch {
			return 0, fault.New(fault.TooLarge, "this JSON-RPC batch carries more than %d messages, the most one batch may carry "+
				"(server.mcp_max_batch); send fewer per batch, or one message per request (MCP 2025-06-18 and later have no batches)", h.maxBatch)
		}
	}
	return max(n, 1), nil
}
