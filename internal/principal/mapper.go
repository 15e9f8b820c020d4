package principal

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"

	"github.com/sandgate/sandgate/internal/config"
)

// ErrRejected wraps every claim-mapping or claim-validation failure: the token is verified
// but does not yield an acceptable principal (the HTTP edge answers 401).
var ErrRejected = errors.New("claims rejected")

// Mapper resolves claims into a Principal for one issuer. Build it once with NewMapper; it is
// safe for concurrent use.
type Mapper struct {
	issuer      string
	username    field
	groups      field
	email       field
	kubeUser    field
	kubeGroups  field
	roleARN     field
	runAs       field
	rules       []rule
	groupRoles  []config.GroupRole
	adminGroups []string
}

type field struct {
	claim  string
	prefix string
	prog   cel.Program
	expr   string
}

type rule struct {
	prog    cel.Program
	expr    string
	message string
}

// NewMapper compiles iss's claim mappings and validation rules. adminGroups marks admins.
// Errors name the offending expression (a configuration error, reported at start-up).
func NewMapper(iss config.Issuer, adminGroups []string) (*Mapper, error) {
	env, err := cel.NewEnv(cel.Variable("claims", cel.MapType(cel.StringType, cel.DynType)))
	if err != nil {
		return nil, err
	}
	m := &Mapper{issuer: iss.URL, groupRoles: iss.GroupRoles, adminGroups: adminGroups}
	cm := iss.ClaimMappings
	specs := []struct {
		dst  *field
		src  config.ClaimOrExpression
		name string
		def  string
	}{
		{&m.username, cm.Username, "username", "sub"},
		{&m.groups, cm.Groups, "groups", "groups"},
		{&m.email, cm.Email, "email", "email"},
		{&m.kubeUser, cm.Credentials.KubernetesUser, "credentials.kubernetes_user", ""},
		{&m.kubeGroups, cm.Credentials.KubernetesGroups, "credentials.kubernetes_groups", ""},
		{&m.roleARN, cm.Credentials.AWSRoleARN, "credentials.aws_role_arn", ""},
		{&m.runAs, cm.Credentials.RunAs, "credentials.run_as", ""},
	}
	for _, s := range specs {
		f := field{claim: s.src.Claim, prefix: s.src.Prefix, expr: s.src.Expression}
		if f.expr != "" {
			prg, err := compile(env, f.expr)
			if err != nil {
				return nil, fmt.Errorf("auth.issuers[%s].claim_mappings.%s.expression: %w", iss.URL, s.name, err)
			}
			f.prog = prg
		} else if f.claim == "" {
			f.claim = s.def
		}
		*s.dst = f
	}
	for i, r := range iss.ClaimValidationRules {
		prg, err := compile(env, r.Expression)
		if err != nil {
			return nil, fmt.Errorf("auth.issuers[%s].claim_validation_rules[%d].expression: %w", iss.URL, i, err)
		}
		msg := r.Message
		if msg == "" {
			msg = fmt.Sprintf("claim validation rule %q failed", r.Expression)
		}
		m.rules = append(m.rules, rule{prog: prg, expr: r.Expression, message: msg})
	}
	return m, nil
}

func compile(env *cel.Env, expr string) (cel.Program, error) {
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	return env.Program(ast, cel.CostLimit(100000))
}

// Map resolves verified claims (which must hold "iss" and a non-empty "sub") into a
// Principal. Failures wrap ErrRejected and say which rule or claim failed; so does a value
// that is no printable UTF-8 within its bound (claimtext.go).
func (m *Mapper) Map(claims map[string]any) (Principal, error) {
	sub, _ := claims["sub"].(string)
	if sub == "" {
		return Principal{}, fmt.Errorf("%w: the token has no 'sub' claim", ErrRejected)
	}
	for _, r := range m.rules {
		out, err := eval(r.prog, claims)
		if err != nil {
			return Principal{}, fmt.Errorf("%w: %s (%v)", ErrRejected, r.message, err)
		}
		if b, ok := out.(bool); !ok || !b {
			return Principal{}, fmt.Errorf("%w: %s", ErrRejected, r.message)
		}
	}
	p := Principal{Issuer: m.issuer, Subject: sub}
	var err error
	if p.Username, err = m.username.str(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: username: %v", ErrRejected, err)
	}
	if p.Username == "" {
		return Principal{}, fmt.Errorf("%w: the username mapping yielded an empty username", ErrRejected)
	}
	if p.Groups, err = m.groups.list(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: groups: %v", ErrRejected, err)
	}
	if p.Email, err = m.email.str(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: email: %v", ErrRejected, err)
	}
	c := &p.Credentials
	if c.KubernetesUser, err = m.kubeUser.str(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: kubernetes_user: %v", ErrRejected, err)
	}
	if c.KubernetesGroups, err = m.kubeGroups.list(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: kubernetes_groups: %v", ErrRejected, err)
	}
	if c.AWSRoleARN, err = m.roleARN.str(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: aws_role_arn: %v", ErrRejected, err)
	}
	if c.RunAs, err = m.runAs.str(claims); err != nil {
		return Principal{}, fmt.Errorf("%w: run_as: %v", ErrRejected, err)
	}
	// The group→role table fills what the mappings left empty; first matching row wins.
	for _, gr := range m.groupRoles {
		if !p.InAnyGroup([]string{gr.Group}) {
			continue
		}
		if c.KubernetesUser == "" {
			c.KubernetesUser = gr.KubernetesUser
		}
		if len(c.KubernetesGroups) == 0 && len(gr.KubernetesGroups) > 0 {
			// A copy: the principal must not share (and let callers mutate) the configuration.
			c.KubernetesGroups = slices.Clone(gr.KubernetesGroups)
		}
		if c.AWSRoleARN == "" {
			c.AWSRoleARN = gr.AWSRoleARN
		}
		if c.RunAs == "" {
			c.RunAs = gr.RunAs
		}
	}
	p.Admin = p.InAnyGroup(m.adminGroups)
	if err := checkPrincipalText(p); err != nil {
		return Principal{}, err
	}
	return p, nil
}

func eval(prg cel.Program, claims map[string]any) (any, error) {
	out, _, err := prg.Eval(map[string]any{"claims": claims})
	if err != nil {
		return nil, err
	}
	return native(out)
}

func native(v ref.Val) (any, error) {
	switch v.Type() {
	case types.StringType, types.BoolType:
		return v.Value(), nil
	case types.ListType:
		out, err := v.ConvertToNative(reflect.TypeOf([]string{}))
		if err != nil {
			return nil, fmt.Errorf("expected a list of strings: %w", err)
		}
		return out, nil
	case types.NullType:
		return nil, nil
	}
	return nil, fmt.Errorf("unsupported result type %s", v.Type().TypeName())
}

func (f field) value(claims map[string]any) (any, error) {
	if f.prog != nil {
		return eval(f.prog, claims)
	}
	if f.claim == "" {
		return nil, nil
	}
	return claims[f.claim], nil
}

func (f field) str(claims map[string]any) (string, error) {
	v, err := f.value(claims)
	if err != nil || v == nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("expected a string, got %T", v)
	}
	if s == "" {
		return "", nil
	}
	return f.prefix + s, nil
}

func (f field) list(claims map[string]any) ([]string, error) {
	v, err := f.value(claims)
	if err != nil || v == nil {
		return []string{}, err
	}
	var out []string
	switch t := v.(type) {
	case string: // a single group, or a comma/space separated string
		out = strings.FieldsFunc(t, func(r rune) bool { return r == ',' || r == ' ' })
	case []string:
		out = t
	case []any:
		for _, e := range t {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("expected strings, got %T", e)
			}
			out = append(out, s)
		}
	default:
		return nil, fmt.Errorf("expected a string or list of strings, got %T", v)
	}
	res := make([]string, 0, len(out))
	for _, s := range out {
		if s != "" {
			res = append(res, f.prefix+s)
		}
	}
	return res, nil
}
