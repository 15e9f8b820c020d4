package client

import (
	"encoding/base64"
	"fmt"
	"slices"
)

// binaryTypes are the MIME types whose data in a RichResult is base64.
var binaryTypes = []string{"image/png", "image/jpeg", "application/pdf"}

// Types returns the MIME types r has data of, sorted.
func (r RichResult) Types() []string {
	if r.Data == nil {
		return nil
	}
	out := make([]string, 0, len(*r.Data))
	for t := range *r.Data {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Text returns r's data of MIME type t when it is a string: the text of a text type
// (text/plain, text/html, image/svg+xml, …), the base64 of a binary one. ok is false when r
// has no string of that type.
func (r RichResult) Text(t string) (s string, ok bool) {
	if r.Data == nil {
		return "", false
	}
	s, ok = (*r.Data)[t].(string)
	return s, ok
}

// Bytes returns r's data of MIME type t as bytes: decoded from base64 for image/png,
// image/jpeg and application/pdf, the UTF-8 of the text otherwise. ok is false when r has no
// string of that type; an error when its base64 does not decode.
func (r RichResult) Bytes(t string) (b []byte, ok bool, err error) {
	s, ok := r.Text(t)
	if !ok {
		return nil, false, nil
	}
	if !slices.Contains(binaryTypes, t) {
		return []byte(s), true, nil
	}
	b, err = base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, true, fmt.Errorf("sandgate: the %s data of a rich result is not base64: %w", t, err)
	}
	return b, true, nil
}
