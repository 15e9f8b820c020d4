package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// intercept terminates the client's TLS with a leaf of the installation's CA for host and
// forwards each request to https://host:port with the bound secrets' placeholders replaced
// by their values in its headers; responses come back with every secret value of the grant
// replaced by its placeholder (headers and body).
func (h *handler) intercept(client net.Conn, host string, port int, secrets []Secret) {
	if h.p.ca == nil {
		return
	}
	leaf, err := h.p.ca.Leaf(host)
	if err != nil {
		h.p.log.Error("egress: issuing a leaf certificate failed", "host", host, "err", err)
		return
	}
	tc := tls.Server(client, &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12})
	defer tc.Close()
	if err := tc.Handshake(); err != nil {
		return
	}
	br := bufio.NewReader(tc)
	authority := net.JoinHostPort(host, strconv.Itoa(port))
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		req.URL.Scheme, req.URL.Host, req.RequestURI = "https", authority, ""
		if port == 443 {
			req.URL.Host = host
		}
		removeHopHeaders(req.Header)
		substitute(req.Header, secrets)
		req.Header.Del("Accept-Encoding") // the transport's own gzip is decoded, so the body can be scrubbed
		resp, err := h.p.upstream.RoundTrip(req.WithContext(req.Context()))
		if err != nil {
			msg := "sandgate egress proxy: " + h.scrubString(err.Error()) + "\n"
			resp = &http.Response{StatusCode: http.StatusBadGateway, ProtoMajor: 1, ProtoMinor: 1,
				Header: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: io.NopCloser(strings.NewReader(msg)), ContentLength: int64(len(msg))}
		} else {
			removeHopHeaders(resp.Header)
			h.scrubHeader(resp.Header)
			resp.Header.Del("Content-Length")
			// Chunked: the scrubbed length is unknown, and a length-less HTTP/1.1 body would
			// end the kept-alive connection (Response.Write ends such a body by closing).
			resp.ContentLength = -1
			resp.TransferEncoding = []string{"chunked"}
			resp.Body = struct {
				io.Reader
				io.Closer
			}{h.scrubReader(resp.Body), resp.Body}
		}
		resp.Proto, resp.ProtoMajor, resp.ProtoMinor = "HTTP/1.1", 1, 1
		werr := resp.Write(tc)
		resp.Body.Close()
		if werr != nil || req.Close || resp.Close {
			return
		}
	}
}

// substitute replaces each secret's placeholder by its value in every header value.
func substitute(hdr http.Header, secrets []Secret) {
	if len(secrets) == 0 {
		return
	}
	for k, vs := range hdr {
		for i, v := range vs {
			for _, s := range secrets {
				if s.Placeholder != "" && strings.Contains(v, s.Placeholder) {
					v = strings.ReplaceAll(v, s.Placeholder, string(s.Value))
				}
			}
			hdr[k][i] = v
		}
	}
}

// scrubString replaces every secret value of the grant by its placeholder.
func (h *handler) scrubString(s string) string {
	for _, sec := range h.g.Secrets {
		if len(sec.Value) > 0 {
			s = strings.ReplaceAll(s, string(sec.Value), sec.Placeholder)
		}
	}
	return s
}

func (h *handler) scrubHeader(hdr http.Header) {
	if len(h.g.Secrets) == 0 {
		return
	}
	for k, vs := range hdr {
		for i, v := range vs {
			hdr[k][i] = h.scrubString(v)
		}
	}
}

// scrubReader returns r with every secret value of the grant replaced by its placeholder,
// also across reads.
func (h *handler) scrubReader(r io.Reader) io.Reader {
	var pairs []scrubPair
	for _, s := range h.g.Secrets {
		if len(s.Value) > 0 {
			pairs = append(pairs, scrubPair{from: s.Value, to: []byte(s.Placeholder)})
		}
	}
	if len(pairs) == 0 {
		return r
	}
	return &scrubber{src: r, pairs: pairs}
}

type scrubPair struct{ from, to []byte }

// scrubber is a streaming replacer: it holds back the last len(longest value)-1 bytes of
// what it has read, which could start a value the next read completes.
type scrubber struct {
	src   io.Reader
	pairs []scrubPair
	buf   []byte // read, not yet replaced
	out   []byte // replaced, not yet returned
	eof   bool
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			if len(s.buf) == 0 {
				return 0, io.EOF
			}
			s.out, s.buf = s.replace(s.buf), nil
			break
		}
		chunk := make([]byte, 32*1024)
		n, err := s.src.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if errors.Is(err, io.EOF) {
			s.eof = true
		} else if err != nil {
			return 0, err
		}
		keep := 0
		for _, pr := range s.pairs {
			keep = max(keep, len(pr.from)-1)
		}
		if !s.eof && len(s.buf) > keep {
			cut := s.safeCut(len(s.buf) - keep)
			s.out = s.replace(s.buf[:cut])
			s.buf = append([]byte(nil), s.buf[cut:]...)
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}

// safeCut moves cut back before any whole value that straddles it, so a value is replaced
// whole.
func (s *scrubber) safeCut(cut int) int {
	for _, pr := range s.pairs {
		for start := max(0, cut-len(pr.from)+1); start < cut; start++ {
			i := bytes.Index(s.buf[start:], pr.from)
			if i < 0 || start+i >= cut {
				break
			}
			if start+i+len(pr.from) > cut {
				cut = start + i
				break
			}
			start += i
		}
	}
	return cut
}

func (s *scrubber) replace(b []byte) []byte {
	for _, pr := range s.pairs {
		b = bytes.ReplaceAll(b, pr.from, pr.to)
	}
	return b
}
