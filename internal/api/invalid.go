package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/sandgate/sandgate/internal/api/apigen"
)

// This file renders request-validation failures (kin-openapi's openapi3filter errors, and
// the parameter-binding errors of the generated wrappers, which run first) as one line per
// failure that names the parameter or body member and what the contract expects of it,
// taken from the schema's own constraints: "query parameter 'limit' must be an integer from
// 1 to 500". The validators' own texts (JSON Schema locations, Go parse errors) never reach
// the caller.

// requestProblems renders err, an openapi3filter validation error (a MultiError of them
// too), as field problems.
func requestProblems(err error) []FieldProblem {
	if me, ok := err.(openapi3.MultiError); ok {
		var out []FieldProblem
		for _, e := range me {
			out = append(out, requestProblems(e)...)
		}
		return out
	}
	var re *openapi3filter.RequestError
	if !errors.As(err, &re) {
		return []FieldProblem{{Message: err.Error()}}
	}
	switch {
	case re.Parameter != nil:
		p := re.Parameter
		field, subject := p.In+"."+p.Name, paramSubject(p)
		var schema *openapi3.Schema
		if p.Schema != nil {
			schema = p.Schema.Value
		}
		var se *openapi3.SchemaError
		switch {
		case errors.As(re.Err, &se):
			return schemaProblems(re.Err, field, func(ptr []string) string { return memberSubject(subject, ptr) })
		case errors.Is(re.Err, openapi3filter.ErrInvalidRequired):
			return []FieldProblem{{Field: field, Message: subject + " is required"}}
		case errors.Is(re.Err, openapi3filter.ErrInvalidEmptyValue):
			return []FieldProblem{{Field: field, Message: subject + " must not be empty" + expected(", but ", schema)}}
		default: // a value that does not parse as the schema's type
			return []FieldProblem{{Field: field, Message: subject + " must be " + orValid(expectation(schema))}}
		}
	case re.RequestBody != nil:
		var se *openapi3.SchemaError
		var pe *openapi3filter.ParseError
		switch {
		case errors.As(re.Err, &se):
			return schemaProblems(re.Err, "body", func(ptr []string) string { return memberSubject("the body", ptr) })
		case errors.Is(re.Err, openapi3filter.ErrInvalidRequired):
			return []FieldProblem{{Field: "body", Message: "the body is required: send a JSON object"}}
		case errors.As(re.Err, &pe):
			cause := pe.Reason
			if root := pe.RootCause(); root != nil {
				cause = root.Error()
			}
			return []FieldProblem{{Field: "body", Message: "the body is not valid JSON: " + cause}}
		}
		return []FieldProblem{{Field: "body", Message: "the body is invalid: " + re.Err.Error()}}
	}
	return []FieldProblem{{Message: re.Error()}}
}

// schemaProblems renders a schema failure by its leaves (the failures of single keywords);
// subject names the value at a JSON pointer below the validated one.
func schemaProblems(se error, field string, subject func(ptr []string) string) []FieldProblem {
	var out []FieldProblem
	for _, leaf := range schemaLeaves(se) {
		ptr := leaf.JSONPointer()
		f := field
		if len(ptr) > 0 {
			f += "." + strings.Join(ptr, ".")
		}
		var verr *jsonschema.ValidationError
		errors.As(leaf, &verr)
		switch k := errorKind(verr).(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				out = append(out, FieldProblem{Field: f + "." + m, Message: subject(append(slices.Clone(ptr), m)) + " is required"})
			}
			continue
		case *kind.AdditionalProperties:
			known := members(leaf.Schema)
			for _, m := range k.Properties {
				out = append(out, FieldProblem{Field: f + "." + m, Message: subject(append(slices.Clone(ptr), m)) + " is not a member of this object" + known})
			}
			continue
		case *kind.PropertyNames:
			msg := subject(ptr) + " has the key " + strconv.Quote(k.Property)
			if leaf.Schema != nil && leaf.Schema.PropertyNames != nil {
				msg += "; its keys must be " + orValid(expectation(leaf.Schema.PropertyNames.Value))
			}
			out = append(out, FieldProblem{Field: f, Message: msg})
			continue
		}
		msg := subject(ptr) + " must be " + orValid(expectation(leaf.Schema))
		switch leaf.SchemaField { // also the keyword of the OpenAPI 3.0 validator's errors
		case "required": // its pointer ends at the missing member
			msg = subject(ptr) + " is required"
		case "properties": // an unknown member, named only in the reason: `property "x" is unsupported`
			if q, ok := strings.CutSuffix(strings.TrimPrefix(leaf.Reason, "property "), " is unsupported"); ok {
				if name, err := strconv.Unquote(q); err == nil {
					f += "." + name
					msg = subject(append(slices.Clone(ptr), name)) + " is not a member of this object" + members(leaf.Schema)
				}
			}
		case "maxProperties":
			if leaf.Schema != nil && leaf.Schema.MaxProps != nil {
				msg = fmt.Sprintf("%s must have at most %d members", subject(ptr), *leaf.Schema.MaxProps)
			}
		case "minItems", "maxItems":
			msg = subject(ptr) + " must be " + orValid(listExpectation(leaf.Schema))
		case "oneOf", "anyOf", "not":
			msg = subject(ptr) + " matches none of the shapes /openapi.yaml allows for it"
		}
		out = append(out, FieldProblem{Field: f, Message: msg})
	}
	return out
}

// members lists the members object schema s declares, as " (the members are a, b)".
func members(s *openapi3.Schema) string {
	if s == nil || len(s.Properties) == 0 {
		return ""
	}
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		names = append(names, n)
	}
	slices.Sort(names)
	return " (the members are " + strings.Join(names, ", ") + ")"
}

// errorKind is verr's keyword failure, or nil.
func errorKind(verr *jsonschema.ValidationError) jsonschema.ErrorKind {
	if verr == nil {
		return nil
	}
	// A wrapper with one cause is about its cause (kin-openapi does the same for the schema).
	for len(verr.Causes) == 1 {
		switch verr.ErrorKind.(type) {
		case *kind.Schema, *kind.Group, *kind.Reference:
			verr = verr.Causes[0]
			continue
		}
		break
	}
	return verr.ErrorKind
}

// schemaLeaves flattens se to the errors of single keywords.
func schemaLeaves(err error) []*openapi3.SchemaError {
	switch e := err.(type) {
	case openapi3.MultiError:
		var out []*openapi3.SchemaError
		for _, x := range e {
			out = append(out, schemaLeaves(x)...)
		}
		return out
	case *openapi3.SchemaError:
		if e.Origin != nil {
			if sub := schemaLeaves(errors.Unwrap(e.Origin)); len(sub) > 0 {
				return sub
			}
			if sub := schemaLeaves(e.Origin); len(sub) > 0 {
				return sub
			}
		}
		return []*openapi3.SchemaError{e}
	}
	return nil
}

// paramSubject names p as the caller wrote it: "query parameter 'limit'", "header
// 'Last-Event-ID'".
func paramSubject(p *openapi3.Parameter) string {
	switch p.In {
	case openapi3.ParameterInHeader:
		return "header '" + p.Name + "'"
	case openapi3.ParameterInCookie:
		return "cookie '" + p.Name + "'"
	}
	return p.In + " parameter '" + p.Name + "'"
}

// memberSubject names the value at ptr below the one subject names: "body member
// 'labels.team'"; subject itself for the root.
func memberSubject(subject string, ptr []string) string {
	if len(ptr) == 0 {
		return subject
	}
	if subject == "the body" {
		return "body member '" + strings.Join(ptr, ".") + "'"
	}
	return subject + " member '" + strings.Join(ptr, ".") + "'"
}

// expectation describes what s accepts, from its own constraints: "an integer from 1 to
// 500", "a string matching ^[0-9a-f]{32}$", "one of python, bash". "" when s says nothing.
func expectation(s *openapi3.Schema) string {
	if s == nil {
		return ""
	}
	if x, ok := s.Extensions["x-expect"].(string); ok && x != "" {
		return x // the contract's own words for a constraint a pattern says badly
	}
	if len(s.Enum) > 0 {
		vals := make([]string, 0, len(s.Enum))
		for _, v := range s.Enum {
			if v != nil {
				vals = append(vals, fmt.Sprint(v))
			}
		}
		if len(vals) == 1 {
			return vals[0]
		}
		return "one of " + strings.Join(vals, ", ")
	}
	if s.Const != nil {
		return fmt.Sprint(s.Const)
	}
	t := s.Type
	switch {
	case t.Includes(openapi3.TypeInteger):
		return "an integer" + numberRange(s)
	case t.Includes(openapi3.TypeNumber):
		return "a number" + numberRange(s)
	case t.Includes(openapi3.TypeString):
		switch {
		case s.Pattern != "":
			return "a string matching " + s.Pattern + lengthRange(s)
		case s.Format == "date-time":
			return "an RFC 3339 date-time (e.g. 2026-01-02T15:04:05Z)"
		case s.Format == "uri":
			return "an absolute URI"
		}
		return "a string" + lengthRange(s)
	case t.Includes(openapi3.TypeBoolean):
		return "true or false"
	case t.Includes(openapi3.TypeArray):
		return listExpectation(s)
	case t.Includes(openapi3.TypeObject):
		return "a JSON object"
	}
	return ""
}

func listExpectation(s *openapi3.Schema) string {
	if s == nil {
		return ""
	}
	e := "a list"
	switch {
	case s.MaxItems != nil && s.MinItems > 0:
		e += fmt.Sprintf(" of %d to %d items", s.MinItems, *s.MaxItems)
	case s.MaxItems != nil:
		e += fmt.Sprintf(" of at most %d items", *s.MaxItems)
	case s.MinItems > 0:
		e += fmt.Sprintf(" of at least %d items", s.MinItems)
	}
	if s.Items != nil && s.Items.Value != nil {
		if item := expectation(s.Items.Value); item != "" {
			e += ", each " + item
		}
	}
	return e
}

func numberRange(s *openapi3.Schema) string {
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	lo, hi := s.Min, s.Max
	switch {
	case lo != nil && hi != nil:
		return " from " + num(*lo) + " to " + num(*hi)
	case lo != nil:
		return " of at least " + num(*lo)
	case hi != nil:
		return " of at most " + num(*hi)
	case s.ExclusiveMin.Value != nil:
		return " greater than " + num(*s.ExclusiveMin.Value)
	}
	return ""
}

func lengthRange(s *openapi3.Schema) string {
	switch {
	case s.MaxLength != nil && s.MinLength > 0:
		return fmt.Sprintf(" of %d to %d characters", s.MinLength, *s.MaxLength)
	case s.MaxLength != nil:
		return fmt.Sprintf(" of at most %d characters", *s.MaxLength)
	case s.MinLength > 0:
		return fmt.Sprintf(" of at least %d characters", s.MinLength)
	}
	return ""
}

func orValid(e string) string {
	if e == "" {
		return "as /openapi.yaml describes it"
	}
	return e
}

func expected(prefix string, s *openapi3.Schema) string {
	if e := expectation(s); e != "" {
		return prefix + e
	}
	return ""
}

// bindingProblem renders an error of the generated wrappers' parameter binding (they run
// before the gate) against the parameter's declaration in the operation of r.
func (g *gate) bindingProblem(r *http.Request, err error) Problem {
	p := Problem{Type: ProblemTypeBase + "validation", Title: "Invalid request", Status: http.StatusBadRequest}
	var name string
	var fp FieldProblem
	var (
		invalid   *apigen.InvalidParamFormatError
		unmarshal *apigen.UnmarshalingParamError
		required  *apigen.RequiredParamError
		header    *apigen.RequiredHeaderError
		many      *apigen.TooManyValuesForParamError
	)
	switch {
	case errors.As(err, &invalid):
		name = invalid.ParamName
	case errors.As(err, &unmarshal):
		name = unmarshal.ParamName
	case errors.As(err, &required):
		name = required.ParamName
	case errors.As(err, &header):
		name = header.ParamName
	case errors.As(err, &many):
		name = many.ParamName
	default:
		p.Detail = err.Error()
		return p
	}
	param := g.parameter(r, name)
	if param == nil { // the contract and the generated code disagree: say what we know
		p.Detail = "parameter '" + name + "' is invalid (see /openapi.yaml for the request shape)"
		return p
	}
	var schema *openapi3.Schema
	if param.Schema != nil {
		schema = param.Schema.Value
	}
	fp.Field = param.In + "." + param.Name
	switch {
	case required != nil || header != nil:
		fp.Message = paramSubject(param) + " is required"
	case many != nil:
		fp.Message = paramSubject(param) + " must be given once"
	default:
		fp.Message = paramSubject(param) + " must be " + orValid(expectation(schema))
	}
	p.Errors = []FieldProblem{fp}
	p.Detail = fp.Message + " (see /openapi.yaml for the request shape)"
	return p
}

// parameter is the declared parameter name of r's operation, or nil.
func (g *gate) parameter(r *http.Request, name string) *openapi3.Parameter {
	route, _, err := g.findRoute(r)
	if err != nil {
		return nil
	}
	for _, params := range []openapi3.Parameters{route.Operation.Parameters, route.PathItem.Parameters} {
		for _, ref := range params {
			if ref.Value != nil && strings.EqualFold(ref.Value.Name, name) {
				return ref.Value
			}
		}
	}
	return nil
}
