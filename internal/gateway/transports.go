package gateway

import (
	"context"
	"log/slog"
	"slices"
	"strings"

	"github.com/sandgate/sandgate/internal/broker/queue"
	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/store/postgres"
)

// transportBuilder builds one queue transport from the configuration's
// sandbox.broker.queue block (defaults applied and validated by config).
type transportBuilder func(ctx context.Context, cfg *config.Config, st *postgres.Store, log *slog.Logger) (queue.Transport, error)

// transports are the queue transports this binary serves, by sandbox.broker.queue.type: the
// one registry both `gateway config validate` and `serve`/`worker` consult (Check).
var transports = map[string]transportBuilder{
	config.QueuePostgres: func(ctx context.Context, cfg *config.Config, st *postgres.Store, log *slog.Logger) (queue.Transport, error) {
		return queue.NewPostgres(ctx, st.Pool(), cfg.Sandbox.Broker.Queue.RescueAfter.D(), log)
	},
	config.QueueNATS: func(ctx context.Context, cfg *config.Config, _ *postgres.Store, log *slog.Logger) (queue.Transport, error) {
		n := cfg.Sandbox.Broker.Queue.NATS
		return queue.NewNATS(ctx, queue.NATSConfig{URL: n.URL, Stream: n.Stream, SubjectPrefix: n.SubjectPrefix, AckWait: n.AckWait.D()}, log)
	},
	config.QueueKafka: func(ctx context.Context, cfg *config.Config, _ *postgres.Store, log *slog.Logger) (queue.Transport, error) {
		return queue.NewKafka(ctx, kafkaConfig(cfg.Sandbox.Broker), log)
	},
	config.QueueSQS: func(ctx context.Context, cfg *config.Config, _ *postgres.Store, log *slog.Logger) (queue.Transport, error) {
		return queue.NewSQS(ctx, sqsConfig(cfg.Sandbox.Broker), log)
	},
	config.InMemory: func(context.Context, *config.Config, *postgres.Store, *slog.Logger) (queue.Transport, error) {
		return queue.NewInMemory(), nil
	},
}

// Transports returns the names of the queue transports this binary serves, sorted.
func Transports() []string {
	names := make([]string, 0, len(transports))
	for n := range transports {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// kafkaRecordRoom is what a record adds to its envelope (key, headers, framing).
const kafkaRecordRoom = 16 << 10

// kafkaDefaultBatchBytes is franz-go's default ProducerBatchMaxBytes.
const kafkaDefaultBatchBytes = 1_000_012

func kafkaConfig(b config.Broker) queue.KafkaConfig {
	k := b.Queue.Kafka
	c := queue.KafkaConfig{
		Brokers: k.Brokers, Topic: k.InputTopic, Partitions: k.Partitions, GroupID: k.GroupID,
		SessionTimeout: k.SessionTimeout.D(),
		TLS:            k.TLS.Enabled, TLSCAFile: k.TLS.CAFile,
		SASLMechanism: k.SASL.Mechanism, SASLUser: k.SASL.Username, SASLPassword: k.SASL.Password,
	}
	// The producer must take the largest envelope a gateway accepts.
	if need := b.InlinePayloadMaxBytes + kafkaRecordRoom; need > kafkaDefaultBatchBytes {
		c.MaxRecordBytes = need
	}
	return c
}

func sqsConfig(b config.Broker) queue.SQSConfig {
	s := b.Queue.SQS
	return queue.SQSConfig{
		QueueURL: s.InputURL, DeadLetterURL: s.DeadLetterURL, Region: s.Region, EndpointURL: s.EndpointURL,
		VisibilityTimeout: s.VisibilityTimeout.D(), WaitTime: s.WaitTime.D(), MaxBodyBytes: b.InlinePayloadMaxBytes,
	}
}

// newTransport builds the queue transport named by sandbox.broker.queue.type.
func newTransport(ctx context.Context, cfg *config.Config, st *postgres.Store, log *slog.Logger) (queue.Transport, error) {
	q := cfg.Sandbox.Broker.Queue
	build, ok := transports[q.Type]
	if !ok {
		return nil, unservedTransport(q.Type)
	}
	return build(ctx, cfg, st, log)
}

func unservedTransport(name string) error {
	return fault.New(fault.Config, "sandbox.broker.queue.type: this gateway does not serve the queue transport '%s'; served transports: [%s]",
		name, strings.Join(Transports(), ", "))
}

// CheckTransport refuses a queue-flavor configuration whose transport this binary does not
// serve, before anything connects.
//
// Errors: fault.Config naming the transport and the served ones.
func CheckTransport(cfg *config.Config) error {
	b := cfg.Sandbox.Broker
	if b.Flavor != config.FlavorQueue || b.Queue == nil {
		return nil
	}
	if _, ok := transports[b.Queue.Type]; !ok {
		return unservedTransport(b.Queue.Type)
	}
	return nil
}

// Check is what `gateway config validate`, `serve` and `worker` require of a loaded
// configuration before anything connects: every profile's provider type is one reg serves
// (CheckProviders), every provider block decodes and passes its backend's checks (as
// LoadConfig reports them) and the queue transport is one this binary serves
// (CheckTransport). The commands call this one function, so they accept and refuse the same
// names.
func Check(cfg *config.Config, reg *providers.Registry) error {
	_, err := check(cfg, reg)
	return err
}

// check is Check, returning the decoded blocks New builds the providers from.
func check(cfg *config.Config, reg *providers.Registry) (decoded, error) {
	if err := CheckProviders(cfg, reg); err != nil {
		return decoded{}, err
	}
	blocks, err := checkBlocks(cfg, reg)
	if err != nil {
		return decoded{}, err
	}
	return blocks, CheckTransport(cfg)
}
