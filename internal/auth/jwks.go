package auth

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// go-oidc's RemoteKeySet fetches the issuer's JWKS again whenever a signature does not verify
// with the cached keys (the refresh an unknown kid needs after a key rotation) — so every
// junk token an unauthenticated client sends would make the gateway call the identity
// provider. jwksThrottle bounds that per issuer: a burst of jwksBurst fetches, then one per
// jwksRefetchEvery; a throttled fetch is answered with the last key set fetched, so valid
// tokens keep verifying and junk ones fail without a network call.
const (
	jwksRefetchEvery = 10 * time.Second
	jwksBurst        = 3
	jwksMaxBytes     = 1 << 20
)

type jwksThrottle struct {
	next    http.RoundTripper
	limiter *rate.Limiter

	// onChange, when set, is called after a fetch whose key set differs from the last one.
	onChange func()

	mu     sync.Mutex
	body   []byte // the last key set fetched with 200
	header http.Header
}

func newJWKSThrottle(next http.RoundTripper) *jwksThrottle {
	if next == nil {
		next = http.DefaultTransport
	}
	return &jwksThrottle{next: next, limiter: rate.NewLimiter(rate.Every(jwksRefetchEvery), jwksBurst)}
}

func (j *jwksThrottle) RoundTrip(r *http.Request) (*http.Response, error) {
	if !j.limiter.Allow() {
		j.mu.Lock()
		body, header := j.body, j.header.Clone()
		j.mu.Unlock()
		if body == nil {
			return nil, errors.New("JWKS refetch rate-limited: the issuer's keys were fetched moments ago")
		}
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: header, Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body)), Request: r}, nil
	}
	resp, err := j.next.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, jwksMaxBytes))
	if err != nil {
		return nil, err
	}
	j.mu.Lock()
	changed := !bytes.Equal(j.body, body)
	j.body, j.header = body, resp.Header.Clone()
	j.mu.Unlock()
	if changed && j.onChange != nil {
		j.onChange()
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}
