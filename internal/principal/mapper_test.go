package principal_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/principal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const testIssuer = "https://idp.example"

// jsonClaims decodes a JSON object the way verified token claims arrive (float64 numbers,
// []any lists).
func jsonClaims(t *testing.T, s string) map[string]any {
	t.Helper()
	var c map[string]any
	require.NoError(t, json.Unmarshal([]byte(s), &c))
	return c
}

const aliceClaims = `{
	"iss": "https://idp.example", "sub": "u-1", "aud": "sandgate",
	"preferred_username": "alice", "email": "alice@example.test", "email_verified": true,
	"groups": ["dev", "ops"], "department": "eng", "uid": 1001
}`

func TestMapperMap(t *testing.T) {
	t.Parallel()

	expr := func(e string) config.ClaimOrExpression { return config.ClaimOrExpression{Expression: e} }
	tests := []struct {
		name        string
		issuer      config.Issuer // URL defaults to testIssuer
		adminGroups []string
		claims      string // JSON; aliceClaims when empty
		want        principal.Principal
		// wantErr: fragments of the error (which always wraps ErrRejected).
		wantErr []string
	}{
		{
			name: "Defaults",
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Email: "alice@example.test", Groups: []string{"dev", "ops"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name:   "DefaultsWithoutOptionalClaims",
			claims: `{"sub": "u-2"}`,
			want: principal.Principal{
				Subject: "u-2", Username: "u-2", Groups: []string{},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name:   "NullClaimsAreAbsent",
			claims: `{"sub": "u-2", "groups": null, "email": null}`,
			want: principal.Principal{
				Subject: "u-2", Username: "u-2", Groups: []string{},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name: "ClaimNamesAndPrefixes",
			issuer: config.Issuer{ClaimMappings: config.ClaimMappings{
				Username: config.ClaimOrExpression{Claim: "email", Prefix: "oidc:"},
				Groups:   config.ClaimOrExpression{Claim: "groups", Prefix: "idp:"},
				Email:    config.ClaimOrExpression{Claim: "preferred_username"},
				Credentials: config.CredentialMappings{
					KubernetesUser:   config.ClaimOrExpression{Claim: "preferred_username", Prefix: "k8s:"},
					KubernetesGroups: config.ClaimOrExpression{Claim: "department", Prefix: "team-"},
					AWSRoleARN:       config.ClaimOrExpression{Claim: "no_such_claim", Prefix: "arn:"},
					RunAs:            config.ClaimOrExpression{Claim: "preferred_username"},
				},
			}},
			want: principal.Principal{
				Subject: "u-1", Username: "oidc:alice@example.test", Email: "alice", Groups: []string{"idp:dev", "idp:ops"},
				Credentials: principal.Credentials{KubernetesUser: "k8s:alice", KubernetesGroups: []string{"team-eng"}, RunAs: "alice"},
			},
		},
		{
			name:   "GroupsAsSeparatedString",
			claims: `{"sub": "u-1", "groups": "dev, ops qa,,"}`,
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Groups: []string{"dev", "ops", "qa"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name:   "EmptyGroupEntriesDropped",
			claims: `{"sub": "u-1", "groups": ["dev", "", "ops"]}`,
			issuer: config.Issuer{ClaimMappings: config.ClaimMappings{Groups: config.ClaimOrExpression{Prefix: "p:"}}},
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Groups: []string{"p:dev", "p:ops"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name: "EmptyStringIsNotPrefixed",
			issuer: config.Issuer{ClaimMappings: config.ClaimMappings{
				Email: config.ClaimOrExpression{Claim: "email", Prefix: "mailto:"},
			}},
			claims: `{"sub": "u-1", "email": ""}`,
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Groups: []string{},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name: "CELExpressions",
			issuer: config.Issuer{ClaimMappings: config.ClaimMappings{
				Username: expr(`claims.preferred_username + "@" + claims.department`),
				Groups:   expr(`claims.groups.filter(g, g != "ops")`),
				Credentials: config.CredentialMappings{
					KubernetesUser:   expr(`"oidc:" + claims.sub`),
					KubernetesGroups: expr(`["system:authenticated"] + claims.groups.map(g, "oidc:" + g)`),
					AWSRoleARN:       expr(`has(claims.aws_role) ? claims.aws_role : null`),
					RunAs:            expr(`claims.email_verified ? claims.preferred_username : "nobody"`),
				},
			}},
			want: principal.Principal{
				Subject: "u-1", Username: "alice@eng", Email: "alice@example.test", Groups: []string{"dev"},
				Credentials: principal.Credentials{
					KubernetesUser:   "oidc:u-1",
					KubernetesGroups: []string{"system:authenticated", "oidc:dev", "oidc:ops"},
					RunAs:            "alice",
				},
			},
		},
		{
			name: "CELResultsArePrefixed",
			issuer: config.Issuer{ClaimMappings: config.ClaimMappings{
				Groups:      config.ClaimOrExpression{Expression: `["a", "b"]`, Prefix: "x:"},
				Credentials: config.CredentialMappings{RunAs: config.ClaimOrExpression{Expression: `"svc"`, Prefix: "u-"}},
			}},
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Email: "alice@example.test", Groups: []string{"x:a", "x:b"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}, RunAs: "u-svc"},
			},
		},
		{
			name: "CELNullLeavesFieldEmpty",
			issuer: config.Issuer{ClaimMappings: config.ClaimMappings{
				Groups: expr(`null`),
				Email:  expr(`null`),
			}},
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Groups: []string{},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			name:    "CELWrongResultType",
			issuer:  config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{RunAs: expr(`claims.uid`)}}},
			wantErr: []string{"run_as", "unsupported result type"},
		},
		{
			name:    "CELListOfNonStrings",
			issuer:  config.Issuer{ClaimMappings: config.ClaimMappings{Groups: expr(`[1, 2]`)}},
			wantErr: []string{"groups", "expected a list of strings"},
		},
		{
			name:    "CELBoolWhereStringExpected",
			issuer:  config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{KubernetesUser: expr(`claims.email_verified`)}}},
			wantErr: []string{"kubernetes_user", "expected a string, got bool"},
		},
		{
			name:    "CELRuntimeError",
			issuer:  config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{AWSRoleARN: expr(`claims.aws_role`)}}},
			wantErr: []string{"aws_role_arn", "no such key: aws_role"},
		},
		{
			name:    "MissingSub",
			claims:  `{"preferred_username": "alice"}`,
			wantErr: []string{"the token has no 'sub' claim"},
		},
		{
			name:    "SubNotAString",
			claims:  `{"sub": 42}`,
			wantErr: []string{"the token has no 'sub' claim"},
		},
		{
			name:    "EmptyUsername",
			issuer:  config.Issuer{ClaimMappings: config.ClaimMappings{Username: config.ClaimOrExpression{Claim: "preferred_username", Prefix: "oidc:"}}},
			claims:  `{"sub": "u-1"}`,
			wantErr: []string{"the username mapping yielded an empty username"},
		},
		{
			name:    "UsernameNotAString",
			issuer:  config.Issuer{ClaimMappings: config.ClaimMappings{Username: config.ClaimOrExpression{Claim: "uid"}}},
			wantErr: []string{"username: expected a string, got float64"},
		},
		{
			name:    "GroupsListWithNonString",
			claims:  `{"sub": "u-1", "groups": ["dev", 7]}`,
			wantErr: []string{"groups: expected strings, got float64"},
		},
		{
			name:    "GroupsNotAList",
			claims:  `{"sub": "u-1", "groups": {"dev": true}}`,
			wantErr: []string{"groups: expected a string or list of strings, got map[string]interface {}"},
		},
		{
			name:    "EmailNotAString",
			claims:  `{"sub": "u-1", "email": ["a@b"]}`,
			wantErr: []string{"email: expected a string"},
		},
		{
			name:        "AdminGroupMember",
			adminGroups: []string{"root", "ops"},
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Email: "alice@example.test", Groups: []string{"dev", "ops"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}}, Admin: true,
			},
		},
		{
			name:        "NotAnAdmin",
			adminGroups: []string{"root"},
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Email: "alice@example.test", Groups: []string{"dev", "ops"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
		{
			// admin_groups and group_roles match the mapped (prefixed) group names.
			name:        "AdminGroupsMatchMappedGroups",
			issuer:      config.Issuer{ClaimMappings: config.ClaimMappings{Groups: config.ClaimOrExpression{Prefix: "idp:"}}},
			adminGroups: []string{"ops"},
			want: principal.Principal{
				Subject: "u-1", Username: "u-1", Email: "alice@example.test", Groups: []string{"idp:dev", "idp:ops"},
				Credentials: principal.Credentials{KubernetesGroups: []string{}},
			},
		},
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			iss := tt.issuer
			if iss.URL == "" {
				iss.URL = testIssuer
			}
			m, err := principal.NewMapper(iss, tt.adminGroups)
			require.NoError(t, err)
			raw := tt.claims
			if raw == "" {
				raw = aliceClaims
			}

			p, err := m.Map(jsonClaims(t, raw))
			if len(tt.wantErr) > 0 {
				require.ErrorIs(t, err, principal.ErrRejected)
				for _, w := range tt.wantErr {
					require.Contains(t, err.Error(), w)
				}
				require.Empty(t, p)
				return
			}
			require.NoError(t, err)
			tt.want.Issuer = testIssuer
			require.Equal(t, tt.want, p)
		})
	}
}

func TestMapperValidationRules(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		rules   []config.ClaimValidationRule
		claims  string
		wantErr string // "" = accepted
	}{
		{
			name:  "AllTrue",
			rules: []config.ClaimValidationRule{{Expression: "claims.email_verified == true"}, {Expression: `"ops" in claims.groups`}},
		},
		{
			name:    "EmailNotVerified",
			rules:   []config.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "verify your e-mail address first"}},
			claims:  `{"sub": "u-1", "email_verified": false}`,
			wantErr: "claims rejected: verify your e-mail address first",
		},
		{
			name:    "DefaultMessageNamesTheExpression",
			rules:   []config.ClaimValidationRule{{Expression: `claims.department == "finance"`}},
			wantErr: `claim validation rule "claims.department == \"finance\"" failed`,
		},
		{
			name: "FirstFailingRuleReported",
			rules: []config.ClaimValidationRule{
				{Expression: "true", Message: "never"},
				{Expression: `claims.department == "finance"`, Message: "finance only"},
				{Expression: "false", Message: "not reached"},
			},
			wantErr: "finance only",
		},
		{
			name:    "NonBoolResultRejects",
			rules:   []config.ClaimValidationRule{{Expression: "claims.department", Message: "must be a bool"}},
			wantErr: "must be a bool",
		},
		{
			name:    "EvaluationErrorRejectsWithCause",
			rules:   []config.ClaimValidationRule{{Expression: "claims.email_verified == true", Message: "verify your e-mail address first"}},
			claims:  `{"sub": "u-1"}`,
			wantErr: "verify your e-mail address first (no such key: email_verified)",
		},
		{
			name:    "RulesRunBeforeMappings",
			rules:   []config.ClaimValidationRule{{Expression: "false", Message: "rule first"}},
			claims:  `{"sub": "u-1", "groups": 5}`,
			wantErr: "rule first",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := principal.NewMapper(config.Issuer{URL: testIssuer, ClaimValidationRules: tt.rules}, nil)
			require.NoError(t, err)
			raw := tt.claims
			if raw == "" {
				raw = aliceClaims
			}
			p, err := m.Map(jsonClaims(t, raw))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, "u-1", p.Subject)
				return
			}
			require.ErrorIs(t, err, principal.ErrRejected)
			require.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

func TestMapperGroupRoles(t *testing.T) {
	t.Parallel()

	roles := []config.GroupRole{
		{Group: "finance", KubernetesUser: "fin", AWSRoleARN: "arn:finance", RunAs: "fin"},
		{Group: "ops", AWSRoleARN: "arn:ops"},
		{Group: "dev", KubernetesUser: "developer", KubernetesGroups: []string{"devs"}, AWSRoleARN: "arn:dev", RunAs: "dev"},
		{Group: "dev", RunAs: "dev-second-row"},
	}
	tests := []struct {
		name     string
		groups   string
		mappings config.CredentialMappings
		want     principal.Credentials
	}{
		{
			name:   "FirstMatchingRowWinsPerField",
			groups: `["dev", "ops"]`, // table order decides, not the token's group order
			want:   principal.Credentials{KubernetesUser: "developer", KubernetesGroups: []string{"devs"}, AWSRoleARN: "arn:ops", RunAs: "dev"},
		},
		{
			name:   "SingleGroup",
			groups: `["dev"]`,
			want:   principal.Credentials{KubernetesUser: "developer", KubernetesGroups: []string{"devs"}, AWSRoleARN: "arn:dev", RunAs: "dev"},
		},
		{
			name:   "PartialRowLeavesOthersEmpty",
			groups: `["ops"]`,
			want:   principal.Credentials{KubernetesGroups: []string{}, AWSRoleARN: "arn:ops"},
		},
		{
			name:   "NoMatchingGroup",
			groups: `["qa"]`,
			want:   principal.Credentials{KubernetesGroups: []string{}},
		},
		{
			name:   "MappingsBeatTheTable",
			groups: `["finance", "dev"]`,
			mappings: config.CredentialMappings{
				KubernetesUser:   config.ClaimOrExpression{Expression: `"cel:" + claims.sub`},
				KubernetesGroups: config.ClaimOrExpression{Expression: `["cel"]`},
			},
			want: principal.Credentials{KubernetesUser: "cel:u-1", KubernetesGroups: []string{"cel"}, AWSRoleARN: "arn:finance", RunAs: "fin"},
		},
		{
			name:     "MappingYieldingNothingFallsBackToTable",
			groups:   `["ops"]`,
			mappings: config.CredentialMappings{AWSRoleARN: config.ClaimOrExpression{Expression: `has(claims.role) ? claims.role : null`}},
			want:     principal.Credentials{KubernetesGroups: []string{}, AWSRoleARN: "arn:ops"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := principal.NewMapper(config.Issuer{
				URL:           testIssuer,
				GroupRoles:    roles,
				ClaimMappings: config.ClaimMappings{Credentials: tt.mappings},
			}, nil)
			require.NoError(t, err)
			p, err := m.Map(jsonClaims(t, `{"sub": "u-1", "groups": `+tt.groups+`}`))
			require.NoError(t, err)
			require.Equal(t, tt.want, p.Credentials)
		})
	}
}

func TestMapperGroupRolesDoNotAlias(t *testing.T) {
	t.Parallel()

	roles := []config.GroupRole{{Group: "dev", KubernetesGroups: []string{"devs"}}}
	m, err := principal.NewMapper(config.Issuer{URL: testIssuer, GroupRoles: roles}, nil)
	require.NoError(t, err)
	p, err := m.Map(jsonClaims(t, `{"sub": "u-1", "groups": ["dev"]}`))
	require.NoError(t, err)
	p.Credentials.KubernetesGroups[0] = "mutated"

	p2, err := m.Map(jsonClaims(t, `{"sub": "u-2", "groups": ["dev"]}`))
	require.NoError(t, err)
	require.Equal(t, []string{"devs"}, p2.Credentials.KubernetesGroups, "a principal must not share the configured slice")
	require.Equal(t, []string{"devs"}, roles[0].KubernetesGroups)
}

func TestNewMapperCompileErrors(t *testing.T) {
	t.Parallel()

	bad := config.ClaimOrExpression{Expression: "claims.("}
	tests := []struct {
		name    string
		issuer  config.Issuer
		wantKey string
	}{
		{"Username", config.Issuer{ClaimMappings: config.ClaimMappings{Username: bad}}, "claim_mappings.username.expression"},
		{"Groups", config.Issuer{ClaimMappings: config.ClaimMappings{Groups: bad}}, "claim_mappings.groups.expression"},
		{"Email", config.Issuer{ClaimMappings: config.ClaimMappings{Email: bad}}, "claim_mappings.email.expression"},
		{"KubernetesUser", config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{KubernetesUser: bad}}}, "claim_mappings.credentials.kubernetes_user.expression"},
		{"KubernetesGroups", config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{KubernetesGroups: bad}}}, "claim_mappings.credentials.kubernetes_groups.expression"},
		{"AWSRoleARN", config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{AWSRoleARN: bad}}}, "claim_mappings.credentials.aws_role_arn.expression"},
		{"RunAs", config.Issuer{ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{RunAs: bad}}}, "claim_mappings.credentials.run_as.expression"},
		{
			"ValidationRuleIndex",
			config.Issuer{ClaimValidationRules: []config.ClaimValidationRule{{Expression: "true"}, {Expression: "claims.x +"}}},
			"claim_validation_rules[1].expression",
		},
		{"UndeclaredVariable", config.Issuer{ClaimMappings: config.ClaimMappings{Username: config.ClaimOrExpression{Expression: "token.sub"}}}, "claim_mappings.username.expression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			iss := tt.issuer
			iss.URL = testIssuer
			m, err := principal.NewMapper(iss, nil)
			require.Error(t, err)
			require.Nil(t, m)
			require.Contains(t, err.Error(), "auth.issuers["+testIssuer+"]."+tt.wantKey)
			require.NotErrorIs(t, err, principal.ErrRejected, "a compile error is a configuration error")
		})
	}
}

func TestMapperConcurrentUse(t *testing.T) {
	t.Parallel()

	m, err := principal.NewMapper(config.Issuer{
		URL: testIssuer,
		ClaimMappings: config.ClaimMappings{Credentials: config.CredentialMappings{
			KubernetesUser: config.ClaimOrExpression{Expression: `"oidc:" + claims.sub`},
		}},
		ClaimValidationRules: []config.ClaimValidationRule{{Expression: "claims.email_verified"}},
	}, nil)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for i := range cap(errs) {
		wg.Go(func() {
			sub := strings.Repeat("x", i+1)
			p, err := m.Map(map[string]any{"sub": sub, "email_verified": true})
			if err == nil && p.Credentials.KubernetesUser != "oidc:"+sub {
				err = fmt.Errorf("subject %q mapped to %q", sub, p.Credentials.KubernetesUser)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
