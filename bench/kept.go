package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate/internal/config"
)

// keptCommand prints 2 MiB (numbered 8-byte lines).
const keptCommand = `awk 'BEGIN{for(i=0;i<262144;i++) printf "%07d\n", i}'`

// keptOutput is scenario 10 (issue 33): what kept output costs the gateway's memory. On a
// child of its own with the default quotas (one principal at its quotas, as an attacker with
// an ordinary token) and the default sandbox.kept_output_memory_bytes: 8 clients running a
// command that prints 2 MiB, back to back, for a minute (10 s with -quick), then 90 slow
// followers of one finished 2 MiB task. Each row is the child's peak VmRSS over its RSS before
// (sampled every 5 ms, and VmHWM where it could be reset).
func keptOutput() {
	g, err := startChild(gwOpts{name: "kept", quotas: true})
	if err != nil {
		skip("kept output: " + err.Error())
		return
	}
	defer g.close()
	tok := g.token("tenant")
	const clients = 8
	sids := make([]string, clients)
	for i := range sids {
		sids[i] = g.newSession(tok, "local")
		g.exec(tok, sids[i], "true")
	}
	d := time.Duration(n(60, 10)) * time.Second
	var runs, refused, failed atomic.Int64
	var last atomic.Value
	r := peakRSSGrowth(g.pid, func() {
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					code, b, err := g.try(tok, "POST", "/v1/sessions/"+sids[i]+"/commands", map[string]any{"command": keptCommand})
					switch {
					case err == nil && code == 200:
						runs.Add(1)
						if id := between(string(b), `"task_id":"`, `"`); id != "" {
							last.Store(id)
						}
					case err == nil && code == 429:
						refused.Add(1)
						time.Sleep(time.Second)
					default:
						failed.Add(1)
						time.Sleep(100 * time.Millisecond)
					}
				}
			})
		}
		wg.Wait()
	})
	limit := float64(config.DefaultKeptOutputMemoryBytes) / (1 << 20)
	add(Row{Scenario: "10 kept output", Variant: fmt.Sprintf("8 clients x 2 MiB per run, %s: gateway peak RSS growth", d),
		Value: fmt.Sprintf("%.1f MB (bound: kept_output_memory_bytes %.0f MiB + 256 MB)%s", mb(r.growthKB), limit, r.hwmNote()),
		Note:  fmt.Sprintf("%d runs (%.0f MiB printed), %d refused 429, %d failed; one principal, default quotas", runs.Load(), float64(runs.Load())*2, refused.Load(), failed.Load())})

	id, _ := last.Load().(string)
	if id == "" {
		skip("kept output followers: no run finished")
		return
	}
	const followers = 90
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: followers, MaxConnsPerHost: 0}}
	var got, bytesRead atomic.Int64
	r = peakRSSGrowth(g.pid, func() {
		var connected, wg sync.WaitGroup
		release := make(chan struct{})
		for range followers {
			connected.Add(1)
			wg.Go(func() {
				req, _ := http.NewRequest("GET", g.URL+"/v1/tasks/"+id+"/output", nil)
				req.Header.Set("Accept", "text/event-stream")
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := client.Do(req)
				if err != nil {
					connected.Done()
					return
				}
				defer resp.Body.Close()
				br := bufio.NewReaderSize(resp.Body, 1024)
				_, _ = br.Peek(512) // the stream started; then the reader stalls
				connected.Done()
				<-release
				n, _ := io.Copy(io.Discard, br)
				bytesRead.Add(n + 512)
				if resp.StatusCode == 200 {
					got.Add(1)
				}
			})
		}
		connected.Wait()
		time.Sleep(3 * time.Second) // the gateway writes into 90 stalled connections
		close(release)
		wg.Wait()
	})
	add(Row{Scenario: "10 kept output", Variant: "90 slow followers of one finished 2 MiB task: gateway peak RSS growth",
		Value: fmt.Sprintf("%.1f MB%s", mb(r.growthKB), r.hwmNote()),
		Note:  fmt.Sprintf("%d streams answered 200, %s MB read in all", got.Load(), strconv.FormatFloat(float64(bytesRead.Load())/1e6, 'f', 0, 64))})
}

func between(s, start, end string) string {
	_, after, ok := strings.Cut(s, start)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, end)
	return v
}
