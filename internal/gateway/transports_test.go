package gateway

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// Every transport name the configuration accepts is one this binary serves, and no other:
// `config validate` (config's table) and serve (this registry) cannot disagree.
func TestTransportRegistryServesEveryConfiguredName(t *testing.T) {
	want := config.QueueTypes()
	slices.Sort(want)
	require.Equal(t, want, Transports())
}

// queueConfig is a queue-flavor configuration on transport typ whose database is nowhere.
func queueConfig(typ string) *config.Config {
	cfg := &config.Config{}
	cfg.Database.URL = "postgres://nobody@127.0.0.1:1/none?connect_timeout=30"
	cfg.Auth.Issuers = []config.Issuer{{URL: "https://issuer.example", Audiences: []string{"sandgate"}}}
	cfg.Sandbox.Profiles = map[string]config.Profile{"default": {Type: local.TypeName}}
	cfg.Sandbox.Broker.Flavor = config.FlavorQueue
	cfg.Sandbox.Broker.Queue = &config.Queue{Type: typ}
	cfg.Sandbox.Broker.ResponseStore = &config.ResponseStore{}
	cfg.ApplyDefaults()
	return cfg
}

// A transport this binary does not serve (a configuration built around config's checks) is
// refused before anything connects, naming the served ones.
func TestNewRefusesAnUnservedTransportBeforeConnecting(t *testing.T) {
	cfg := queueConfig("rabbitmq")
	start := time.Now()
	_, err := New(context.Background(), cfg, Options{})
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "no connection was tried")
	assert.Equal(t, fault.Config, fault.KindOf(err))
	assert.Contains(t, err.Error(), "'rabbitmq'")
	assert.Contains(t, err.Error(), "served transports: [in_memory, kafka, nats, postgres, sqs]")

	require.NoError(t, Check(queueConfig(config.QueueKafka), Builtin()))
	thread := queueConfig("rabbitmq")
	thread.Sandbox.Broker.Flavor = config.FlavorThread
	require.NoError(t, CheckTransport(thread), "only the queue flavor has a transport")
}

// The queue blocks map onto the transports' own options.
func TestTransportOptions(t *testing.T) {
	cfg := queueConfig(config.QueueKafka)
	q := cfg.Sandbox.Broker.Queue
	q.Kafka.Brokers = []string{"k1:9092", "k2:9092"}
	q.Kafka.TLS = config.KafkaTLS{Enabled: true, CAFile: "/ca.pem"}
	q.Kafka.SASL = config.KafkaSASL{Mechanism: "PLAIN", Username: "u", Password: "p"}
	k := kafkaConfig(cfg.Sandbox.Broker)
	assert.Equal(t, []string{"k1:9092", "k2:9092"}, k.Brokers)
	assert.Equal(t, "sandgate-tasks", k.Topic)
	assert.Equal(t, 12, k.Partitions)
	assert.Equal(t, "sandgate-workers", k.GroupID)
	assert.Equal(t, 45*time.Second, k.SessionTimeout)
	assert.True(t, k.TLS)
	assert.Equal(t, "/ca.pem", k.TLSCAFile)
	assert.Equal(t, "PLAIN", k.SASLMechanism)
	assert.Zero(t, k.MaxRecordBytes, "the default 128 KiB envelopes fit franz-go's default batch")
	cfg.Sandbox.Broker.InlinePayloadMaxBytes = 4 << 20
	assert.Equal(t, 4<<20+kafkaRecordRoom, kafkaConfig(cfg.Sandbox.Broker).MaxRecordBytes, "the producer takes the largest envelope")

	cfg = queueConfig(config.QueueSQS)
	cfg.Sandbox.Broker.Queue.SQS.InputURL = "https://sqs.eu-west-1.amazonaws.com/1/in.fifo"
	cfg.Sandbox.Broker.Queue.SQS.DeadLetterURL = "https://sqs.eu-west-1.amazonaws.com/1/dead.fifo"
	s := sqsConfig(cfg.Sandbox.Broker)
	assert.Equal(t, "https://sqs.eu-west-1.amazonaws.com/1/in.fifo", s.QueueURL)
	assert.Equal(t, "https://sqs.eu-west-1.amazonaws.com/1/dead.fifo", s.DeadLetterURL)
	assert.Equal(t, 5*time.Minute, s.VisibilityTimeout)
	assert.Equal(t, 10*time.Second, s.WaitTime)
	assert.Equal(t, 131072, s.MaxBodyBytes)
}
