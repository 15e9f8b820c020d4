package sandbox_test

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// execute runs in in alice's default session and requires it to finish within its wait.
func (b *bundle) execute(t *testing.T, in sandbox.ExecInput) *sandbox.Result {
	t.Helper()
	out, err := b.Service.Execute(b.ctx, b.alice, in)
	return result(t, out, err)
}

// richResult is a result whose text/plain is text (a JSON string of it).
func richResult(text string, main bool) providers.RichResult {
	data, _ := json.Marshal(text)
	return providers.RichResult{Data: map[string]json.RawMessage{"text/plain": data}, Main: main}
}

// displaying is a program that gives each result (also as it produces it), printing the text
// "printed" between the first and the others; it releases the others once next is closed
// (nil: at once).
func displaying(next <-chan struct{}, results ...providers.RichResult) sandboxtest.Program {
	return func(ctx context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		for i, res := range results {
			if i == 1 {
				_, _ = io.WriteString(r.Stdout, "printed\n")
				if next != nil {
					select {
					case <-next:
					case <-ctx.Done():
						return providers.ExitStatus{}, ctx.Err()
					}
				}
			}
			if r.Spec.ResultFunc != nil {
				r.Spec.ResultFunc(res)
			}
		}
		return providers.ExitStatus{Results: results}, nil
	}
}

func TestRichResultsReachTheResult(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: 1000}})
	var spec providers.ExecSpec
	b.Provider(t, "default").Next(func(ctx context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		spec = r.Spec
		return displaying(nil, richResult("a chart", false), richResult("42", true))(ctx, r)
	})
	res := b.execute(t, sandbox.ExecInput{Code: "6 * 7"})
	require.Len(t, res.Results, 2)
	assert.Equal(t, richResult("a chart", false), res.Results[0])
	assert.Equal(t, richResult("42", true), res.Results[1])
	assert.Equal(t, int64(1000), spec.MaxResultBytes, "the provider is asked for the output limit")

	// The stored task has them too.
	task, err := b.Service.GetTask(b.ctx, b.alice, res.TaskID)
	require.NoError(t, err)
	require.NotNil(t, task.Result)
	assert.Equal(t, res.Results, task.Result.Results)

}

// TestRichResultsWithinTheOutputLimit: whatever a provider reports, the results together
// stay within max_output_bytes; one that does not fit is dropped whole and named, and the
// smaller ones after it still fit.
func TestRichResultsWithinTheOutputLimit(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: 100}})
	big := richResult(strings.Repeat("x", 200), false)
	big.Data["text/html"] = json.RawMessage(`"<p>big</p>"`)
	b.Provider(t, "default").Next(displaying(nil, richResult("first", false), big, richResult("42", true)))
	res := b.execute(t, sandbox.ExecInput{Code: "charts"})
	require.Len(t, res.Results, 3)
	assert.Equal(t, richResult("first", false), res.Results[0])
	assert.Equal(t, providers.RichResult{Dropped: &providers.DroppedResult{Types: []string{"text/html", "text/plain"}, Bytes: 202 + 12}}, res.Results[1])
	assert.Equal(t, richResult("42", true), res.Results[2])
}

// TestFollowStreamsRichResults: followers get each rich result as an event in order with the
// output, once, and a follower resuming after one does not get it again.
func TestFollowStreamsRichResults(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	next := make(chan struct{})
	b.Provider(t, "default").Next(displaying(next, richResult("one", false), richResult("two", false), richResult("42", true)))
	task := b.submit(t, b.alice, sandbox.ExecInput{Code: "show", Wait: wait(0)})

	follow := func(from sandbox.Position) ([]sandbox.OutputEvent, sandbox.Batch) {
		f, err := b.Service.Follow(b.ctx, b.alice, task.ID, from)
		require.NoError(t, err)
		defer f.Close()
		var evs []sandbox.OutputEvent
		for {
			batch, err := f.Next(b.ctx, 5*time.Second)
			require.NoError(t, err)
			evs = append(evs, batch.Events...)
			if batch.Done {
				return evs, batch
			}
			if len(evs) == 2 && next != nil {
				close(next) // the first result and the output after it arrived while it runs
				next = nil
			}
		}
	}
	evs, end := follow(sandbox.Position{})
	require.Len(t, evs, 4, "%+v", evs)
	assert.Equal(t, sandbox.StreamResult, evs[0].Stream)
	assert.Equal(t, sandbox.StreamStdout, evs[1].Stream)
	var got []providers.RichResult
	var offset int64
	for _, ev := range []sandbox.OutputEvent{evs[0], evs[2], evs[3]} {
		assert.Equal(t, sandbox.StreamResult, ev.Stream)
		assert.Equal(t, offset, ev.Offset, "offsets count the results' JSON")
		offset += int64(len(ev.Data))
		var r providers.RichResult
		require.NoError(t, json.Unmarshal(ev.Data, &r))
		got = append(got, r)
	}
	require.NoError(t, end.Err)
	assert.Equal(t, end.Result.Results, got)
	assert.Equal(t, offset, end.Position.Results)

	// Resumed after the first result and the output, it gets the other two only.
	evs, _ = follow(sandbox.Position{Stdout: 8, Results: evs[1].Offset + int64(len(evs[0].Data))})
	require.Len(t, evs, 2)
	assert.Equal(t, got[1:], []providers.RichResult{decode(t, evs[0].Data), decode(t, evs[1].Data)})
}

func decode(t *testing.T, data []byte) providers.RichResult {
	t.Helper()
	var r providers.RichResult
	require.NoError(t, json.Unmarshal(data, &r))
	return r
}

// TestRichResultsCountAsRetainedOutput: rich results count against retained_output_bytes and
// go with the rest of a dropped task's output.
func TestRichResultsCountAsRetainedOutput(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{Quotas: sandbox.Quotas{RetainedOutputBytes: 300}}})
	chart := richResult(strings.Repeat("c", 200), false)
	b.Provider(t, "default").Next(displaying(nil, chart))
	first := b.execute(t, sandbox.ExecInput{Code: "one"})
	require.Len(t, first.Results, 1)
	b.Provider(t, "default").Next(displaying(nil, chart))
	b.execute(t, sandbox.ExecInput{Code: "two"})
	require.Eventually(t, func() bool {
		task, err := b.Service.GetTask(b.ctx, b.alice, first.TaskID)
		require.NoError(t, err)
		return task.Result != nil && task.Result.OutputDropped
	}, 10*time.Second, 10*time.Millisecond, "the older chart went to keep within the quota")
	task, err := b.Service.GetTask(b.ctx, b.alice, first.TaskID)
	require.NoError(t, err)
	assert.Nil(t, task.Result.Results)
}
