package kubenode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"
)

// dockerProxy is the Docker Engine API as cri-dockerd sees it: the shared engine's socket,
// passed through, except that each container it creates
//
//   - carries the label LabelCluster=<cluster id>, so that teardown removes exactly this
//     cluster's containers and nothing of the other users of the engine; and
//   - has its oom_score_adj clamped to at least minOOMScoreAdj. The CRI path asks for -998
//     (pause) and -997 (Guaranteed pods); lowering oom_score_adj needs CAP_SYS_RESOURCE, which
//     this VM does not grant, and runc then fails with "can't get final child's PID from
//     pipe: EOF". Clamping at the API leaves the shared engine's configuration untouched.
type dockerProxy struct {
	srv *http.Server
	ln  net.Listener
}

// LabelCluster marks the Docker containers of one cluster (value: the cluster's id).
const LabelCluster = "io.sandgate.kubenode"

// minOOMScoreAdj is the lowest oom_score_adj a container gets: the value every process starts
// with, which no unprivileged process goes below.
const minOOMScoreAdj = 0

func startDockerProxy(socketPath, engineSocket, cluster string) (*dockerProxy, error) {
	ln, err := net.Listen("unix", socketPath)
	if err != nil {
		return nil, fmt.Errorf("docker proxy: %w", err)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme = "http"
			r.Out.URL.Host = "docker"
			r.Out.Host = "docker"
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", engineSocket)
			},
			MaxIdleConnsPerHost: 16,
		},
		FlushInterval: -1, // logs, events and stats stream
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/containers/create") {
			body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body, err = rewriteCreate(body, cluster)
			if err != nil {
				http.Error(w, "kubenode docker proxy: "+err.Error(), http.StatusBadRequest)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			r.Header.Set("Content-Length", strconv.Itoa(len(body)))
		}
		rp.ServeHTTP(w, r)
	})
	p := &dockerProxy{srv: &http.Server{Handler: h, ReadHeaderTimeout: 30 * time.Second}, ln: ln}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// rewriteCreate adds the cluster label and clamps HostConfig.OomScoreAdj in a container
// create request, keeping every other field as sent.
func rewriteCreate(body []byte, cluster string) ([]byte, error) {
	var req map[string]any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber() // int64 fields (memory, swap, CPU) pass through exactly
	if err := dec.Decode(&req); err != nil {
		return nil, fmt.Errorf("container create body: %w", err)
	}
	labels, _ := req["Labels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels[LabelCluster] = cluster
	req["Labels"] = labels
	if hc, ok := req["HostConfig"].(map[string]any); ok {
		if n, ok := hc["OomScoreAdj"].(json.Number); ok {
			if v, err := n.Int64(); err == nil && v < minOOMScoreAdj {
				hc["OomScoreAdj"] = minOOMScoreAdj
			}
		}
	}
	return json.Marshal(req)
}

func (p *dockerProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Shutdown(ctx); err != nil {
		_ = p.srv.Close()
	}
}
