package mcp

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandgate/sandgate/internal/sandbox"
)

// Rich results of code (the last expression's value, charts, tables) reach an agent as MCP
// clients show them: each result is listed in the tool's JSON — its MIME types and its
// text/plain, the texts of all results together within tool_output_max_chars characters
// (head and tail kept, "truncated" set when cut) — and a PNG or JPEG image of a result is an
// image content item after the JSON text (the "image" member names its type). Images are not
// counted in characters (an agent sees them as pictures, not text): they are bounded, whole,
// by sandbox.max_output_bytes like every rich result; one over it is listed as dropped.

// resultItem is one rich result in a tool's JSON.
type resultItem struct {
	IsMainResult bool     `json:"is_main_result"`
	Types        []string `json:"types"`
	Text         *string  `json:"text,omitempty"`
	Image        string   `json:"image,omitempty"`
	Dropped      bool     `json:"dropped,omitempty"`
}

// imageTypes are the MIME types sent as image content items, the preferred first.
var imageTypes = []string{"image/png", "image/jpeg"}

// resultsSchema is the JSON Schema of the "results" member.
const resultsSchema = `"results": {"type": "array", "description": "Rich results of the code, as a notebook shows them: the last expression's value (is_main_result) and displays (charts, tables). An image is an image content item after this text.", "items": {"type": "object", "properties": {
	"is_main_result": {"type": "boolean"}, "types": {"type": "array", "items": {"type": "string"}, "description": "Its MIME types."},
	"text": {"type": "string", "description": "Its text/plain."},
	"image": {"type": "string", "description": "The MIME type of the image content item that shows it."},
	"dropped": {"type": "boolean", "description": "Over the output limit: dropped whole."}},
	"required": ["is_main_result", "types"], "additionalProperties": false}}`

// results lists r's rich results for a tool's JSON and makes their image content items;
// truncated says a text was cut. budget is the characters the texts may take together.
func (h *Handler) results(list []sandbox.RichResult, budget int) (items []resultItem, images []sdk.Content, truncated bool) {
	for _, r := range list {
		it := resultItem{IsMainResult: r.Main, Types: []string{}}
		if r.Dropped != nil {
			it.Types, it.Dropped = append(it.Types, r.Dropped.Types...), true
			items = append(items, it)
			continue
		}
		for t := range r.Data {
			it.Types = append(it.Types, t)
		}
		slices.Sort(it.Types)
		var text string
		if json.Unmarshal(r.Data["text/plain"], &text) == nil {
			cut, was := headTail(text, max(budget, 1))
			if budget <= 0 {
				cut, was = "", text != ""
			}
			budget -= utf8.RuneCountInString(cut)
			truncated = truncated || was
			it.Text = &cut
		}
		for _, t := range imageTypes {
			var b64 string
			if json.Unmarshal(r.Data[t], &b64) != nil {
				continue
			}
			data, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				continue
			}
			images = append(images, &sdk.ImageContent{Data: data, MIMEType: t})
			it.Image = t
			break
		}
		items = append(items, it)
	}
	return items, images, truncated
}
