package queue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/awsfake"
	"github.com/sandgate/sandgate/internal/broker/queue"
)

var sqsQueues atomic.Int64

// sqsBackend is where the tests' queues live: the AWS fake, or (TestSQSLive) real SQS.
type sqsBackend struct {
	fake   *awsfake.Server // nil on real SQS
	api    *sqs.Client
	base   queue.SQSConfig // region, endpoint and credentials of the transports
	prefix string          // of the queue names
}

func fakeSQS(t *testing.T) *sqsBackend {
	fake := awsfake.New(t)
	return &sqsBackend{
		fake:   fake,
		api:    sqs.NewFromConfig(fake.Config(fake.GatewayCredentials()), func(o *sqs.Options) { o.BaseEndpoint = aws.String(fake.URL) }),
		base:   queue.SQSConfig{Region: fake.Region, EndpointURL: fake.URL, Credentials: fake.GatewayCredentials()},
		prefix: "sandgate-",
	}
}

// createQueue creates a FIFO queue (deleted after the test) and returns its URL and ARN.
func (b *sqsBackend) createQueue(t *testing.T, name string, attrs map[string]string) (string, string) {
	t.Helper()
	ctx := context.Background()
	all := map[string]string{"FifoQueue": "true"}
	for k, v := range attrs {
		all[k] = v
	}
	out, err := b.api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: all})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.api.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}) })
	a, err := b.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	return aws.ToString(out.QueueUrl), a.Attributes["QueueArn"]
}

// sqsEnv is a FIFO input queue (and, with redrive > 0, a FIFO dead-letter queue that takes
// messages received that many times) and the transport configuration for them.
type sqsEnv struct {
	b   *sqsBackend
	cfg queue.SQSConfig
}

func (b *sqsBackend) env(t *testing.T, redrive int) *sqsEnv {
	t.Helper()
	n := sqsQueues.Add(1)
	e := &sqsEnv{b: b, cfg: b.base}
	attrs := map[string]string{}
	if redrive > 0 {
		var arn string
		e.cfg.DeadLetterURL, arn = b.createQueue(t, fmt.Sprintf("%s%d-dead.fifo", b.prefix, n), nil)
		attrs["RedrivePolicy"] = fmt.Sprintf(`{"deadLetterTargetArn":%q,"maxReceiveCount":%d}`, arn, redrive)
	}
	e.cfg.QueueURL, _ = b.createQueue(t, fmt.Sprintf("%s%d.fifo", b.prefix, n), attrs)
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

// left is how many messages the queue at url holds, visible or in flight.
func (e *sqsEnv) left(t *testing.T, url string) int {
	t.Helper()
	a, err := e.b.api.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	require.NoError(t, err)
	visible, _ := strconv.Atoi(a.Attributes["ApproximateNumberOfMessages"])
	inFlight, _ := strconv.Atoi(a.Attributes["ApproximateNumberOfMessagesNotVisible"])
	return visible + inFlight
}

// runSQSSuite is what the sqs transport must do, on the fake or on real SQS.
func runSQSSuite(t *testing.T, b *sqsBackend) {
	t.Run("ordered", func(t *testing.T) {
		runOrderedSuite(t, func(t *testing.T) queue.Transport { return b.env(t, 0).open(t) })
	})

	// A worker that dies (here: one that received the message and never answers) loses it
	// after the visibility timeout, and the next delivery counts the lost one.
	t.Run("a_dead_workers_message_is_delivered_again", func(t *testing.T) {
		t.Parallel()
		e := b.env(t, 0)
		tr := e.open(t)
		enqueue(t, tr, "t1", "s1")
		out, err := b.api.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.cfg.QueueURL), VisibilityTimeout: 1, WaitTimeSeconds: 5})
		require.NoError(t, err)
		require.Len(t, out.Messages, 1)

		s := newSeen()
		consume(t, tr, 1, func(_ context.Context, d queue.Delivery) error { s.add(d); return nil })
		d := s.next(t)
		assert.Equal(t, "t1", d.TaskID)
		assert.Equal(t, 2, d.ReceiveCount)
		require.Eventually(t, func() bool { return e.left(t, e.cfg.QueueURL) == 0 }, within, 100*time.Millisecond, "deleted once handled")
	})

	// Heartbeats keep a long handler's message invisible well past the visibility timeout.
	t.Run("heartbeats_keep_a_running_message", func(t *testing.T) {
		t.Parallel()
		e := b.env(t, 0)
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
		require.Eventually(t, func() bool { return e.left(t, e.cfg.QueueURL) == 0 }, within, 100*time.Millisecond)
	})

	// SQS moves a message received maxReceiveCount times to the dead-letter queue; the worker
	// reads it there and hands it to the handler as dead-lettered, then deletes it.
	t.Run("dead_letters", func(t *testing.T) {
		t.Parallel()
		e := b.env(t, 2)
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
			return e.left(t, e.cfg.QueueURL) == 0 && e.left(t, e.cfg.DeadLetterURL) == 0
		}, within, 100*time.Millisecond)
	})
}

func TestSQSTransport(t *testing.T) {
	t.Parallel()
	runSQSSuite(t, fakeSQS(t))
}

// TestSQSLive runs the same suite against real SQS: SANDGATE_SQS_E2E=1 with AWS credentials
// and a region (AWS_REGION, AWS_PROFILE, ...) allowed to create, use and delete FIFO queues
// named sandgate-e2e-*.
func TestSQSLive(t *testing.T) {
	if os.Getenv("SANDGATE_SQS_E2E") != "1" {
		t.Skip("set SANDGATE_SQS_E2E=1 (and AWS credentials and region) to run against real SQS")
	}
	cfg, err := awsconfig.LoadDefaultConfig(context.Background())
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Region, "set AWS_REGION")
	runSQSSuite(t, &sqsBackend{
		api: sqs.NewFromConfig(cfg), base: queue.SQSConfig{Region: cfg.Region},
		prefix: fmt.Sprintf("sandgate-e2e-%d-", time.Now().Unix()),
	})
}

func TestSQSSendsFIFOMessages(t *testing.T) {
	t.Parallel()
	b := fakeSQS(t)
	e := b.env(t, 0)
	tr := e.open(t)
	enqueue(t, tr, "t1", "session-1")
	enqueue(t, tr, "t1", "session-1") // a second send of one task within five minutes
	enqueue(t, tr, "t2", "")
	msgs := b.fake.SQSMessages(path.Base(e.cfg.QueueURL))
	require.Len(t, msgs, 2, "SQS dropped the duplicate by its deduplication id")
	assert.Equal(t, "session-1", msgs[0].GroupID)
	assert.Equal(t, "t1", msgs[0].DeduplicationID)
	assert.Equal(t, "t1", msgs[0].Attributes["sandgate.task_id"])
	assert.Equal(t, "t2", msgs[1].GroupID, "without a session the task is its own group")
	for _, c := range b.fake.CallsTo("SendMessage") {
		require.NotNil(t, c.Identity)
		assert.Equal(t, awsfake.GatewayAccessKeyID, c.Identity.AccessKeyID, "signed with the configured credentials")
	}
}

func TestSQSRefusesQueuesThatCannotWork(t *testing.T) {
	t.Parallel()
	b := fakeSQS(t)
	fake := b.fake
	open := func(cfg queue.SQSConfig) error {
		_, err := queue.NewSQS(context.Background(), cfg, slog.Default())
		return err
	}

	standard, err := fake.CreateSQSQueue("standard", nil)
	require.NoError(t, err)
	e := b.env(t, 0)
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

	red := b.env(t, 3)
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
