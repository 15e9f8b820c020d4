package sandbox_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/sandbox"
	"github.com/sandgate/sandgate/internal/sandbox/sandboxtest"
)

// followAll reads f, which has read up to from, to its end and returns each stream as it got
// it (what it had read and gaps as NULs), the gaps, and the end.
func followAll(t *testing.T, ctx context.Context, f *sandbox.Follower, from sandbox.Position) (out map[string][]byte, gaps []sandbox.Gap, end sandbox.Batch) {
	t.Helper()
	out = map[string][]byte{sandbox.StreamStdout: make([]byte, from.Stdout), sandbox.StreamStderr: make([]byte, from.Stderr)}
	for {
		b, err := f.Next(ctx, 5*time.Second)
		require.NoError(t, err)
		for _, g := range b.Gaps {
			require.Equal(t, int64(len(out[g.Stream])), g.From, "a gap starts where the stream was read to")
			out[g.Stream] = append(out[g.Stream], make([]byte, g.To-g.From)...)
			gaps = append(gaps, g)
		}
		for _, ev := range b.Events {
			require.Equal(t, int64(len(out[ev.Stream])), ev.Offset, "events follow each other")
			out[ev.Stream] = append(out[ev.Stream], ev.Data...)
		}
		if b.Done {
			return out, gaps, b
		}
	}
}

// printing is a program that prints out to stdout and errOut to stderr in pieces of piece
// bytes.
func printing(out, errOut []byte, piece int) sandboxtest.Program {
	return func(_ context.Context, r *sandboxtest.Run) (providers.ExitStatus, error) {
		for _, s := range []struct {
			b []byte
			w func([]byte) (int, error)
		}{{out, r.Stdout.Write}, {errOut, r.Stderr.Write}} {
			for b := s.b; len(b) > 0; {
				n := min(piece, len(b))
				_, _ = s.w(b[:n])
				b = b[n:]
			}
		}
		return providers.ExitStatus{ExitCode: 0}, nil
	}
}

// One principal running execution after execution cannot make the replica keep more of
// their output than sandbox.kept_output_memory_bytes: the oldest finished outputs make
// room, and a follower that comes later replays the task's stored result instead — each
// stream's kept start and end at their offsets, the dropped middle a gap, then the result.
func TestKeptOutputStaysWithinItsCeiling(t *testing.T) {
	t.Parallel()
	const limit = 1000 // per stream: 500 bytes of its start, 500 of its end
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: limit, KeptOutputMemoryBytes: 8 * limit}})
	stdout := []byte(strings.Repeat("0123456789", 150)) // 1500 bytes: the middle 500 dropped
	stderr := []byte("warning\n")
	prov := b.Provider(t, "default")
	var ids []string
	for range 30 {
		prov.Next(printing(stdout, stderr, 100))
		res := b.exec(t, b.alice, sandbox.ExecInput{Code: "print", Wait: wait(time.Minute)})
		ids = append(ids, res.TaskID)
		m := b.Service.KeptOutput()
		require.LessOrEqual(t, m.Held, m.Limit)
	}
	m := b.Service.KeptOutput()
	assert.EqualValues(t, 8*limit, m.Limit)
	assert.LessOrEqual(t, m.Peak, m.Limit, "never more than the ceiling at once")
	assert.Positive(t, m.Dropped, "30 outputs of 1.5 kB do not fit in 8 kB: the oldest were let go")
	assert.Zero(t, m.DroppedRunning, "finished outputs go first")

	// The first task's live log is gone: its stored result is replayed.
	f, err := b.Service.Follow(b.ctx, b.alice, ids[0], sandbox.Position{})
	require.NoError(t, err)
	defer f.Close()
	got, gaps, end := followAll(t, b.ctx, f, sandbox.Position{})
	require.NoError(t, end.Err)
	require.NotNil(t, end.Result)
	assert.Equal(t, []sandbox.Gap{{Stream: sandbox.StreamStdout, From: 500, To: 1000}}, gaps, "the dropped middle, at its offsets")
	assert.Equal(t, stdout[:500], got[sandbox.StreamStdout][:500], "the start at offset 0")
	assert.Equal(t, stdout[1000:], got[sandbox.StreamStdout][1000:], "the end at its offset")
	assert.Equal(t, stderr, got[sandbox.StreamStderr])
	assert.Equal(t, sandbox.Position{Stdout: 1500, Stderr: int64(len(stderr))}, end.Position)
	assert.True(t, end.Result.StdoutTruncated)
	assert.Equal(t, string(stdout[:500])+string(stdout[1000:]), end.Result.Stdout, "and the result as stored")

	// A follower resuming in the kept end gets the rest of it.
	late, err := b.Service.Follow(b.ctx, b.alice, ids[0], sandbox.Position{Stdout: 1200, Stderr: int64(len(stderr))})
	require.NoError(t, err)
	defer late.Close()
	got, gaps, _ = followAll(t, b.ctx, late, sandbox.Position{Stdout: 1200, Stderr: int64(len(stderr))})
	assert.Empty(t, gaps)
	assert.Equal(t, stdout[1200:], got[sandbox.StreamStdout][1200:])
	assert.Len(t, got[sandbox.StreamStdout], 1500)
}

// A follower of a stored result gets every kept byte where it was: binary output (stored as
// base64) decoded at any offset, and text in pieces that never split a character.
func TestStoredResultReplaysEveryKeptByte(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: limit, KeptOutputMemoryBytes: 2 * limit}})
	bin := make([]byte, limit+12345) // not UTF-8: base64; the middle 12345 bytes dropped
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	text := []byte(strings.Repeat("é€", 70000)) // 350,000 bytes of 2- and 3-byte characters
	prov := b.Provider(t, "default")
	prov.Next(printing(bin, nil, 4096), printing(text, nil, 4096))
	binRes := b.exec(t, b.alice, sandbox.ExecInput{Code: "bin"})
	textRes := b.exec(t, b.alice, sandbox.ExecInput{Code: "text"})
	require.Equal(t, "base64", binRes.Encoding)
	require.Equal(t, "utf-8", textRes.Encoding)
	// A third output needs the room: the first two are let go.
	prov.Next(printing(bytes.Repeat([]byte("x"), 2*limit), nil, 4096))
	b.exec(t, b.alice, sandbox.ExecInput{Code: "more"})
	require.Positive(t, b.Service.KeptOutput().Dropped)

	f, err := b.Service.Follow(b.ctx, b.alice, binRes.TaskID, sandbox.Position{})
	require.NoError(t, err)
	got, gaps, end := followAll(t, b.ctx, f, sandbox.Position{})
	f.Close()
	require.True(t, end.Done)
	half := int64(limit / 2)
	assert.Equal(t, []sandbox.Gap{{Stream: sandbox.StreamStdout, From: half, To: int64(len(bin)) - half}}, gaps)
	assert.True(t, bytes.Equal(bin[:half], got[sandbox.StreamStdout][:half]), "the start")
	assert.True(t, bytes.Equal(bin[len(bin)-int(half):], got[sandbox.StreamStdout][int64(len(bin))-half:]), "the end")

	f, err = b.Service.Follow(b.ctx, b.alice, textRes.TaskID, sandbox.Position{})
	require.NoError(t, err)
	defer f.Close()
	var pieces int
	var all []byte
	for {
		batch, err := f.Next(b.ctx, 5*time.Second)
		require.NoError(t, err)
		require.Empty(t, batch.Gaps)
		for _, ev := range batch.Events {
			require.Equal(t, int64(len(all)), ev.Offset)
			require.True(t, strings.HasPrefix(string(ev.Data), "é") || strings.HasPrefix(string(ev.Data), "€"), "an event starts with a whole character")
			all = append(all, ev.Data...)
			pieces++
		}
		if batch.Done {
			break
		}
	}
	assert.Equal(t, text, all)
	assert.Greater(t, pieces, 1, "in more than one piece")
}

// 90 followers of one finished task share what is kept of it: one log, and one result
// (read from the store once) while they read it — the budget counts the same with 90 as
// with one, their reads allocate a small part of one copy of the output each, and the
// result is let go when the last leaves.
func TestFollowersShareOneKeptOutput(t *testing.T) {
	// Not parallel: it counts the process's allocations while its followers read.
	const size = 1 << 20
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: 2 * size}})
	out := bytes.Repeat([]byte("0123456789abcdef\n"), size/17+1)[:size]
	b.Provider(t, "default").Next(printing(out, nil, 32<<10))
	res := b.exec(t, b.alice, sandbox.ExecInput{Code: "print"})
	logOnly := b.Service.KeptOutput().Held
	require.Greater(t, logOnly, int64(size), "the finished live log is kept")

	follow := func() (*sandbox.Follower, sandbox.Batch) {
		f, err := b.Service.Follow(b.ctx, b.alice, res.TaskID, sandbox.Position{})
		require.NoError(t, err)
		var n int
		for {
			batch, err := f.Next(b.ctx, 5*time.Second)
			require.NoError(t, err)
			for _, ev := range batch.Events {
				n += len(ev.Data)
			}
			if batch.Done {
				require.Equal(t, size, n)
				return f, batch
			}
		}
	}
	first, firstEnd := follow()
	withOne := b.Service.KeptOutput().Held
	assert.Greater(t, withOne-logOnly, int64(size), "the result its followers end with is kept once")

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var (
		mu   sync.Mutex
		fs   []*sandbox.Follower
		ends []sandbox.Batch
		wg   sync.WaitGroup
	)
	for range 89 {
		wg.Go(func() {
			f, end := follow()
			mu.Lock()
			fs, ends = append(fs, f), append(ends, end)
			mu.Unlock()
		})
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	assert.Equal(t, withOne, b.Service.KeptOutput().Held, "90 followers hold what one does")
	// A copy each would be 89 MiB (twice that with the result); what they allocate is the
	// events' headers and their own state.
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(16<<20), "followers do not copy the output")
	for _, end := range ends {
		require.Same(t, firstEnd.Result, end.Result, "one result for all")
	}

	first.Close()
	for _, f := range fs {
		f.Close()
	}
	assert.Equal(t, logOnly, b.Service.KeptOutput().Held, "the result is let go with the last follower: it is in the store")
}

// When running executions alone fill the budget, the oldest running one's live output is let
// go: its followers see nothing more until it ends, then the rest from its stored result,
// which says why.
func TestRunningOutputLetGoWhenTheBudgetIsFull(t *testing.T) {
	t.Parallel()
	const limit = 2000
	b := setup(t, sandboxtest.Options{Settings: sandbox.Settings{MaxOutputBytes: limit, KeptOutputMemoryBytes: 2 * limit}})
	type run struct {
		next chan string
		done chan struct{}
		task *sandbox.Task
		f    *sandbox.Follower
	}
	prov := b.Provider(t, "default")
	var runs []run
	for i := range 3 {
		r := run{next: make(chan string), done: make(chan struct{})}
		code := fmt.Sprintf("talk %d", i)
		prov.Handle(code, chunked(r.next, r.done))
		sess, err := b.Service.CreateSession(b.ctx, b.alice, sandbox.CreateSessionInput{})
		require.NoError(t, err)
		r.task = b.submit(t, b.alice, sandbox.ExecInput{SessionID: sess.ID, Code: code, Wait: wait(0)})
		r.f, err = b.Service.Follow(b.ctx, b.alice, r.task.ID, sandbox.Position{})
		require.NoError(t, err)
		defer r.f.Close()
		runs = append(runs, r)
	}
	piece := strings.Repeat("a", 1300)
	for _, r := range runs { // three pieces of 1.3 kB do not fit in 4 kB: the first run's log goes
		r.next <- piece
		for got := (sandbox.Batch{}); len(got.Events) == 0; {
			var err error
			got, err = r.f.Next(b.ctx, 5*time.Second)
			require.NoError(t, err)
		}
	}
	m := b.Service.KeptOutput()
	assert.EqualValues(t, 1, m.DroppedRunning)
	assert.LessOrEqual(t, m.Peak, int64(2*limit))
	runs[0].next <- "the end\n"
	quiet, err := runs[0].f.Next(b.ctx, 50*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, quiet.Events, "no live output any more")
	// A follower that comes now waits for the end too (the replica does not take the
	// output up again).
	newcomer, err := b.Service.Follow(b.ctx, b.alice, runs[0].task.ID, sandbox.Position{})
	require.NoError(t, err)
	defer newcomer.Close()
	quiet, err = newcomer.Next(b.ctx, 50*time.Millisecond)
	require.NoError(t, err)
	assert.Empty(t, quiet.Events)

	for _, r := range runs {
		close(r.next)
		waitFor(t, r.done, "the program's end")
		// Completed before the next one ends: an execution whose result is being kept may
		// let go of the oldest running output, and one whose program ended but whose
		// completion is still being recorded still counts as running.
		b.finished(t, b.alice, r.task.ID)
	}
	rest, gaps, end := followAll(t, b.ctx, runs[0].f, sandbox.Position{Stdout: 1300})
	assert.Empty(t, gaps)
	assert.Equal(t, "the end\n", string(rest[sandbox.StreamStdout][1300:]), "the rest, from the stored result")
	require.NotNil(t, end.Result)
	assert.Equal(t, piece+"the end\n", end.Result.Stdout)
	assert.Contains(t, end.Result.Notice, "kept_output_memory_bytes", "the result says why its live output stopped")
	all, gaps, _ := followAll(t, b.ctx, newcomer, sandbox.Position{})
	assert.Empty(t, gaps)
	assert.Equal(t, piece+"the end\n", string(all[sandbox.StreamStdout]), "from the start, from the stored result")
	task := b.finished(t, b.alice, runs[0].task.ID)
	assert.Contains(t, task.Notice, "kept_output_memory_bytes")
	other := b.finished(t, b.alice, runs[1].task.ID)
	assert.NotContains(t, other.Notice, "kept_output_memory_bytes")
}
