package sandbox_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// chunked is a program that writes each piece after the test releases it on next.
func chunked(next <-chan string, done chan<- struct{}) sandboxtest.Program {
	return func(ctx context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		defer close(done)
		for {
			select {
			case piece, ok := <-next:
				if !ok {
					return providers.ExitStatus{ExitCode: 0}, nil
				}
				w := r.Stdout
				if rest, isErr := strings.CutPrefix(piece, "err:"); isErr {
					w, piece = r.Stderr, rest
				}
				_, _ = io.WriteString(w, piece)
			case <-ctx.Done():
				return providers.ExitStatus{}, ctx.Err()
			}
		}
	}
}

func TestFollowStreamsOutputAsItIsProduced(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	next, done := make(chan string), make(chan struct{})
	b.Provider(t, "default").Next(chunked(next, done))
	task := b.submit(t, b.alice, sandbox.ExecInput{Code: "talk", Wait: wait(0)})

	f, err := b.Service.Follow(b.ctx, b.alice, task.ID, sandbox.Position{})
	require.NoError(t, err)
	read := func() sandbox.Batch {
		t.Helper()
		for {
			batch, err := f.Next(b.ctx, 5*time.Second)
			require.NoError(t, err)
			if len(batch.Events) > 0 || batch.Done {
				return batch
			}
		}
	}
	next <- "one\n"
	got := read()
	require.Len(t, got.Events, 1)
	assert.Equal(t, sandbox.OutputEvent{Seq: 1, Stream: sandbox.StreamStdout, Offset: 0, Data: []byte("one\n")}, got.Events[0])
	next <- "err:oops\n"
	next <- "two\n"
	// "é" cut between two writes arrives whole, in one event.
	next <- "\xc3"
	next <- "\xa9\n"
	close(next)
	<-done
	var evs []sandbox.OutputEvent
	var end sandbox.Batch
	for end = read(); !end.Done; end = read() {
		evs = append(evs, end.Events...)
	}
	require.Len(t, evs, 3)
	assert.Equal(t, sandbox.OutputEvent{Seq: 2, Stream: sandbox.StreamStderr, Offset: 0, Data: []byte("oops\n")}, evs[0])
	assert.Equal(t, sandbox.OutputEvent{Seq: 3, Stream: sandbox.StreamStdout, Offset: 4, Data: []byte("two\n")}, evs[1])
	assert.Equal(t, sandbox.OutputEvent{Seq: 4, Stream: sandbox.StreamStdout, Offset: 8, Data: []byte("é\n")}, evs[2])
	require.NoError(t, end.Err)
	require.NotNil(t, end.Result)
	assert.Equal(t, "one\ntwo\né\n", end.Result.Stdout, "the result holds the whole output")
	assert.Empty(t, end.Gaps)
	assert.Equal(t, sandbox.Position{Stdout: 11, Stderr: 5}, end.Position)

	// A follower resuming after the second event (4 bytes of stdout, 5 of stderr) gets the
	// rest again, then the end.
	again, err := b.Service.Follow(b.ctx, b.alice, task.ID, sandbox.Position{Stdout: 4, Stderr: 5})
	require.NoError(t, err)
	batch, err := again.Next(b.ctx, time.Second)
	require.NoError(t, err)
	require.Len(t, batch.Events, 2)
	assert.Equal(t, int64(3), batch.Events[0].Seq)

	// Another principal cannot follow it.
	_, err = b.Service.Follow(b.ctx, b.bob, task.ID, sandbox.Position{})
	requireKind(t, err, fault.NotFound)
}

func TestFollowKeepsHeadAndTailAndSaysWhatItDropped(t *testing.T) {
	t.Parallel()
	// 10 bytes of each stream's start, 10 of its end.
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: 20}})
	next, done := make(chan string), make(chan struct{})
	b.Provider(t, "default").Next(chunked(next, done))
	task := b.submit(t, b.alice, sandbox.ExecInput{Code: "flood", Wait: wait(0)})
	for _, p := range []string{"aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee", "fffff"} {
		next <- p
	}
	close(next)
	<-done
	f, err := b.Service.Follow(b.ctx, b.alice, task.ID, sandbox.Position{})
	require.NoError(t, err)
	first, err := f.Next(b.ctx, time.Second)
	require.NoError(t, err)
	var data []string
	for _, ev := range first.Events {
		data = append(data, string(ev.Data))
	}
	assert.Equal(t, []string{"aaaaa", "bbbbb", "eeeee", "fffff"}, data, "the start and the end are kept")
	assert.Equal(t, int64(20), first.Events[2].Offset, "offsets count the dropped middle")
	assert.Equal(t, []sandbox.Gap{{Stream: sandbox.StreamStdout, From: 10, To: 20}}, first.Gaps, "the dropped middle is a gap")

	// A follower resuming within the start (at byte 7) gets the rest of that piece, the gap
	// and the end; one resuming past the end gets nothing more but the end.
	late, err := b.Service.Follow(b.ctx, b.alice, task.ID, sandbox.Position{Stdout: 7})
	require.NoError(t, err)
	batch, err := late.Next(b.ctx, time.Second)
	require.NoError(t, err)
	data = nil
	for _, ev := range batch.Events {
		data = append(data, string(ev.Data))
	}
	assert.Equal(t, []string{"bbb", "eeeee", "fffff"}, data)
	assert.Equal(t, int64(7), batch.Events[0].Offset)
	assert.Equal(t, []sandbox.Gap{{Stream: sandbox.StreamStdout, From: 10, To: 20}}, batch.Gaps)
	assert.Equal(t, sandbox.Position{Stdout: 30}, batch.Position)
	// The end comes once the completion is recorded: wait for it (Next returns at once then).
	done2, err := late.Next(b.ctx, time.Minute)
	require.NoError(t, err)
	assert.True(t, done2.Done)
	caughtUp, err := b.Service.Follow(b.ctx, b.alice, task.ID, sandbox.Position{Stdout: 30})
	require.NoError(t, err)
	end, err := caughtUp.Next(b.ctx, time.Second)
	require.NoError(t, err)
	assert.True(t, end.Done)
	assert.Empty(t, end.Events)
}

func TestFollowNothingToFollow(t *testing.T) {
	t.Parallel()
	b := setup(t, sandboxtest.Options{})
	_, err := b.Service.Follow(b.ctx, b.alice, "no-such-task", sandbox.Position{})
	requireKind(t, err, fault.NotFound)
}
