package e2b_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/providers/e2b"
)

// The e2b block: its defaults (code_interpreter follows the template's name) and the keys it
// refuses.
func TestBlock(t *testing.T) {
	var b e2b.Block
	b.ApplyDefaults()
	no := false
	assert.Equal(t, e2b.Block{
		APIKeyEnv: e2b.DefaultAPIKeyEnv, Template: e2b.DefaultTemplate, Domain: e2b.DefaultDomain,
		Workdir: e2b.DefaultWorkdir, Python: e2b.DefaultPython, CodeInterpreter: &no,
	}, b)
	ci := e2b.Block{Template: "code-interpreter-v1"}
	ci.ApplyDefaults()
	require.NotNil(t, ci.CodeInterpreter)
	assert.True(t, *ci.CodeInterpreter, "a code-interpreter template runs it")
	stateful := providers.Profile{Name: "cloud", Stateful: true}
	assert.Empty(t, ci.Validate(stateful))
	assert.True(t, ci.Options(stateful).(e2b.Options).Config.CodeInterpreter)

	for name, tc := range map[string]struct {
		block e2b.Block
		prof  providers.Profile
		key   string
		words []string
	}{
		"stateful without the code interpreter": {e2b.Block{Template: "base"}, stateful, "stateful", []string{"code-interpreter template", "code_interpreter: true"}},
		"sandbox_url not a URL":                 {e2b.Block{SandboxURL: "sandbox.internal:8080"}, providers.Profile{}, "e2b.sandbox_url", []string{"absolute http or https URL"}},
		"api_url not a URL":                     {e2b.Block{APIURL: "/api"}, providers.Profile{}, "e2b.api_url", []string{"absolute http or https URL"}},
		"api_key_env not a variable name":       {e2b.Block{APIKeyEnv: "e2b_abc-123"}, providers.Profile{}, "e2b.api_key_env", []string{"name of an environment variable"}},
		"relative workdir":                      {e2b.Block{Workdir: "work"}, providers.Profile{}, "e2b.workdir", []string{"absolute folder"}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.block.ApplyDefaults()
			var found bool
			for _, p := range tc.block.Validate(tc.prof) {
				if p.Key == tc.key {
					found = true
					for _, w := range tc.words {
						assert.Contains(t, p.Msg, w)
					}
				}
			}
			require.True(t, found, "no problem for %s", tc.key)
		})
	}
}
