package queue

import (
	"context"
	"errors"
	"time"
)

// verdict is what a transport that hands out each group strictly in order (kafka, sqs) does
// with a handler's answer (see the package doc).
type verdict int

const (
	// acknowledge: the message is done (commit past it, delete it).
	acknowledge verdict = iota
	// sendBehind: send it again behind the group's later messages, uncounted, then
	// acknowledge this copy (ErrOutOfTurn).
	sendBehind
	// hold: keep it and run the handler again after retryDelay (other ErrRetryLater).
	hold
	// redeliver: a failed delivery; redeliver it, counted.
	redeliver
)

// judge maps a handler's answer to a verdict.
func judge(err error) verdict {
	switch {
	case err == nil:
		return acknowledge
	case errors.Is(err, ErrOutOfTurn):
		return sendBehind
	case errors.Is(err, ErrRetryLater):
		return hold
	}
	return redeliver
}

// failedDeliveryPause is how long a failed delivery waits before it is offered again (as the
// nats transport's NakWithDelay): a failure that repeats (the database is down) must not
// spin.
const failedDeliveryPause = time.Second

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// reserve takes between 1 and limit tokens of sem, waiting for the first; 0 when ctx ended.
func reserve(ctx context.Context, sem chan struct{}, limit int) int {
	select {
	case sem <- struct{}{}:
	case <-ctx.Done():
		return 0
	}
	n := 1
	for n < limit {
		select {
		case sem <- struct{}{}:
			n++
		default:
			return n
		}
	}
	return n
}

// release gives back n tokens of sem.
func release(sem chan struct{}, n int) {
	for range n {
		<-sem
	}
}
