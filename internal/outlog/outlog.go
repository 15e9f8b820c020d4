// Package outlog is the followable output of one execution: a log of the pieces its program
// wrote, in order across its streams, that readers follow while it grows and resume after the
// last piece they saw.
//
// Memory is bounded whatever a program prints: of each stream the log keeps the pieces up to
// half its limit from the start and up to half from the end, dropping the oldest of the end's
// as new ones arrive (the head-and-tail rule of an execution's result, docs/semantics.md §9
// step 7); pieces are kept or dropped whole, so a piece larger than half the limit at a
// stream's end stands alone there. Offsets keep counting dropped bytes, so a reader sees
// where what it missed was.
// Writers never wait for readers.
//
// The log copies what it is given into buffers of its own that it never changes afterwards,
// so every reader shares them: a piece is in memory once however many readers follow the log
// (readers must not modify an Event's Data), and one Read returns at most MaxRead bytes, so
// a reader that falls behind holds on to little of what the log has dropped since.
//
// A Meter (NewMetered) accounts what a log holds against a budget shared by many logs: the
// log asks it before keeping a piece, and a budget that is full may Drop logs — this one or
// others — to make room.
package outlog

import (
	"context"
	"io"
	"maps"
	"slices"
	"sync"
	"unsafe"
)

// Event is one piece of output.
type Event struct {
	// Seq numbers the events of one log 1, 2, … in the order they were written.
	Seq int64
	// Stream names the stream ("stdout", "stderr").
	Stream string
	// Offset is the byte offset of Data in its stream, dropped bytes counted.
	Offset int64
	// Data are the bytes, shared with the log and its other readers: read-only.
	Data []byte
}

// MaxRead bounds the bytes of Data one Read returns (it returns at least one event).
const MaxRead = 256 << 10

// EventOverhead is what the log counts for one kept piece besides its bytes (a Meter is
// told len(Data)+EventOverhead): the piece's slot in the log.
const EventOverhead = int64(unsafe.Sizeof(entry{}))

// Meter accounts the memory of a log (NewMetered). Grow is called before the log keeps n
// more bytes and says whether it may (false: keep nothing more; the meter has dropped or
// will Drop the log); Shrink after the log let n bytes go. A Meter may call Drop on any log,
// this one included, from Grow; the log calls its Meter holding none of its locks.
type Meter interface {
	Grow(n int64) bool
	Shrink(n int64)
}

// Log is the followable output of one execution. Its methods are safe for concurrent use.
type Log struct {
	meter Meter // nil: unmetered

	mu      sync.Mutex
	half    int64
	events  []entry
	seq     int64
	offsets map[string]int64 // bytes written per stream
	head    map[string]int64 // bytes kept from the start per stream
	tail    map[string]int64 // bytes kept from the end per stream
	held    int64            // bytes counted for the kept pieces (len(Data)+EventOverhead each)
	changed chan struct{}    // closed and replaced at every change
	closed  bool
	dropped bool // Drop: nothing is kept any more
}

type entry struct {
	Event
	head bool
}

// New returns an empty log keeping up to limit bytes of each stream (half from its start,
// half from its end; at least 2).
func New(limit int64) *Log { return NewMetered(limit, nil) }

// NewMetered is New with the log's memory accounted by m (nil: none).
func NewMetered(limit int64, m Meter) *Log {
	if limit < 2 {
		limit = 2
	}
	return &Log{meter: m, half: limit / 2, offsets: map[string]int64{}, head: map[string]int64{}, tail: map[string]int64{}, changed: make(chan struct{})}
}

// Append records a copy of data as the next piece of stream (the caller may reuse data).
// Empty data and appends after Close are ignored. After Drop (or when the meter refuses the
// piece) the bytes are counted in the stream's offset but not kept.
func (l *Log) Append(stream string, data []byte) {
	if len(data) == 0 {
		return
	}
	cost := int64(len(data)) + EventOverhead
	kept := l.meter == nil || l.meter.Grow(cost)
	var freed int64
	l.mu.Lock()
	switch {
	case l.closed:
	case l.dropped || !kept:
		l.offsets[stream] += int64(len(data))
		l.seq++ // a reader after the last event learns it missed this one
		l.notify()
	default:
		freed = l.appendLocked(stream, data)
		cost = 0 // kept
	}
	l.mu.Unlock()
	if l.meter != nil {
		if kept && cost > 0 {
			freed += cost // counted but not kept
		}
		if freed > 0 {
			l.meter.Shrink(freed)
		}
	}
}

// appendLocked keeps data as the next piece of stream and returns the bytes (as counted) it
// dropped from the stream's end to make room. Call with mu held.
func (l *Log) appendLocked(stream string, data []byte) (freed int64) {
	l.seq++
	e := entry{Event: Event{Seq: l.seq, Stream: stream, Offset: l.offsets[stream], Data: append(make([]byte, 0, len(data)), data...)}}
	l.offsets[stream] += int64(len(data))
	l.held += int64(len(data)) + EventOverhead
	if l.head[stream] < l.half {
		e.head = true
		l.head[stream] += int64(len(data))
	} else {
		l.tail[stream] += int64(len(data))
		for l.tail[stream] > l.half {
			n := l.dropOldestTail(stream)
			if n == 0 {
				break // only this piece is left of the end: a piece is kept whole
			}
			freed += n
		}
	}
	l.events = append(l.events, e)
	l.notify()
	return freed
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

// dropOldestTail drops the oldest kept piece of stream's end and returns its count. Call
// with mu held.
func (l *Log) dropOldestTail(stream string) int64 {
	for i, e := range l.events {
		if e.Stream == stream && !e.head {
			l.tail[stream] -= int64(len(e.Data))
			l.events = append(l.events[:i], l.events[i+1:]...)
			l.events[len(l.events):cap(l.events)][0] = entry{} // no reference left behind
			n := int64(len(e.Data)) + EventOverhead
			l.held -= n
			return n
		}
	}
	return 0
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

// Drop forgets every kept piece and keeps none from now on (offsets still count), returning
// their memory to the meter — which is not called for it: a Meter that drops a log has
// already counted what the log held (Held). Readers learn it from Dropped, and Read returns
// no more events. Drop does not close the log.
func (l *Log) Drop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dropped {
		return
	}
	l.dropped = true
	clear(l.events)
	l.events, l.held = nil, 0
	l.notify()
}

// Dropped reports whether Drop was called.
func (l *Log) Dropped() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Held returns the bytes counted for the pieces the log keeps: len(Data)+EventOverhead each.
func (l *Log) Held() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Read returns the kept events after sequence number after (at most MaxRead bytes of Data,
// and at least one event when there is one), whether events after it were dropped before
// the first one returned (gap), whether the log is closed, and a channel closed at the log's
// next change. The events' Data are shared: read-only.
func (l *Log) Read(after int64) (events []Event, gap, closed bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	next := after + 1
	size := 0
	more := false
	for _, e := range l.events {
		if e.Seq < next {
			continue
		}
		if len(events) > 0 && size+len(e.Data) > MaxRead {
			more = true
			break
		}
		if e.Seq > next && len(events) == 0 {
			gap = true
		}
		events = append(events, e.Event)
		size += len(e.Data)
	}
	if len(events) == 0 && l.seq > after {
		gap = true // every one of them was dropped
	}
	return events, gap, l.closed && !more, l.changed
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
	return l.ReplayStreams(ctx, map[string]io.Writer{"stdout": stdout, "stderr": stderr}, done)
}

// ReplayStreams is Replay with a writer per stream name: those of streams without one are
// not replayed; every piece of a stream is one Write.
func (l *Log) ReplayStreams(ctx context.Context, writers map[string]io.Writer, done <-chan struct{}) error {
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
			for _, stream := range slices.Sorted(maps.Keys(writers)) {
				skip(stream, l.Written(stream))
			}
			return nil
		}
		if closed || len(evs) > 0 {
			continue // read on: more may be there already (a Read returns at most MaxRead)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
