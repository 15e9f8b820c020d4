package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
)

// numbered is the command of the kept-output tests: 2 MiB of numbered 8-byte lines, so that
// the offset of every byte says what it is (numberedOutput).
const numbered = `awk 'BEGIN{for(i=0;i<262144;i++) printf "%07d\n", i}'`

func numberedOutput() []byte {
	var b bytes.Buffer
	for i := range 262144 {
		fmt.Fprintf(&b, "%07d\n", i)
	}
	return b.Bytes()
}

// followed is what one follower of a task's output stream got.
type followed struct {
	chunks map[string][]chunk
	gaps   []map[string]any
	result map[string]any
}

type chunk struct {
	offset int64
	data   []byte
}

// check fails unless f's chunks and gaps of stdout lay want out from 0 to its end, each
// chunk at its offset, and stderr is empty.
func (f followed) check(t *testing.T, want []byte) {
	t.Helper()
	var at int64
	gaps := map[int64]int64{}
	for _, g := range f.gaps {
		require.Equal(t, "stdout", g["stream"])
		gaps[int64(g["from"].(float64))] = int64(g["to"].(float64))
	}
	for _, c := range f.chunks["stdout"] {
		if to, ok := gaps[at]; ok {
			at = to
		}
		require.Equal(t, at, c.offset, "the chunks and gaps follow each other")
		require.True(t, bytes.Equal(want[c.offset:c.offset+int64(len(c.data))], c.data), "the bytes at offset %d are the output's", c.offset)
		at += int64(len(c.data))
	}
	if to, ok := gaps[at]; ok {
		at = to
	}
	require.EqualValues(t, len(want), at, "to the end of the output")
	require.Empty(t, f.chunks["stderr"])
	require.NotNil(t, f.result)
}

// follow streams task id's output as tok's bearer (from the start) and returns what came, or
// an error (safe off the test's goroutine).
func (e *testEnv) follow(ctx context.Context, tok, id string) (followed, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", e.URL+"/v1/tasks/"+id+"/output", nil)
	if err != nil {
		return followed{}, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return followed{}, err
	}
	defer resp.Body.Close()
	return readStream(resp)
}

// readStream reads an output stream's events to its result.
func readStream(resp *http.Response) (followed, error) {
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return followed{}, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	f := followed{chunks: map[string][]chunk{}}
	r := bufio.NewReaderSize(resp.Body, 1<<20)
	var name, data string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return f, fmt.Errorf("the stream ended before its result: %w", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && name != "":
			var v map[string]any
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				return f, fmt.Errorf("event %s: %w", name, err)
			}
			switch name {
			case "stdout", "stderr":
				b := []byte(v["data"].(string))
				if v["encoding"] == "base64" {
					if b, err = base64.StdEncoding.DecodeString(v["data"].(string)); err != nil {
						return f, err
					}
				}
				f.chunks[name] = append(f.chunks[name], chunk{offset: int64(v["offset"].(float64)), data: b})
			case "gap":
				f.gaps = append(f.gaps, v)
			case "result":
				f.result = v
				return f, nil
			case "error":
				return f, fmt.Errorf("error event: %s", data)
			}
			name, data = "", ""
		}
	}
}

// runNumbered runs the numbered command in session sid and returns its task id; streamed,
// as an event stream it reads to the end.
func (e *testEnv) runNumbered(ctx context.Context, tok, sid string, streamed bool) (string, error) {
	body := strings.NewReader(`{"command": ` + fmt.Sprintf("%q", numbered) + `}`)
	req, err := http.NewRequestWithContext(ctx, "POST", e.URL+"/v1/sessions/"+sid+"/commands", body)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	if streamed {
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if streamed {
		f, err := readStream(resp)
		if err != nil {
			return "", err
		}
		return f.result["task_id"].(string), nil
	}
	var res map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %v %v", resp.StatusCode, res, err)
	}
	return res["task_id"].(string), nil
}

// TestKeptOutputHasOneBudget: one principal with 8 clients printing 2 MiB per run, at its
// quotas, cannot make the gateway keep more output in memory for followers than
// sandbox.kept_output_memory_bytes (the gateway counts every byte it keeps); the oldest
// outputs make room. A later follower of a task whose output the gateway let go gets its
// stored result replayed — the kept start and end at their offsets — and one whose stored
// output the retained_output_bytes quota dropped gets a gap and a result that says so.
func TestKeptOutputHasOneBudget(t *testing.T) {
	t.Parallel()
	// 8 MiB: less than 8 running executions' live logs of 1 MiB (the output limit) each.
	const ceiling = 8 << 20
	e := newEnv(t, envOpts{config: func(c *config.Config) {
		c.Sandbox.KeptOutputMemoryBytes = ceiling
		c.Sandbox.Quotas.RetainedOutputBytes = 12 << 20 // the newest 12 results keep their output
	}})
	tok := e.token("alice")
	want := numberedOutput()
	const clients, runs = 8, 6
	var (
		mu  sync.Mutex
		ids []string // in the order they finished
		wg  sync.WaitGroup
	)
	errs := make(chan error, clients)
	for c := range clients {
		sid := e.newSession(tok, "default")
		wg.Go(func() {
			for r := range runs {
				id, err := e.runNumbered(t.Context(), tok, sid, r%2 == 1)
				if err != nil {
					errs <- fmt.Errorf("client %d, run %d: %w", c, r, err)
					return
				}
				mu.Lock()
				ids = append(ids, id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	m := e.svc.KeptOutput()
	t.Logf("kept output: %+v", m)
	assert.EqualValues(t, ceiling, m.Limit)
	assert.LessOrEqual(t, m.Peak, int64(ceiling), "48 outputs of 2 MiB never made it keep more than the ceiling")
	assert.Less(t, e.svc.KeptOutput().Held, int64(ceiling))
	assert.Positive(t, m.Dropped, "the oldest outputs made room")

	// The ninth newest: its stored output is within the retained quota, and there is no room
	// for its live log here any more.
	last := ids[len(ids)-9]
	f, err := e.follow(t.Context(), tok, last)
	require.NoError(t, err)
	f.check(t, want)
	stored := e.do(tok, "GET", "/v1/tasks/"+last, nil).JSON(t)["result"]
	assert.Equal(t, stored, f.result, "the result event is the task's result")
	assert.Equal(t, true, f.result["stdout_truncated"])
	assert.NotContains(t, f.result, "stdout_head", "the split is not part of the API")

	// The first run: its stored output went to keep alice within retained_output_bytes.
	first := ids[0]
	require.Eventually(t, func() bool {
		res, _ := e.do(tok, "GET", "/v1/tasks/"+first, nil).JSON(t)["result"].(map[string]any)
		return res["output_dropped"] == true
	}, 30*time.Second, 50*time.Millisecond, "the retained-output quota drops the oldest results' output")
	f, err = e.follow(t.Context(), tok, first)
	require.NoError(t, err)
	assert.Empty(t, f.chunks)
	assert.Equal(t, []map[string]any{{"stream": "stdout", "from": 0.0, "to": float64(len(want))}}, f.gaps, "all of it is a gap")
	assert.Equal(t, true, f.result["output_dropped"])
	assert.Contains(t, f.result["notice"], "retained_output_bytes")
}

// TestFollowersOfOneFinishedTaskShareItsOutput: 90 followers of one finished 2 MiB task each
// get its whole kept output and its result, while the gateway keeps one copy of it for all
// of them (within its ceiling) and lets the result go when the last has left.
func TestFollowersOfOneFinishedTaskShareItsOutput(t *testing.T) {
	t.Parallel()
	// 90 open followers of one principal: past its open_requests bound (64), which this test is not about.
	e := newEnv(t, envOpts{config: func(c *config.Config) { c.Sandbox.Quotas.OpenRequests = -1 }})
	tok := e.token("alice")
	want := numberedOutput()
	id, err := e.runNumbered(t.Context(), tok, e.newSession(tok, "default"), false)
	require.NoError(t, err)
	before := e.svc.KeptOutput()

	results := make(chan followed, 90)
	errs := make(chan error, 90)
	var wg sync.WaitGroup
	for range 90 {
		wg.Go(func() {
			f, err := e.follow(t.Context(), tok, id)
			if err != nil {
				errs <- err
				return
			}
			results <- f
		})
	}
	wg.Wait()
	close(errs)
	close(results)
	for err := range errs {
		require.NoError(t, err)
	}
	stored := e.do(tok, "GET", "/v1/tasks/"+id, nil).JSON(t)["result"]
	n := 0
	for f := range results {
		f.check(t, want)
		require.Equal(t, stored, f.result)
		n++
	}
	require.Equal(t, 90, n)
	m := e.svc.KeptOutput()
	assert.LessOrEqual(t, m.Peak-before.Held, int64(2*(len(want)+len(want)/2)), "one log and one result for 90 followers, not one each")
	require.Eventually(t, func() bool { return e.svc.KeptOutput().Held == before.Held }, 10*time.Second, 10*time.Millisecond,
		"the result is let go once the last follower left (it is in the store)")
}

// The result event of an output stream is the task's result, also for output whose JSON
// escaping crosses the pieces it is encoded in (quotes, <, &, newlines, characters of 2 to 4
// bytes).
func TestResultEventOfLargeEscapedOutput(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOpts{})
	tok := e.token("alice")
	sid := e.newSession(tok, "default")
	s := e.stream(tok, "POST", "/v1/sessions/"+sid+"/code", map[string]any{
		"code": `import sys; sys.stdout.write('"<é&>\n€\t😀\\' * 20000); sys.stderr.write('\x01 err' * 5000)`,
	}, nil)
	require.Equal(t, 200, s.resp.StatusCode)
	var result map[string]any
	for result == nil {
		ev := s.event(t)
		if ev.event == "result" {
			result = decode(t, ev.data)
		}
	}
	taskID, _ := result["task_id"].(string)
	require.NotEmpty(t, taskID)
	stored := e.do(tok, "GET", "/v1/tasks/"+taskID, nil).JSON(t)["result"]
	assert.Equal(t, stored, result)
	assert.Equal(t, strings.Repeat("\"<é&>\n€\t😀\\", 20000), result["stdout"])
	_, err := s.next(t)
	assert.True(t, errors.Is(err, io.EOF), "the stream ends after the result")
}
