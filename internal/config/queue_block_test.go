package config

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// queueOf makes c a queue-flavor configuration on transport typ, edited by edit.
func queueOf(typ string, edit func(q *Queue)) func(c *Config) {
	return func(c *Config) {
		c.Sandbox.Broker.Flavor = FlavorQueue
		c.Sandbox.Broker.ResponseStore = &ResponseStore{Type: QueuePostgres}
		q := &Queue{Type: typ}
		c.Sandbox.Broker.Queue = q
		c.ApplyDefaults()
		if typ == QueueSQS {
			q.SQS.InputURL = "https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate.fifo"
		}
		if edit != nil {
			edit(q)
		}
	}
}

func TestKafkaBlock(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, `
sandbox:
  broker:
    flavor: queue
    queue:
      type: kafka
      kafka:
        brokers: [kafka-1:9092, kafka-2:9092]
        input_topic: sandbox-input
        group_id: agent-kernel-sandbox
        tls: {enabled: true}
        sasl: {mechanism: SCRAM-SHA-512, username: gw, password: s3cret}
    response_store: {type: postgres}
`, "SANDGATE_SANDBOX__BROKER__QUEUE__KAFKA__SESSION_TIMEOUT=10s")
	k := c.Sandbox.Broker.Queue.Kafka
	require.Equal(t, []string{"kafka-1:9092", "kafka-2:9092"}, k.Brokers)
	require.Equal(t, "sandbox-input", k.InputTopic)
	require.Equal(t, "agent-kernel-sandbox", k.GroupID)
	require.Equal(t, 12, k.Partitions, "default")
	require.Equal(t, Duration(10*time.Second), k.SessionTimeout, "from the environment")
	require.True(t, k.TLS.Enabled)
	require.Equal(t, "SCRAM-SHA-512", k.SASL.Mechanism)

	out, err := c.Redacted().YAML()
	require.NoError(t, err)
	require.NotContains(t, string(out), "s3cret", "the SASL password is a secret")

	d := validConfig(t)
	queueOf(QueueKafka, nil)(d)
	require.NoError(t, d.Validate(), "the defaults make a valid kafka block")
	require.Equal(t, []string{"127.0.0.1:9092"}, d.Sandbox.Broker.Queue.Kafka.Brokers)
	require.Equal(t, "sandgate-tasks", d.Sandbox.Broker.Queue.Kafka.InputTopic)
	require.Equal(t, "sandgate-workers", d.Sandbox.Broker.Queue.Kafka.GroupID)
	require.Equal(t, Duration(45*time.Second), d.Sandbox.Broker.Queue.Kafka.SessionTimeout)

	const key = "sandbox.broker.queue.kafka"
	for name, tc := range map[string]struct {
		edit  func(q *Queue)
		key   string
		words []string
	}{
		"broker without port": {func(q *Queue) { q.Kafka.Brokers = []string{"kafka"} }, key + ".brokers[0]", []string{"host:port"}},
		"topic":               {func(q *Queue) { q.Kafka.InputTopic = "tasks/input" }, key + ".input_topic", []string{"topic name"}},
		"group":               {func(q *Queue) { q.Kafka.GroupID = " " }, key + ".group_id", []string{"empty"}},
		"partitions":          {func(q *Queue) { q.Kafka.Partitions = -1 }, key + ".partitions", []string{"at least 1"}},
		"session timeout":     {func(q *Queue) { q.Kafka.SessionTimeout = Duration(time.Millisecond) }, key + ".session_timeout", []string{"1s"}},
		"ca file without tls": {func(q *Queue) { q.Kafka.TLS.CAFile = "/ca.pem" }, key + ".tls.ca_file", []string{"tls.enabled"}},
		"sasl mechanism":      {func(q *Queue) { q.Kafka.SASL = KafkaSASL{Mechanism: "GSSAPI", Username: "u", Password: "p"} }, key + ".sasl.mechanism", []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}},
		"sasl without secret": {func(q *Queue) { q.Kafka.SASL = KafkaSASL{Mechanism: "PLAIN", Username: "u"} }, key + ".sasl", []string{"username and password"}},
		"sasl user only":      {func(q *Queue) { q.Kafka.SASL = KafkaSASL{Username: "u", Password: "p"} }, key + ".sasl.mechanism", []string{"required"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			queueOf(QueueKafka, tc.edit)(c)
			requireProblem(t, c.Validate(), tc.key, tc.words...)
		})
	}
}

func TestSQSBlock(t *testing.T) {
	t.Parallel()
	c := loadYAML(t, `
sandbox:
  broker:
    flavor: queue
    queue:
      type: sqs
      sqs:
        input_url: https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate.fifo
        dead_letter_url: https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate-dead.fifo
        endpoint_url: http://localhost:4566
    response_store: {type: postgres}
`)
	s := c.Sandbox.Broker.Queue.SQS
	require.Equal(t, "https://sqs.eu-west-1.amazonaws.com/123456789012/sandgate-dead.fifo", s.DeadLetterURL)
	require.Equal(t, "http://localhost:4566", s.EndpointURL)
	require.Equal(t, Duration(5*time.Minute), s.VisibilityTimeout, "default")
	require.Equal(t, Duration(10*time.Second), s.WaitTime, "default")

	const key = "sandbox.broker.queue.sqs"
	for name, tc := range map[string]struct {
		edit  func(q *Queue)
		key   string
		words []string
	}{
		"no input url":        {func(q *Queue) { q.SQS.InputURL = "" }, key + ".input_url", []string{"required", "FIFO"}},
		"relative url":        {func(q *Queue) { q.SQS.InputURL = "sandgate.fifo" }, key + ".input_url", []string{"absolute"}},
		"standard queue":      {func(q *Queue) { q.SQS.InputURL = "https://sqs.eu-west-1.amazonaws.com/1/sandgate" }, key + ".input_url", []string{".fifo"}},
		"standard dead queue": {func(q *Queue) { q.SQS.DeadLetterURL = "https://sqs.eu-west-1.amazonaws.com/1/dead" }, key + ".dead_letter_url", []string{".fifo"}},
		"endpoint":            {func(q *Queue) { q.SQS.EndpointURL = "localhost:4566" }, key + ".endpoint_url", []string{"http"}},
		"visibility too long": {func(q *Queue) { q.SQS.VisibilityTimeout = Duration(13 * time.Hour) }, key + ".visibility_timeout", []string{"12h"}},
		"wait too long":       {func(q *Queue) { q.SQS.WaitTime = Duration(30 * time.Second) }, key + ".wait_time", []string{"20s"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := validConfig(t)
			queueOf(QueueSQS, tc.edit)(c)
			requireProblem(t, c.Validate(), tc.key, tc.words...)
		})
	}
}

// The seed's warning made a check: the visibility timeout must exceed the longest execution
// the queue carries, and the problem names both values.
func TestSQSVisibilityAboveTheLongestTimeout(t *testing.T) {
	t.Parallel()
	c := validConfig(t)
	queueOf(QueueSQS, func(q *Queue) { q.SQS.VisibilityTimeout = Duration(2 * time.Minute) })(c)
	profile(func(p *Profile) { p.Policy.Timeout = ptr(600.0) })(c)
	err := c.Validate()
	requireProblem(t, err, "sandbox.broker.queue.sqs.visibility_timeout", "2m is not above", "600s", "profile 'default'", "raise visibility_timeout")

	// Equal is not above.
	profile(func(p *Profile) { p.Policy.Timeout = ptr(120.0) })(c)
	requireProblem(t, c.Validate(), "sandbox.broker.queue.sqs.visibility_timeout", "120s")

	// A lower worker_timeout_ceiling bounds what runs on the queue.
	profile(func(p *Profile) { p.Policy.Timeout = ptr(600.0) })(c)
	c.Sandbox.Broker.WorkerTimeoutCeiling = ptr(90.0)
	require.NoError(t, c.Validate())
	c.Sandbox.Broker.WorkerTimeoutCeiling = ptr(300.0)
	requireProblem(t, c.Validate(), "sandbox.broker.queue.sqs.visibility_timeout", "worker_timeout_ceiling is 300s")

	// The default 5m covers the default policy timeout (120s).
	d := validConfig(t)
	queueOf(QueueSQS, nil)(d)
	require.NoError(t, d.Validate())
}

func TestQueueTypesAreListed(t *testing.T) {
	t.Parallel()
	c := validConfig(t)
	queueOf("rabbitmq", nil)(c)
	requireProblem(t, c.Validate(), "sandbox.broker.queue.type", `"rabbitmq"`, strings.Join(QueueTypes(), ", "))
	require.Equal(t, []string{"postgres", "nats", "kafka", "sqs", "in_memory"}, QueueTypes())
}
