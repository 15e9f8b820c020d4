package queue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandgate/sandgate/internal/broker/queue"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The AWS SDK's HTTP client keeps idle keep-alive connections to the fake; their
		// goroutines end when the process does.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	)
}

// within bounds every wait of these tests: generous, only a hung transport reaches it.
const within = 30 * time.Second

// consumer runs tr.Consume in the background; stop ends it and waits for it to return.
type consumer struct {
	cancel context.CancelFunc
	done   chan error
}

func consume(t *testing.T, tr queue.Transport, consumers int, h queue.Handler) *consumer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &consumer{cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- tr.Consume(ctx, consumers, h) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

func (c *consumer) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	select {
	case err, ok := <-c.done:
		if ok {
			require.NoError(t, err)
			close(c.done)
		}
	case <-time.After(within):
		t.Fatal("Consume did not return after its context ended")
	}
}

// seen is a handler's record of deliveries, in the order they arrived.
type seen struct {
	mu  sync.Mutex
	got []queue.Delivery
	ch  chan queue.Delivery
}

func newSeen() *seen { return &seen{ch: make(chan queue.Delivery, 100)} }

func (s *seen) add(d queue.Delivery) {
	s.mu.Lock()
	s.got = append(s.got, d)
	s.mu.Unlock()
	s.ch <- d
}

// next waits for the next delivery.
func (s *seen) next(t *testing.T) queue.Delivery {
	t.Helper()
	select {
	case d := <-s.ch:
		return d
	case <-time.After(within):
		t.Fatal("no delivery")
		return queue.Delivery{}
	}
}

// none checks that nothing is delivered for a while.
func (s *seen) none(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case got := <-s.ch:
		t.Fatalf("unexpected delivery of %s (receive count %d)", got.TaskID, got.ReceiveCount)
	case <-time.After(d):
	}
}

func enqueue(t *testing.T, tr queue.Transport, task, group string) {
	t.Helper()
	require.NoError(t, tr.Enqueue(context.Background(), nil, queue.Message{TaskID: task, GroupID: group, Body: []byte(`{"task_id":"` + task + `"}`)}))
}

// runOrderedSuite is what every transport that hands out each group in order (kafka, sqs)
// must do with the handler's answers (the package doc). open returns a transport on a queue
// (topic) of its own.
func runOrderedSuite(t *testing.T, open func(t *testing.T) queue.Transport) {
	t.Run("delivers_the_message", func(t *testing.T) {
		t.Parallel()
		tr := open(t)
		s := newSeen()
		consume(t, tr, 2, func(_ context.Context, d queue.Delivery) error { s.add(d); return nil })
		enqueue(t, tr, "t1", "s1")
		d := s.next(t)
		assert.Equal(t, "t1", d.TaskID)
		assert.Equal(t, "s1", d.GroupID)
		assert.JSONEq(t, `{"task_id":"t1"}`, string(d.Body))
		assert.Equal(t, 1, d.ReceiveCount)
		assert.False(t, d.DeadLettered)
		s.none(t, 2*time.Second)
	})

	t.Run("groups_in_order_and_side_by_side", func(t *testing.T) {
		t.Parallel()
		tr := open(t)
		// The first of group a waits until the first of group b has started: two sessions run
		// side by side, whatever their partition.
		bStarted := make(chan struct{})
		var once sync.Once
		s := newSeen()
		consume(t, tr, 4, func(_ context.Context, d queue.Delivery) error {
			switch d.TaskID {
			case "a0":
				select {
				case <-bStarted:
				case <-time.After(within):
					return errors.New("b0 never started while a0 ran")
				}
			case "b0":
				once.Do(func() { close(bStarted) })
			}
			s.add(d)
			return nil
		})
		for i := range 4 {
			enqueue(t, tr, fmt.Sprintf("a%d", i), "a")
			enqueue(t, tr, fmt.Sprintf("b%d", i), "b")
		}
		order := map[string][]string{}
		for range 8 {
			d := s.next(t)
			require.Equal(t, 1, d.ReceiveCount, d.TaskID)
			order[d.GroupID] = append(order[d.GroupID], d.TaskID)
		}
		assert.Equal(t, []string{"a0", "a1", "a2", "a3"}, order["a"])
		assert.Equal(t, []string{"b0", "b1", "b2", "b3"}, order["b"])
	})

	t.Run("a_failed_delivery_is_redelivered_and_counted", func(t *testing.T) {
		t.Parallel()
		tr := open(t)
		s := newSeen()
		consume(t, tr, 2, func(_ context.Context, d queue.Delivery) error {
			s.add(d)
			if d.ReceiveCount < 3 {
				return errors.New("handler failed")
			}
			return nil
		})
		enqueue(t, tr, "t1", "s1")
		for want := 1; want <= 3; want++ {
			d := s.next(t)
			require.Equal(t, "t1", d.TaskID)
			require.Equal(t, want, d.ReceiveCount)
		}
		s.none(t, 2*time.Second)
	})

	t.Run("out_of_turn_goes_behind_its_group_uncounted", func(t *testing.T) {
		t.Parallel()
		tr := open(t)
		// Both wait before a consumer looks: x is put behind the y that is already there.
		enqueue(t, tr, "x", "g")
		enqueue(t, tr, "y", "g")
		s := newSeen()
		first := true
		consume(t, tr, 2, func(_ context.Context, d queue.Delivery) error {
			s.add(d)
			if d.TaskID == "x" && first {
				first = false
				return queue.ErrOutOfTurn
			}
			return nil
		})
		var order []string
		for range 3 {
			d := s.next(t)
			order = append(order, d.TaskID)
			require.Equal(t, 1, d.ReceiveCount, "a message put behind is not counted")
		}
		assert.Equal(t, []string{"x", "y", "x"}, order)
		s.none(t, 2*time.Second)
	})

	t.Run("retry_later_holds_the_message_uncounted", func(t *testing.T) {
		t.Parallel()
		tr := open(t)
		s := newSeen()
		held := 0
		consume(t, tr, 2, func(_ context.Context, d queue.Delivery) error {
			s.add(d)
			if d.TaskID == "x" && held < 2 {
				held++
				return &queue.RetryError{After: 300 * time.Millisecond}
			}
			return nil
		})
		enqueue(t, tr, "x", "g")
		enqueue(t, tr, "y", "g")
		var order []string
		for range 4 {
			d := s.next(t)
			order = append(order, d.TaskID)
			require.Equal(t, 1, d.ReceiveCount)
		}
		assert.Equal(t, []string{"x", "x", "x", "y"}, order, "a held message keeps its group's later ones waiting")
		s.none(t, 2*time.Second)
	})

	t.Run("draining_finishes_running_handlers_and_leaves_the_rest", func(t *testing.T) {
		t.Parallel()
		tr := open(t)
		started, finish := make(chan struct{}), make(chan struct{})
		var ran sync.Map
		c := consume(t, tr, 1, func(ctx context.Context, d queue.Delivery) error {
			ran.Store(d.TaskID, true)
			if d.TaskID == "long" {
				close(started)
				<-finish
				assert.NoError(t, ctx.Err(), "a running handler is not cancelled by the drain")
			}
			return nil
		})
		enqueue(t, tr, "long", "g")
		enqueue(t, tr, "next", "g")
		select {
		case <-started:
		case <-time.After(within):
			t.Fatal("the first message was not delivered")
		}
		stopped := make(chan struct{})
		go func() { c.stop(t); close(stopped) }()
		time.Sleep(300 * time.Millisecond)
		select {
		case <-stopped:
			t.Fatal("Consume returned while a handler was running")
		default:
		}
		close(finish)
		<-stopped
		_, nextRan := ran.Load("next")
		require.False(t, nextRan, "nothing starts once the drain began")

		// The next consumer gets what was not finished, and not what was.
		s := newSeen()
		consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error { s.add(d); return nil })
		d := s.next(t)
		assert.Equal(t, "next", d.TaskID)
		s.none(t, 2*time.Second)
	})
}
