package main

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/sandgate/sandgate/pkg/client"
)

const (
	// stdinBatch is the most input one request carries: what was read while the previous
	// request (or a wait) was under way goes in one request, in the order it was read.
	stdinBatch = 256 << 10
	// stdinRetries is how many refusals in a row (429 or 503) forwarding sits out before it
	// gives up; stdinMaxWait bounds one wait, whatever Retry-After says, and stdinFirstWait
	// is the first wait when the answer names none (doubled each time after).
	stdinRetries   = 8
	stdinMaxWait   = 30 * time.Second
	stdinFirstWait = 250 * time.Millisecond
)

// stdinSink is where forwardStdin sends input: the StdinWriter of a running execution.
type stdinSink interface {
	Write(p []byte) (int, error)
	Close() error
}

// forwardStdin sends what is read from r to w until r ends (then closes w: the program reads
// end of file) or ctx does. Input read while a request is under way is sent together in the
// next one (at most stdinBatch bytes), so fast typing makes few requests. A refusal the
// gateway says is temporary (429 over the caller's request rate, 503) is waited out as its
// Retry-After says (at most stdinMaxWait, doubling from stdinFirstWait without one) and the
// same bytes sent again, then those read meanwhile: nothing is lost, repeated or reordered.
// Any other error, or stdinRetries refusals in a row, ends forwarding: it is given to fail
// at once and returned. Reading r goes on in the background until r ends (a terminal's read
// cannot be interrupted); its bytes after a failure are dropped.
func forwardStdin(ctx context.Context, w stdinSink, r io.Reader, fail func(error)) error {
	chunks := make(chan []byte, 16)
	readErr := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		defer close(chunks)
		for {
			b := make([]byte, 32<<10)
			n, err := r.Read(b)
			if n > 0 {
				select {
				case chunks <- b[:n]:
				case <-stop:
					return
				}
			}
			if err != nil {
				if !errors.Is(err, io.EOF) {
					readErr <- err
				}
				return
			}
		}
	}()
	err := sendStdin(ctx, w, chunks)
	if err == nil {
		select {
		case err = <-readErr:
		default:
			err = retryRefused(ctx, func() (int, error) { return 0, w.Close() })
		}
	}
	if err != nil && ctx.Err() == nil {
		fail(err)
	}
	return err
}

// sendStdin sends chunks to w in order until the channel is closed; see forwardStdin.
func sendStdin(ctx context.Context, w stdinSink, chunks <-chan []byte) error {
	var pending []byte
	more := true
	// gather appends what has been read without waiting, up to stdinBatch.
	gather := func() {
		for more && len(pending) < stdinBatch {
			select {
			case b, ok := <-chunks:
				if !ok {
					more = false
					return
				}
				pending = append(pending, b...)
			default:
				return
			}
		}
	}
	for {
		if len(pending) == 0 {
			if !more {
				return nil
			}
			select {
			case b, ok := <-chunks:
				if !ok {
					return nil
				}
				pending = append(pending, b...)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		err := retryRefused(ctx, func() (int, error) {
			gather() // what was read meanwhile (during a wait too) goes along
			n, err := w.Write(pending[:min(len(pending), stdinBatch)])
			pending = pending[n:]
			return n, err
		})
		if err != nil {
			return err
		}
	}
}

// retryRefused calls send until it succeeds, waiting out each temporary refusal (see
// forwardStdin) and giving up after stdinRetries of them in a row; an error after some bytes
// were taken (n > 0) is not retried.
func retryRefused(ctx context.Context, send func() (int, error)) error {
	refused := 0
	for {
		n, err := send()
		var e *client.Error
		if err == nil || n > 0 || !errors.As(err, &e) || !e.Temporary() || refused >= stdinRetries {
			return err
		}
		wait := e.RetryAfter
		if wait <= 0 {
			wait = stdinFirstWait << refused
		}
		refused++
		t := time.NewTimer(min(wait, stdinMaxWait))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}
