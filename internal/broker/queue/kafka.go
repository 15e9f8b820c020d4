package queue

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// KafkaConfig configures the Kafka transport. The composition root fills it from
// sandbox.broker.queue.kafka (defaults applied there).
type KafkaConfig struct {
	// Brokers are the seed brokers, host:port.
	Brokers []string
	// Topic is the input topic. The transport creates it (Partitions partitions, the
	// brokers' default replication) when it does not exist; an existing topic is used as it
	// is.
	Topic string
	// Partitions bounds how many sessions' records are worked without sharing a partition
	// when the transport creates Topic (> 0).
	Partitions int
	// GroupID is the workers' consumer group.
	GroupID string
	// SessionTimeout is how long a worker may miss group heartbeats before the group drops
	// it and its partitions move to the other workers (how soon a dead worker's records are
	// redelivered). Kafka's default is 45s; the brokers bound it
	// (group.min/max.session.timeout.ms).
	SessionTimeout time.Duration
	// MaxRecordBytes is the largest record the producer sends; 0 = franz-go's default
	// (1,000,012 bytes). The topic's max.message.bytes must allow it.
	MaxRecordBytes int
	// TLS dials the brokers over TLS, trusting the system's roots or, with TLSCAFile, the
	// PEM certificates in that file.
	TLS       bool
	TLSCAFile string
	// SASLMechanism is "", "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512", with SASLUser and
	// SASLPassword.
	SASLMechanism string
	SASLUser      string
	SASLPassword  string
}

// kafkaDeliveryTimeout bounds how long a produced record may wait for the brokers.
const kafkaDeliveryTimeout = 30 * time.Second

// Record headers of the Kafka transport.
const (
	// kafkaTaskHeader carries the task id (the body's own may be undecodable).
	kafkaTaskHeader = "sandgate-task-id"
	// kafkaFailuresHeader counts the deliveries of this task that ended in a handler error
	// (decimal); a record's receive count is this + 1.
	kafkaFailuresHeader = "sandgate-failed-deliveries"
)

// Kafka is the Kafka transport: records keyed by session id on one input topic, consumed by
// a consumer group of workers.
//
// Delivery and redelivery. A worker commits a partition's offset only past records whose
// handler returned nil (or whose copy was produced again, below), so a worker that dies —
// or leaves the group while draining — leaves its unfinished records to the member that
// takes its partitions, which resumes at the last commit; records already finished there
// are delivered again and skipped by the domain. Records of different sessions in one
// partition are worked side by side (up to the consumers limit); one session's are worked
// one at a time, in offset order.
//
// max_receive_count. Kafka keeps no per-record delivery count and a record cannot be put
// back, so a delivery whose handler fails is produced again at the end of its partition
// with the header sandgate-failed-deliveries raised by one, after a pause of a second, and
// the original is then committed past; a delivery's ReceiveCount is that header + 1, and
// the domain records the permanent failure once it exceeds max_receive_count. A worker that
// dies produces nothing, so its deliveries are not in that header; the domain counts them
// instead, as starts of the task (its attempts in Postgres), against the same limit. A
// record put back uncounted (ErrOutOfTurn) is produced again with the header unchanged.
//
// Head of line. A member holds at most max(8×consumers, 128) polled records that are not yet
// committable; one session with that many unfinished executions queued behind a long one on
// the member's partitions stops it fetching (its other sessions wait too) until they drain.
// Partitions held by other members are not affected.
type Kafka struct {
	cfg  KafkaConfig
	log  *slog.Logger
	prod *kgo.Client // produces for gateways, and again for workers
}

// NewKafka connects to cfg.Brokers and makes sure cfg.Topic exists (creating it with
// cfg.Partitions partitions when it does not), giving up after 30 seconds.
//
// Errors: bad TLS or SASL settings, brokers that cannot be reached, a topic that neither
// exists nor can be created (the brokers' ACLs may refuse CreateTopics).
func NewKafka(ctx context.Context, cfg KafkaConfig, log *slog.Logger) (*Kafka, error) {
	if log == nil {
		log = slog.Default()
	}
	opts, err := cfg.clientOpts(log)
	if err != nil {
		return nil, err
	}
	if cfg.MaxRecordBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes)))
	}
	// An execution that cannot be queued within kafkaDeliveryTimeout fails (broker) rather
	// than hold its request until Kafka is back.
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(cfg.Topic), kgo.RecordDeliveryTimeout(kafkaDeliveryTimeout))...)
	if err != nil {
		return nil, fmt.Errorf("queue: Kafka client: %w", err)
	}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ensureTopic(checkCtx, prod, cfg); err != nil {
		prod.Close()
		return nil, err
	}
	return &Kafka{cfg: cfg, log: log, prod: prod}, nil
}

// clientOpts are the options every client of the transport shares.
func (cfg KafkaConfig) clientOpts(log *slog.Logger) ([]kgo.Opt, error) {
	opts := []kgo.Opt{kgo.SeedBrokers(cfg.Brokers...), kgo.ClientID("sandgate"), kgo.WithLogger(kafkaLogger{log})}
	if cfg.TLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.TLSCAFile != "" {
			pem, err := os.ReadFile(cfg.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("queue: Kafka TLS CA file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("queue: Kafka TLS CA file %s holds no PEM certificate", cfg.TLSCAFile)
			}
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	switch strings.ToUpper(cfg.SASLMechanism) {
	case "":
	case "PLAIN":
		opts = append(opts, kgo.SASL(plain.Auth{User: cfg.SASLUser, Pass: cfg.SASLPassword}.AsMechanism()))
	case "SCRAM-SHA-256":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASLUser, Pass: cfg.SASLPassword}.AsSha256Mechanism()))
	case "SCRAM-SHA-512":
		opts = append(opts, kgo.SASL(scram.Auth{User: cfg.SASLUser, Pass: cfg.SASLPassword}.AsSha512Mechanism()))
	default:
		return nil, fmt.Errorf("queue: unknown Kafka SASL mechanism %q (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", cfg.SASLMechanism)
	}
	return opts, nil
}

// ensureTopic creates cfg.Topic unless it exists.
func ensureTopic(ctx context.Context, cl *kgo.Client, cfg KafkaConfig) error {
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx, cfg.Topic)
	if err != nil {
		return fmt.Errorf("queue: reach Kafka at %s: %w", strings.Join(cfg.Brokers, ","), err)
	}
	if d, ok := topics[cfg.Topic]; ok && d.Err == nil {
		return nil
	}
	resp, err := adm.CreateTopic(ctx, int32(max(cfg.Partitions, 1)), -1, nil, cfg.Topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("queue: Kafka topic %s does not exist and could not be created: %w", cfg.Topic, err)
	}
	return nil
}

// record is the record of one operation; failures is its count of failed deliveries.
func (q *Kafka) record(taskID string, key, body []byte, failures int) *kgo.Record {
	return &kgo.Record{
		Topic: q.cfg.Topic, Key: key, Value: body,
		Headers: []kgo.RecordHeader{
			{Key: kafkaTaskHeader, Value: []byte(taskID)},
			{Key: kafkaFailuresHeader, Value: []byte(strconv.Itoa(failures))},
		},
	}
}

// JoinsTransaction reports false: records are produced after the task row commits.
func (q *Kafka) JoinsTransaction() bool { return false }

// Enqueue produces m keyed by its group (the session id; the task id when it has none) and
// waits for the brokers' acknowledgement: an error when they do not take it within 30 seconds
// or ctx ends.
func (q *Kafka) Enqueue(ctx context.Context, _ pgx.Tx, m Message) error {
	key := m.GroupID
	if key == "" {
		key = m.TaskID
	}
	return q.prod.ProduceSync(ctx, q.record(m.TaskID, []byte(key), m.Body, 0)).FirstErr()
}

// Close closes the producer.
func (q *Kafka) Close() error {
	q.prod.Close()
	return nil
}

// Consume joins the consumer group and runs h on the group's records, at most consumers at
// once, until ctx ends; then it stops taking records, waits for running handlers, commits
// and leaves the group (its unfinished records go to the remaining members).
func (q *Kafka) Consume(ctx context.Context, consumers int, h Handler) error {
	consumers = max(consumers, 1)
	c := &kafkaConsumer{
		q: q, h: h, log: q.log,
		slots: make(chan struct{}, consumers),
		// Records held at once: polled and not yet committable (running, waiting for their
		// session's earlier records, or for a free slot). See Kafka on what a full one means.
		room:  make(chan struct{}, kafkaHeldRecords(consumers)),
		parts: map[kafkaPartition]*kafkaPart{},
		lines: map[string][]*kafkaItem{},
	}
	opts, err := q.cfg.clientOpts(q.log)
	if err != nil {
		return err
	}
	opts = append(opts,
		kgo.ConsumerGroup(q.cfg.GroupID), kgo.ConsumeTopics(q.cfg.Topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), // a new group takes what waits
		kgo.AutoCommitMarks(), kgo.AutoCommitInterval(time.Second),
		kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, revoked map[string][]int32) {
			c.forget(revoked)
			if err := cl.CommitMarkedOffsets(ctx); err != nil {
				q.log.Warn("kafka commit on revoke failed; records past the last commit will be delivered again", "err", err)
			}
		}),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, lost map[string][]int32) { c.forget(lost) }),
		kgo.FetchMaxWait(time.Second),
	)
	if q.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(q.cfg.SessionTimeout), kgo.HeartbeatInterval(max(q.cfg.SessionTimeout/10, 100*time.Millisecond)))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("queue: Kafka consumer: %w", err)
	}
	c.cl = cl
	defer func() {
		c.wg.Wait() // running handlers end; unstarted records stay uncommitted
		commitCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := cl.CommitMarkedOffsets(commitCtx); err != nil {
			q.log.Warn("kafka final commit failed; records past the last commit will be delivered again", "err", err)
		}
		cl.Close() // leaves the group
	}()
	for ctx.Err() == nil {
		n := reserve(ctx, c.room, cap(c.room))
		if n == 0 {
			break
		}
		fetches := cl.PollRecords(ctx, n)
		if fetches.IsClientClosed() {
			release(c.room, n)
			break
		}
		failed := false
		fetches.EachError(func(topic string, partition int32, err error) {
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				failed = true
				q.log.Warn("kafka fetch failed", "topic", topic, "partition", partition, "err", err)
			}
		})
		got := 0
		fetches.EachRecord(func(r *kgo.Record) {
			got++
			c.add(ctx, r)
		})
		release(c.room, n-got)
		if failed && got == 0 {
			sleepCtx(ctx, time.Second)
		}
	}
	return nil
}

// kafkaHeldRecords is how many polled records a member with consumers handlers holds before
// it stops fetching.
func kafkaHeldRecords(consumers int) int { return max(8*consumers, 128) }

// kafkaPartition names a partition.
type kafkaPartition struct {
	topic     string
	partition int32
}

// kafkaPart is what this member holds of one assigned partition.
type kafkaPart struct {
	gone    bool          // revoked or lost: no more commits; waiting records are dropped
	pending []*kgo.Record // polled and not yet committable, in offset order
	done    map[int64]bool
}

// kafkaItem is one polled record waiting in (or at the head of) its session's line.
type kafkaItem struct {
	rec  *kgo.Record
	part *kafkaPart
}

// kafkaConsumer is one Consume call: its group member and what it holds.
type kafkaConsumer struct {
	q     *Kafka
	h     Handler
	cl    *kgo.Client
	log   *slog.Logger
	slots chan struct{} // handlers running
	room  chan struct{} // records held
	wg    sync.WaitGroup

	mu    sync.Mutex
	parts map[kafkaPartition]*kafkaPart
	lines map[string][]*kafkaItem // by record key: the session's records, oldest first
}

// add puts a polled record in its session's line, starting the line when it has none.
func (c *kafkaConsumer) add(ctx context.Context, r *kgo.Record) {
	tp := kafkaPartition{r.Topic, r.Partition}
	c.mu.Lock()
	p := c.parts[tp]
	if p == nil {
		p = &kafkaPart{done: map[int64]bool{}}
		c.parts[tp] = p
	}
	p.pending = append(p.pending, r)
	key := string(r.Key)
	line, running := c.lines[key]
	c.lines[key] = append(line, &kafkaItem{rec: r, part: p})
	c.mu.Unlock()
	if !running {
		c.wg.Add(1)
		go c.runLine(ctx, key)
	}
}

// runLine works the records of one session in order until none is left.
func (c *kafkaConsumer) runLine(ctx context.Context, key string) {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		line := c.lines[key]
		if len(line) == 0 {
			delete(c.lines, key)
			c.mu.Unlock()
			return
		}
		it := line[0]
		c.mu.Unlock()
		c.work(ctx, it)
		c.mu.Lock()
		c.lines[key] = c.lines[key][1:]
		c.mu.Unlock()
		<-c.room
	}
}

// forget drops revoked or lost partitions: what is left of them belongs to their next owner.
func (c *kafkaConsumer) forget(parts map[string][]int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for topic, ps := range parts {
		for _, p := range ps {
			tp := kafkaPartition{topic, p}
			if part := c.parts[tp]; part != nil {
				part.gone = true
				delete(c.parts, tp)
			}
		}
	}
}

func (c *kafkaConsumer) gone(p *kafkaPart) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return p.gone
}

// work runs the handler on one record and settles it (see Kafka). A record it leaves
// unsettled — the member is stopping, or the partition moved — is not committed past: the
// partition's next owner delivers it again.
func (c *kafkaConsumer) work(ctx context.Context, it *kafkaItem) {
	r := it.rec
	var taskID string
	failures := 0
	for _, hd := range r.Headers {
		switch hd.Key {
		case kafkaTaskHeader:
			taskID = string(hd.Value)
		case kafkaFailuresHeader:
			failures, _ = strconv.Atoi(string(hd.Value))
		}
	}
	d := Delivery{Message: Message{TaskID: taskID, GroupID: string(r.Key), Body: r.Value}, ReceiveCount: failures + 1, InProgress: func() {}}
	for {
		if ctx.Err() != nil || c.gone(it.part) {
			return
		}
		select {
		case c.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		// Handlers run to completion even when a drain begins; ctx only stops new work.
		err := c.h(context.WithoutCancel(ctx), d)
		<-c.slots
		switch judge(err) {
		case acknowledge:
			c.settle(it)
			return
		case sendBehind:
			if !c.gone(it.part) && c.produceAgain(ctx, taskID, r, failures) {
				c.settle(it)
			}
			return
		case hold:
			if !sleepCtx(ctx, retryDelay(err)) {
				return
			}
		case redeliver:
			c.log.Warn("operation failed; it will be delivered again", "task_id", taskID, "receive_count", failures+1, "err", err)
			if sleepCtx(ctx, failedDeliveryPause) && !c.gone(it.part) && c.produceAgain(ctx, taskID, r, failures+1) {
				c.settle(it)
			}
			return
		}
	}
}

// produceAgain produces a copy of r with failures in its header, retrying until the brokers
// take it or ctx ends (false).
func (c *kafkaConsumer) produceAgain(ctx context.Context, taskID string, r *kgo.Record, failures int) bool {
	for {
		err := c.q.prod.ProduceSync(ctx, c.q.record(taskID, r.Key, r.Value, failures)).FirstErr()
		if err == nil {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		c.log.Warn("kafka: producing a record again failed; retrying", "task_id", taskID, "err", err)
		if !sleepCtx(ctx, time.Second) {
			return false
		}
	}
}

// settle marks it done and, when that completes a prefix of its partition's polled records,
// marks the partition's offset past that prefix for the next commit.
func (c *kafkaConsumer) settle(it *kafkaItem) {
	c.mu.Lock()
	p := it.part
	if p.gone {
		c.mu.Unlock()
		return
	}
	p.done[it.rec.Offset] = true
	var last *kgo.Record
	for len(p.pending) > 0 && p.done[p.pending[0].Offset] {
		last = p.pending[0]
		delete(p.done, last.Offset)
		p.pending = p.pending[1:]
	}
	c.mu.Unlock()
	if last != nil {
		c.cl.MarkCommitRecords(last)
	}
}

// kafkaLogger sends franz-go's warnings and errors to slog.
type kafkaLogger struct{ log *slog.Logger }

func (l kafkaLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l kafkaLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	lv := slog.LevelWarn
	if level == kgo.LogLevelError {
		lv = slog.LevelError
	}
	l.log.Log(context.Background(), lv, "kafka: "+msg, keyvals...)
}
