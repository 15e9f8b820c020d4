package sandboxd

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// mimeType is the form of a MIME type a rich result may carry (type/subtype, no parameters).
var mimeType = regexp.MustCompile(`^[a-z0-9][a-z0-9.+-]*/[A-Za-z0-9][A-Za-z0-9.+_-]*$`)

// binaryTypes are the MIME types whose data is base64 text.
var binaryTypes = []string{"image/png", "image/jpeg", "application/pdf"}

// jsonType reports whether the data of MIME type t is any JSON value rather than a string.
func jsonType(t string) bool { return t == "application/json" || strings.HasSuffix(t, "+json") }

// resultLimit is the cap of req's rich results (see ExecRequest.MaxResults).
func resultLimit(req ExecRequest) int64 {
	limit := req.MaxResults
	if limit == 0 {
		limit = req.MaxOutput
	}
	if limit <= 0 || limit > DefaultMaxOutput {
		limit = DefaultMaxOutput
	}
	return limit
}

// richResults collects the rich results of one execution within its limit and passes each
// on as it comes.
type richResults struct {
	limit int64
	used  int64
	list  []RichResult
	sink  func(RichResult)
}

func newRichResults(req ExecRequest, out Streams) *richResults {
	return &richResults{limit: resultLimit(req), sink: out.ResultFunc}
}

// add takes a result as the python driver sent it: entries that are no MIME type, or whose
// value does not have its type's form (a string; base64 for a binary type; any JSON value for
// a JSON type), are left out; a result that does not fit what is left of the limit is kept
// as dropped. The driver keeps within the limit itself; this holds it to it.
func (rr *richResults) add(data map[string]json.RawMessage, main bool, dropped *DroppedResult) {
	r := RichResult{Main: main}
	switch {
	case dropped != nil:
		d := DroppedResult{Bytes: max(dropped.Bytes, 0)}
		for _, t := range dropped.Types {
			if mimeType.MatchString(t) {
				d.Types = append(d.Types, t)
			}
		}
		slices.Sort(d.Types)
		r.Dropped = &d
	default:
		for t, v := range data {
			if !mimeType.MatchString(t) || !validData(t, v) {
				continue
			}
			// In the form encoding/json writes it (compact, <>& escaped), so that its size
			// stays what it is through every hop.
			v, err := json.Marshal(v)
			if err != nil {
				continue
			}
			if r.Data == nil {
				r.Data = map[string]json.RawMessage{}
			}
			r.Data[t] = v
		}
		if r.Data == nil {
			return
		}
		if size := r.Size(); rr.used+size > rr.limit {
			types := make([]string, 0, len(r.Data))
			for t := range r.Data {
				types = append(types, t)
			}
			slices.Sort(types)
			r = RichResult{Main: main, Dropped: &DroppedResult{Types: types, Bytes: size}}
		} else {
			rr.used += size
		}
	}
	rr.list = append(rr.list, r)
	if rr.sink != nil {
		rr.sink(r)
	}
}

// validData reports whether v is valid data of MIME type t.
func validData(t string, v json.RawMessage) bool {
	if jsonType(t) {
		return json.Valid(v)
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return false
	}
	if slices.Contains(binaryTypes, t) {
		_, err := base64.StdEncoding.DecodeString(s)
		return err == nil
	}
	return true
}
