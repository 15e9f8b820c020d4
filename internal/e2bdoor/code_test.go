package e2bdoor_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCodeWithTheOfficialSDK drives the code interpreter through the door with
// @e2b/code-interpreter on docker sandboxes: state kept between runs of the default context,
// output streamed as it comes, the last expression's value, a matplotlib chart and a pandas
// table as rich results, an exception as the execution's error (name, value, traceback; not
// in stderr), stderr, per-run and session environments, contexts of their own — isolated,
// listed, restarted (state gone), removed — a bash context keeping its variables, a context
// made in a folder; an unknown context and an unsupported language refused.
func TestCodeWithTheOfficialSDK(t *testing.T) {
	t.Parallel()
	d := dockerDoor(t, nil)
	_, key := d.key("alice", nil, nil)
	type result struct {
		Text    string
		Main    bool
		Formats []string
		Png     string
		HTML    bool
	}
	var got struct {
		Stateful struct {
			Stdout, Streamed, First string
			Error                   any
		}
		Value struct {
			Text    string
			Results []result
		}
		Chart     []result
		Table     []result
		CodeError struct {
			Stdout, Stderr, Name, Value, Traceback string
		}
		Stderr   string
		Envs     string
		Contexts struct {
			Language, Cwd, Own string
			Isolated           *string
			Listed             bool
			AfterRestart       *string
			ListedAfterRemove  bool
			RemovedRun         attempt[any]
		}
		Bash                     string
		BashFailing              *string
		Placed                   struct{ Cwd, Pwd string }
		UnknownContext, Language attempt[any]
	}
	d.sdk(key, "code", &got)

	assert.Equal(t, "one\n42\n", got.Stateful.Stdout, "a variable set by one run is there in the next")
	assert.Nil(t, got.Stateful.Error)
	assert.Equal(t, got.Stateful.Stdout, got.Stateful.Streamed, "the callback got the output")
	assert.True(t, strings.HasPrefix(got.Stateful.First, "one"), "in order: %q", got.Stateful.First)

	assert.Equal(t, "82", got.Value.Text, "the last expression's value is the main result")
	require.Len(t, got.Value.Results, 1)
	assert.True(t, got.Value.Results[0].Main)

	require.Len(t, got.Chart, 1, "one figure")
	assert.False(t, got.Chart[0].Main, "a figure is a display")
	assert.Contains(t, got.Chart[0].Formats, "png")
	assert.Equal(t, "iVBORw0KGgoA", got.Chart[0].Png, "a PNG, base64")
	require.Len(t, got.Table, 1)
	assert.True(t, got.Table[0].Main)
	assert.Contains(t, got.Table[0].Formats, "html")
	assert.True(t, got.Table[0].HTML)
	assert.Contains(t, got.Table[0].Text, "a  b")

	assert.Equal(t, "before\n", got.CodeError.Stdout)
	assert.Equal(t, "NameError", got.CodeError.Name)
	assert.Equal(t, "name 'undefined_name' is not defined", got.CodeError.Value)
	assert.Contains(t, got.CodeError.Traceback, "NameError")
	assert.NotContains(t, got.CodeError.Stderr, "Traceback", "the traceback is the error's, as Jupyter reports it, not stderr's")
	assert.Equal(t, "warned\n", got.Stderr)
	assert.Equal(t, "per run yes\n", got.Envs)

	assert.Equal(t, "python", got.Contexts.Language)
	assert.Equal(t, "/home/user", got.Contexts.Cwd)
	assert.Equal(t, "own context\n", got.Contexts.Own)
	require.NotNil(t, got.Contexts.Isolated)
	assert.Equal(t, "NameError", *got.Contexts.Isolated, "contexts do not share state")
	assert.True(t, got.Contexts.Listed)
	require.NotNil(t, got.Contexts.AfterRestart)
	assert.Equal(t, "NameError", *got.Contexts.AfterRestart, "a restart clears the state")
	assert.False(t, got.Contexts.ListedAfterRemove)
	require.NotNil(t, got.Contexts.RemovedRun.Thrown)
	assert.Equal(t, "NotFoundError", got.Contexts.RemovedRun.Thrown.Name)
	assert.Equal(t, "42\n", got.Bash, "a bash context keeps its variables")
	require.NotNil(t, got.BashFailing)
	assert.Equal(t, "1", *got.BashFailing, "a failing bash cell: its exit status, as bash_kernel reports it")
	assert.Equal(t, "/home/user/sub", got.Placed.Cwd)
	assert.Equal(t, "/workspace/sub\n", got.Placed.Pwd, "the context works in the folder given")

	require.NotNil(t, got.UnknownContext.Thrown)
	assert.Equal(t, "NotFoundError", got.UnknownContext.Thrown.Name)
	assert.True(t, got.UnknownContext.Thrown.has("Context nope not found"), "%+v", got.UnknownContext.Thrown)
	require.NotNil(t, got.Language.Thrown)
	assert.Equal(t, "SandboxError", got.Language.Thrown.Name, "%+v", got.Language.Thrown)
	assert.True(t, got.Language.Thrown.has("400"), "the code interpreter's SDK shows the status only: %+v", got.Language.Thrown)
}
