package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/awsfake"
	"github.com/sandgate/sandgate/internal/broker/queue"
)

var sqsQueues atomic.Int64

// sqsEnv is the AWS fake with a FIFO input queue (and, with redrive > 0, a FIFO dead-letter
// queue that takes messages received that many times).
type sqsEnv struct {
	fake              *awsfake.Server
	input, deadLetter string // queue names
	cfg               queue.SQSConfig
}

func newSQSEnv(t *testing.T, fake *awsfake.Server, redrive int) *sqsEnv {
	t.Helper()
	n := sqsQueues.Add(1)
	e := &sqsEnv{fake: fake, input: fmt.Sprintf("sandgate-%d.fifo", n)}
	attrs := map[string]string{"FifoQueue": "true"}
	if redrive > 0 {
		e.deadLetter = fmt.Sprintf("sandgate-%d-dead.fifo", n)
		dl, err := fake.CreateSQSQueue(e.deadLetter, map[string]string{"FifoQueue": "true"})
		require.NoError(t, err)
		e.cfg.DeadLetterURL = dl
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:%s:%s:%s","maxReceiveCount":%d}`, fake.Region, fake.Account, e.deadLetter, redrive)
	}
	url, err := fake.CreateSQSQueue(e.input, attrs)
	require.NoError(t, err)
	e.cfg.QueueURL = url
	e.cfg.Region, e.cfg.EndpointURL, e.cfg.Credentials = fake.Region, fake.URL, fake.GatewayCredentials()
	e.cfg.VisibilityTimeout, e.cfg.WaitTime, e.cfg.MaxBodyBytes = 3*time.Second, time.Second, 131072
	return e
}

func (e *sqsEnv) open(t *testing.T) *queue.SQS {
	t.Helper()
	tr, err := queue.NewSQS(context.Background(), e.cfg, slog.Default())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

// client is the real SQS client, signing with the fake's gateway key.
func (e *sqsEnv) client() *sqs.Client {
	return sqs.NewFromConfig(e.fake.Config(e.fake.GatewayCredentials()), func(o *sqs.Options) { o.BaseEndpoint = aws.String(e.fake.URL) })
}

func TestSQSTransport(t *testing.T) {
	t.Parallel()
	fake := awsfake.New(t)
	runOrderedSuite(t, func(t *testing.T) queue.Transport { return newSQSEnv(t, fake, 0).open(t) })
}

func TestSQSSendsFIFOMessages(t *testing.T) {
	t.Parallel()
	e := newSQSEnv(t, awsfake.New(t), 0)
	tr := e.open(t)
	enqueue(t, tr, "t1", "session-1")
	enqueue(t, tr, "t1", "session-1") // a second send of one task within five minutes
	enqueue(t, tr, "t2", "")
	msgs := e.fake.SQSMessages(e.input)
	require.Len(t, msgs, 2, "SQS dropped the duplicate by its deduplication id")
	assert.Equal(t, "session-1", msgs[0].GroupID)
	assert.Equal(t, "t1", msgs[0].DeduplicationID)
	assert.Equal(t, "t1", msgs[0].Attributes["sandgate.task_id"])
	assert.Equal(t, "t2", msgs[1].GroupID, "without a session the task is its own group")
	for _, c := range e.fake.CallsTo("SendMessage") {
		require.NotNil(t, c.Identity)
		assert.Equal(t, awsfake.GatewayAccessKeyID, c.Identity.AccessKeyID, "signed with the configured credentials")
	}
}

// A worker that dies (here: one that received the message and never answers) loses it after
// the visibility timeout, and the next delivery counts the lost one.
func TestSQSDeadWorkersMessageIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	e := newSQSEnv(t, awsfake.New(t), 0)
	tr := e.open(t)
	enqueue(t, tr, "t1", "s1")
	out, err := e.client().ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.cfg.QueueURL), VisibilityTimeout: 1})
	require.NoError(t, err)
	require.Len(t, out.Messages, 1)

	s := newSeen()
	consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error { s.add(d); return nil })
	d := s.next(t)
	assert.Equal(t, "t1", d.TaskID)
	assert.Equal(t, 2, d.ReceiveCount)
	require.Eventually(t, func() bool { return len(e.fake.SQSMessages(e.input)) == 0 }, within, 50*time.Millisecond, "deleted once handled")
}

// Heartbeats keep a long handler's message invisible well past the visibility timeout.
func TestSQSHeartbeatsKeepARunningMessage(t *testing.T) {
	t.Parallel()
	e := newSQSEnv(t, awsfake.New(t), 0)
	e.cfg.VisibilityTimeout = time.Second
	tr := e.open(t)
	release := make(chan struct{})
	s := newSeen()
	consume(t, tr, 2, func(_ context.Context, d queue.Delivery) error {
		s.add(d)
		<-release
		return nil
	})
	enqueue(t, tr, "long", "s1")
	assert.Equal(t, 1, s.next(t).ReceiveCount)
	s.none(t, 3500*time.Millisecond) // three visibility timeouts
	close(release)
	require.Eventually(t, func() bool { return len(e.fake.SQSMessages(e.input)) == 0 }, within, 50*time.Millisecond)
	assert.NotEmpty(t, e.fake.CallsTo("ChangeMessageVisibility"))
}

// SQS moves a message received maxReceiveCount times to the dead-letter queue; the worker
// reads it there and hands it to the handler as dead-lettered, then deletes it.
func TestSQSDeadLetters(t *testing.T) {
	t.Parallel()
	e := newSQSEnv(t, awsfake.New(t), 2)
	tr := e.open(t)
	s := newSeen()
	consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error {
		s.add(d)
		if d.DeadLettered {
			return nil
		}
		return errors.New("handler failed")
	})
	enqueue(t, tr, "t1", "s1")
	for want := 1; want <= 2; want++ {
		d := s.next(t)
		require.False(t, d.DeadLettered)
		require.Equal(t, want, d.ReceiveCount)
	}
	d := s.next(t)
	assert.True(t, d.DeadLettered)
	assert.Equal(t, "t1", d.TaskID)
	assert.Equal(t, 2, d.ReceiveCount, "the redrive policy's count")
	require.Eventually(t, func() bool {
		return len(e.fake.SQSMessages(e.input)) == 0 && len(e.fake.SQSMessages(e.deadLetter)) == 0
	}, within, 50*time.Millisecond)
}

func TestSQSRefusesQueuesThatCannotWork(t *testing.T) {
	t.Parallel()
	fake := awsfake.New(t)
	open := func(cfg queue.SQSConfig) error {
		_, err := queue.NewSQS(context.Background(), cfg, slog.Default())
		return err
	}

	standard, err := fake.CreateSQSQueue("standard", nil)
	require.NoError(t, err)
	e := newSQSEnv(t, fake, 0)
	cfg := e.cfg
	cfg.QueueURL = standard
	assert.ErrorContains(t, open(cfg), "is not a FIFO queue")

	cfg = e.cfg
	cfg.QueueURL = fake.URL + "/" + fake.Account + "/missing.fifo"
	var missing *types.QueueDoesNotExist
	assert.ErrorAs(t, open(cfg), &missing)

	small, err := fake.CreateSQSQueue("small.fifo", map[string]string{"FifoQueue": "true", "MaximumMessageSize": "65536"})
	require.NoError(t, err)
	cfg = e.cfg
	cfg.QueueURL = small
	err = open(cfg)
	assert.ErrorContains(t, err, "at most 65536 bytes")
	assert.ErrorContains(t, err, "inline_payload_max_bytes=131072")

	red := newSQSEnv(t, fake, 3)
	cfg = red.cfg
	cfg.DeadLetterURL = ""
	assert.ErrorContains(t, open(cfg), "dead_letter_url is not set")
	cfg.DeadLetterURL = e.cfg.QueueURL
	assert.ErrorContains(t, open(cfg), "redrive policy of")

	cfg = e.cfg
	cfg.Credentials = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKIAUNKNOWN", SecretAccessKey: "x"}, nil
	})
	assert.ErrorContains(t, open(cfg), "UnrecognizedClientException")
}
