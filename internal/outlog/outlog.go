// Package outlog is the followable output of one execution: a log of the pieces its program
// wrote, in order across its streams, that readers follow while it grows and resume after the
// last piece they saw.
//
// Memory is bounded whatever a program prints: of each stream the log keeps the pieces up to
// half its limit from the start and up to half from the end, dropping the oldest of the end's
// as new ones arrive (the head-and-tail rule of an execution's result, docs/semantics.md §9
// step 7). Offsets keep counting dropped bytes, so a reader sees where what it missed was.
// Writers never wait for readers. The log copies what it is given into buffers of its own and
// reuses the buffers of the pieces it drops, so a program printing gigabytes costs the log no
// more memory than its limit and leaves little garbage; readers get copies.
package outlog

import (
	"context"
	"io"
	"sync"
)

// Event is one piece of output.
type Event struct {
	// Seq numbers the events of one log 1, 2, … in the order they were written.
	Seq int64
	// Stream names the stream ("stdout", "stderr").
	Stream string
	// Offset is the byte offset of Data in its stream, dropped bytes counted.
	Offset int64
	// Data are the bytes (the reader's own copy).
	Data []byte
}

// Log is the followable output of one execution. Its methods are safe for concurrent use.
type Log struct {
	mu      sync.Mutex
	half    int64
	events  []entry
	seq     int64
	offsets map[string]int64 // bytes written per stream
	head    map[string]int64 // bytes kept from the start per stream
	tail    map[string]int64 // bytes kept from the end per stream
	changed chan struct{}    // closed and replaced at every change
	closed  bool
	free    [][]byte // buffers of dropped pieces, for the next ones (at most maxFree)
}

// maxFree bounds the buffers a log keeps for reuse.
const maxFree = 8

type entry struct {
	Event
	head bool
}

// New returns an empty log keeping up to limit bytes of each stream (half from its start,
// half from its end; at least 2).
func New(limit int64) *Log {
	if limit < 2 {
		limit = 2
	}
	return &Log{half: limit / 2, offsets: map[string]int64{}, head: map[string]int64{}, tail: map[string]int64{}, changed: make(chan struct{})}
}

// Append records a copy of data as the next piece of stream (the caller may reuse data).
// Empty data and appends after Close are ignored.
func (l *Log) Append(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.seq++
	e := entry{Event: Event{Seq: l.seq, Stream: stream, Offset: l.offsets[stream], Data: l.copyOf(data)}}
	l.offsets[stream] += int64(len(data))
	if l.head[stream] < l.half {
		e.head = true
		l.head[stream] += int64(len(data))
	} else {
		l.tail[stream] += int64(len(data))
		for l.tail[stream] > l.half {
			l.dropOldestTail(stream)
		}
	}
	l.events = append(l.events, e)
	l.notify()
}

// Skip counts n bytes of stream that were dropped before they reached the log (an earlier
// log in front of this one let them go): the next piece's offset is n further on.
func (l *Log) Skip(stream string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed && n > 0 {
		l.offsets[stream] += n
	}
}

func (l *Log) dropOldestTail(stream string) {
	for i, e := range l.events {
		if e.Stream == stream && !e.head {
			l.tail[stream] -= int64(len(e.Data))
			l.events = append(l.events[:i], l.events[i+1:]...)
			l.events[len(l.events):cap(l.events)][0] = entry{} // no reference left behind
			if len(l.free) < maxFree {
				l.free = append(l.free, e.Data[:0])
			}
			return
		}
	}
}

// copyOf is data copied into a reused buffer when one is large enough, else a new one. Call
// with mu held.
func (l *Log) copyOf(data []byte) []byte {
	for i, b := range l.free {
		if cap(b) >= len(data) {
			l.free[i] = l.free[len(l.free)-1]
			l.free = l.free[:len(l.free)-1]
			return append(b, data...)
		}
	}
	return append([]byte(nil), data...)
}

func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Close marks the log complete: readers that have read everything learn it from Read.
func (l *Log) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		l.notify()
	}
}

// Read returns the kept events after sequence number after, whether events after it were
// dropped before the first one returned (gap), whether the log is closed, and a channel
// closed at the log's next change.
func (l *Log) Read(after int64) (events []Event, gap, closed bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := after + 1
	for _, e := range l.events {
		if e.Seq < next {
			continue
		}
		if e.Seq > next && len(events) == 0 {
			gap = true
		}
		ev := e.Event
		ev.Data = append([]byte(nil), e.Data...) // the log reuses its buffers
		events = append(events, ev)
	}
	if len(events) == 0 && l.seq > after {
		gap = true // every one of them was dropped
	}
	return events, gap, l.closed, l.changed
}

// Written returns how many bytes were written to stream, dropped ones included.
func (l *Log) Written(stream string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.offsets[stream]
}

// Replay writes the log's kept output to stdout and stderr (nil: that stream is not wanted)
// from its start, in order, and returns once the log is closed, every event was written and
// done is closed. A writer with a method Skip(n int64) is told of the bytes dropped before
// each piece it gets and at the end (the middle of a long stream). Errors: ctx.Err() when ctx
// ends first (the execution goes on); a writer's error, which stops the replay.
func (l *Log) Replay(ctx context.Context, stdout, stderr io.Writer, done <-chan struct{}) error {
	writers := map[string]io.Writer{"stdout": stdout, "stderr": stderr}
	next := map[string]int64{}
	skip := func(stream string, upTo int64) {
		if n := upTo - next[stream]; n > 0 {
			next[stream] = upTo
			if s, ok := writers[stream].(interface{ Skip(n int64) }); ok {
				s.Skip(n)
			}
		}
	}
	var after int64
	for {
		evs, _, closed, changed := l.Read(after)
		for _, ev := range evs {
			skip(ev.Stream, ev.Offset)
			if w := writers[ev.Stream]; w != nil {
				if _, err := w.Write(ev.Data); err != nil {
					return err
				}
			}
			next[ev.Stream] = ev.Offset + int64(len(ev.Data))
			after = ev.Seq
		}
		if closed && len(evs) == 0 {
			select {
			case <-done:
			case <-ctx.Done():
				return ctx.Err()
			}
			skip("stdout", l.Written("stdout"))
			skip("stderr", l.Written("stderr"))
			return nil
		}
		if closed {
			continue // nothing more will come: the next read ends it
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
