package queue_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sandgate/sandgate/internal/broker/queue"
)

// kafkaCluster starts an in-process Kafka (kfake: the real wire protocol, consumer groups
// included) for one test.
func kafkaCluster(t *testing.T, opts ...kfake.Opt) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

var kafkaTopics atomic.Int64

// openKafka returns a transport on a topic and consumer group of its own.
func openKafka(t *testing.T, c *kfake.Cluster, mutate ...func(*queue.KafkaConfig)) *queue.Kafka {
	t.Helper()
	n := kafkaTopics.Add(1)
	cfg := queue.KafkaConfig{
		Brokers: c.ListenAddrs(), Topic: fmt.Sprintf("sandgate-tasks-%d", n), Partitions: 3,
		GroupID: fmt.Sprintf("sandgate-workers-%d", n), SessionTimeout: 2 * time.Second,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	tr, err := queue.NewKafka(context.Background(), cfg, slog.Default())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestKafkaTransport(t *testing.T) {
	t.Parallel()
	c := kafkaCluster(t)
	runOrderedSuite(t, func(t *testing.T) queue.Transport { return openKafka(t, c) })
}

// TestKafkaLive runs the same suite against a real Kafka: SANDGATE_KAFKA_BROKERS=host:port[,…]
// (optional SANDGATE_KAFKA_TLS=1, SANDGATE_KAFKA_TLS_CA_FILE, SANDGATE_KAFKA_SASL_MECHANISM,
// SANDGATE_KAFKA_SASL_USER, SANDGATE_KAFKA_SASL_PASSWORD). It creates (and deletes) topics
// named sandgate-e2e-*, so the principal needs CreateTopics and DeleteTopics.
func TestKafkaLive(t *testing.T) {
	brokers := os.Getenv("SANDGATE_KAFKA_BROKERS")
	if brokers == "" {
		t.Skip("set SANDGATE_KAFKA_BROKERS to run against a real Kafka")
	}
	stamp := time.Now().Unix()
	runOrderedSuite(t, func(t *testing.T) queue.Transport {
		n := kafkaTopics.Add(1)
		cfg := queue.KafkaConfig{
			Brokers: strings.Split(brokers, ","), Topic: fmt.Sprintf("sandgate-e2e-%d-%d", stamp, n), Partitions: 3,
			GroupID: fmt.Sprintf("sandgate-e2e-%d-%d", stamp, n), SessionTimeout: 10 * time.Second,
			TLS: os.Getenv("SANDGATE_KAFKA_TLS") == "1", TLSCAFile: os.Getenv("SANDGATE_KAFKA_TLS_CA_FILE"),
			SASLMechanism: os.Getenv("SANDGATE_KAFKA_SASL_MECHANISM"), SASLUser: os.Getenv("SANDGATE_KAFKA_SASL_USER"), SASLPassword: os.Getenv("SANDGATE_KAFKA_SASL_PASSWORD"),
		}
		tr, err := queue.NewKafka(context.Background(), cfg, slog.Default())
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = tr.Close()
			if cfg.TLS || cfg.SASLMechanism != "" {
				t.Logf("topic %s is left behind: delete it", cfg.Topic)
				return
			}
			if cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.Brokers...)); err == nil {
				_, _ = kadm.NewClient(cl).DeleteTopics(context.Background(), cfg.Topic)
				cl.Close()
			}
		})
		return tr
	})
}

func TestKafkaCreatesItsTopicKeyedBySession(t *testing.T) {
	t.Parallel()
	c := kafkaCluster(t)
	tr := openKafka(t, c, func(cfg *queue.KafkaConfig) { cfg.Partitions = 7 })
	for i := range 6 {
		enqueue(t, tr, fmt.Sprintf("t%d", i), "session-1")
	}
	enqueue(t, tr, "other", "session-2")

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	topics, err := kadm.NewClient(cl).ListTopics(ctx)
	require.NoError(t, err)
	var topic string
	for name, d := range topics {
		if len(d.Partitions) == 7 {
			topic = name
		}
	}
	require.NotEmpty(t, topic, "the transport created its topic with the configured partitions: %v", topics.Names())

	// Every record of one session sits on one partition, keyed by the session id, with the
	// task id and a zero failure count in its headers.
	reader, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer reader.Close()
	partitions := map[string]map[int32]bool{}
	for got := 0; got < 7; {
		fs := reader.PollFetches(ctx)
		require.NoError(t, ctx.Err())
		fs.EachRecord(func(r *kgo.Record) {
			got++
			key := string(r.Key)
			if partitions[key] == nil {
				partitions[key] = map[int32]bool{}
			}
			partitions[key][r.Partition] = true
			headers := map[string]string{}
			for _, h := range r.Headers {
				headers[h.Key] = string(h.Value)
			}
			assert.True(t, strings.HasPrefix(headers["sandgate-task-id"], "t") || headers["sandgate-task-id"] == "other")
			assert.Equal(t, "0", headers["sandgate-failed-deliveries"])
		})
	}
	assert.Len(t, partitions["session-1"], 1, "one session, one partition")
	assert.Len(t, partitions["session-2"], 1)
}

func TestKafkaSASL(t *testing.T) {
	t.Parallel()
	c := kafkaCluster(t, kfake.EnableSASL(), kfake.Superuser("PLAIN", "gateway", "s3cret"))
	_, err := queue.NewKafka(context.Background(), queue.KafkaConfig{
		Brokers: c.ListenAddrs(), Topic: "sasl-tasks", Partitions: 1, GroupID: "g",
		SASLMechanism: "PLAIN", SASLUser: "gateway", SASLPassword: "wrong",
	}, slog.Default())
	require.Error(t, err, "a wrong password is refused")

	tr := openKafka(t, c, func(cfg *queue.KafkaConfig) {
		cfg.SASLMechanism, cfg.SASLUser, cfg.SASLPassword = "PLAIN", "gateway", "s3cret"
	})
	s := newSeen()
	consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error { s.add(d); return nil })
	enqueue(t, tr, "t1", "s1")
	assert.Equal(t, "t1", s.next(t).TaskID)
}

func TestKafkaUnreachable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := queue.NewKafka(ctx, queue.KafkaConfig{Brokers: []string{"127.0.0.1:1"}, Topic: "t", Partitions: 1, GroupID: "g"}, slog.Default())
	require.ErrorContains(t, err, "reach Kafka at 127.0.0.1:1")
}

// A second member takes over the partitions of one that stops, resuming after the last
// record the first one finished.
func TestKafkaRebalanceResumesAtTheCommit(t *testing.T) {
	t.Parallel()
	c := kafkaCluster(t)
	tr := openKafka(t, c)
	first := newSeen()
	c1 := consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error { first.add(d); return nil })
	for i := range 3 {
		enqueue(t, tr, fmt.Sprintf("t%d", i), "s")
	}
	for range 3 {
		first.next(t)
	}
	c1.stop(t)
	enqueue(t, tr, "t3", "s")
	second := newSeen()
	consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error { second.add(d); return nil })
	assert.Equal(t, "t3", second.next(t).TaskID, "finished records are not delivered again")
	second.none(t, 2*time.Second)
}
