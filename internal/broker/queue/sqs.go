package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/jackc/pgx/v5"
)

// SQSConfig configures the SQS transport. The composition root fills it from
// sandbox.broker.queue.sqs (defaults applied and checked there).
type SQSConfig struct {
	// QueueURL is the input queue: a FIFO queue (its name ends in .fifo).
	QueueURL string
	// DeadLetterURL is the dead-letter queue of QueueURL's redrive policy, which workers read
	// to record what SQS moved there as failed. Required when QueueURL has a redrive policy.
	DeadLetterURL string
	// Region is the queues' AWS region; default the AWS configuration's (AWS_REGION, the
	// shared config file), else the one in QueueURL's host (sqs.<region>.amazonaws.com).
	Region string
	// EndpointURL replaces SQS's endpoint (VPC endpoints, a local SQS, tests).
	EndpointURL string
	// VisibilityTimeout is how long a received message stays invisible to other workers; a
	// worker's heartbeats extend it while the handler runs (every third of it), so it is
	// also how soon a dead worker's message is delivered again. (0, 12h].
	VisibilityTimeout time.Duration
	// WaitTime is the long-poll wait of each receive, [0, 20s]; a draining worker waits for
	// its current receive to return.
	WaitTime time.Duration
	// MaxBodyBytes is the largest envelope the gateway sends (inline_payload_max_bytes); the
	// queue's MaximumMessageSize must take it and the message attributes.
	MaxBodyBytes int
	// Credentials replace the default AWS credential chain when set (tests).
	Credentials aws.CredentialsProvider
}

// Message attributes of the SQS transport.
const (
	// sqsTaskAttribute carries the task id (the body's own may be undecodable).
	sqsTaskAttribute = "sandgate.task_id"
	// sqsPriorAttribute counts the receives of earlier copies of this message (one put
	// behind its group's later messages is a new message whose ApproximateReceiveCount
	// starts again).
	sqsPriorAttribute = "sandgate.prior_receives"
	// sqsAttributeRoom is what the message attributes may add to a body.
	sqsAttributeRoom = 1024
)

// SQS is the SQS transport: a FIFO queue with MessageGroupId = session id, so SQS hands out
// one session's messages in order and none of a session while one of its messages is
// received and not yet deleted, and MessageDeduplicationId = task id.
//
// A received message stays invisible for VisibilityTimeout; while its handler runs the
// worker extends that (ChangeMessageVisibility) every third of it, so a dead worker's
// message is delivered again at most VisibilityTimeout after its last heartbeat. A handler
// error makes the message visible again a second later. ApproximateReceiveCount (plus the
// receives of earlier copies, for a message put behind its group's later ones) is the
// delivery's ReceiveCount, which the domain holds against max_receive_count. When the queue
// has a redrive policy, SQS itself moves a message received maxReceiveCount times to the
// dead-letter queue; workers read that queue (DeadLetterURL) and record each message there
// as a permanent failure. A message that a draining worker received but did not start is
// made visible again at once, which SQS counts as a receive.
type SQS struct {
	cfg SQSConfig
	api *sqs.Client
	log *slog.Logger
	// redriveMax is the input queue's redrive maxReceiveCount; 0 without a redrive policy.
	redriveMax int
}

// NewSQS builds the client and checks the queues, giving up after 30 seconds: QueueURL must
// be a FIFO queue whose MaximumMessageSize takes MaxBodyBytes; with a redrive policy,
// DeadLetterURL must be set and be that policy's target.
//
// Errors: AWS configuration that does not load, queues that cannot be read
// (sqs:GetQueueAttributes) or that fail those checks, each naming the queue and the values.
func NewSQS(ctx context.Context, cfg SQSConfig, log *slog.Logger) (*SQS, error) {
	if log == nil {
		log = slog.Default()
	}
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	if cfg.Credentials != nil {
		opts = append(opts, awsconfig.WithCredentialsProvider(cfg.Credentials))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("queue: AWS configuration for SQS: %w", err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = regionOf(cfg.QueueURL)
	}
	if awsCfg.Region == "" {
		return nil, fmt.Errorf("queue: no AWS region for SQS queue %s: set sandbox.broker.queue.sqs.region or AWS_REGION", cfg.QueueURL)
	}
	api := sqs.NewFromConfig(awsCfg, func(o *sqs.Options) {
		if cfg.EndpointURL != "" {
			o.BaseEndpoint = aws.String(cfg.EndpointURL)
		}
	})
	q := &SQS{cfg: cfg, api: api, log: log}
	checkCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := q.check(checkCtx); err != nil {
		return nil, err
	}
	return q, nil
}

var sqsHostRegion = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)

// regionOf is the region in an SQS queue URL's host, or "".
func regionOf(queueURL string) string {
	u, err := url.Parse(queueURL)
	if err != nil {
		return ""
	}
	if m := sqsHostRegion.FindStringSubmatch(u.Hostname()); m != nil {
		return m[1]
	}
	return ""
}

// check reads the queues' attributes and refuses what cannot work (see NewSQS).
func (q *SQS) check(ctx context.Context) error {
	in, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.cfg.QueueURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		return fmt.Errorf("queue: SQS queue %s: %w", q.cfg.QueueURL, err)
	}
	attrs := in.Attributes
	if attrs[string(types.QueueAttributeNameFifoQueue)] != "true" {
		return fmt.Errorf("queue: SQS queue %s is not a FIFO queue: Sandgate needs one (MessageGroupId keeps each session's executions in order); create a queue whose name ends in .fifo", q.cfg.QueueURL)
	}
	if size, err := strconv.Atoi(attrs[string(types.QueueAttributeNameMaximumMessageSize)]); err == nil && q.cfg.MaxBodyBytes+sqsAttributeRoom > size {
		return fmt.Errorf("queue: SQS queue %s takes messages of at most %d bytes (MaximumMessageSize), but sandbox.broker.inline_payload_max_bytes=%d needs %d with the message attributes; lower that limit or raise the queue's",
			q.cfg.QueueURL, size, q.cfg.MaxBodyBytes, q.cfg.MaxBodyBytes+sqsAttributeRoom)
	}
	policy := attrs[string(types.QueueAttributeNameRedrivePolicy)]
	if policy == "" {
		if q.cfg.DeadLetterURL != "" {
			q.log.Warn("sandbox.broker.queue.sqs.dead_letter_url is set but the input queue has no redrive policy: SQS moves nothing there; workers fail a task after max_receive_count deliveries themselves", "queue", q.cfg.QueueURL)
		}
		return nil
	}
	var rp struct {
		Target   string          `json:"deadLetterTargetArn"`
		MaxCount json.RawMessage `json:"maxReceiveCount"` // a number, or a string holding one
	}
	if err := json.Unmarshal([]byte(policy), &rp); err != nil {
		return fmt.Errorf("queue: SQS queue %s has a redrive policy that is not JSON: %w", q.cfg.QueueURL, err)
	}
	q.redriveMax, _ = strconv.Atoi(strings.Trim(string(rp.MaxCount), `"`))
	if q.cfg.DeadLetterURL == "" {
		return fmt.Errorf("queue: SQS queue %s has a redrive policy to %s, but sandbox.broker.queue.sqs.dead_letter_url is not set: the tasks SQS moves there would never be recorded as failed; set it to that queue's URL",
			q.cfg.QueueURL, rp.Target)
	}
	dl, err := q.api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(q.cfg.DeadLetterURL), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return fmt.Errorf("queue: SQS dead-letter queue %s: %w", q.cfg.DeadLetterURL, err)
	}
	if arn := dl.Attributes[string(types.QueueAttributeNameQueueArn)]; arn != rp.Target {
		return fmt.Errorf("queue: sandbox.broker.queue.sqs.dead_letter_url %s is queue %s, but the redrive policy of %s moves messages to %s",
			q.cfg.DeadLetterURL, arn, q.cfg.QueueURL, rp.Target)
	}
	return nil
}

// JoinsTransaction reports false: messages are sent after the task row commits.
func (q *SQS) JoinsTransaction() bool { return false }

// Enqueue sends m with its group (the session id; the task id when it has none) and the task
// id as deduplication id.
func (q *SQS) Enqueue(ctx context.Context, _ pgx.Tx, m Message) error {
	group := m.GroupID
	if group == "" {
		group = m.TaskID
	}
	return q.send(ctx, m.TaskID, group, m.TaskID, string(m.Body), 0)
}

func (q *SQS) send(ctx context.Context, taskID, group, dedup, body string, prior int) error {
	attrs := map[string]types.MessageAttributeValue{
		sqsTaskAttribute: {DataType: aws.String("String"), StringValue: aws.String(taskID)},
	}
	if prior > 0 {
		attrs[sqsPriorAttribute] = types.MessageAttributeValue{DataType: aws.String("Number"), StringValue: aws.String(strconv.Itoa(prior))}
	}
	_, err := q.api.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.cfg.QueueURL), MessageBody: aws.String(body),
		MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(dedup), MessageAttributes: attrs,
	})
	return err
}

// Close is a no-op: the SDK's client holds no connection that needs closing.
func (q *SQS) Close() error { return nil }

// receive asks queueURL for up to n messages with what the handler needs.
func (q *SQS) receive(ctx context.Context, queueURL string, n int) ([]types.Message, error) {
	out, err := q.api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(queueURL), MaxNumberOfMessages: int32(n),
		WaitTimeSeconds:   int32(q.cfg.WaitTime / time.Second),
		VisibilityTimeout: int32(q.cfg.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{
			types.MessageSystemAttributeNameApproximateReceiveCount, types.MessageSystemAttributeNameMessageGroupId,
		},
		MessageAttributeNames: []string{"sandgate.*"},
	})
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// Consume receives messages and runs h on them, at most consumers at once, until ctx ends;
// then it stops receiving (what a receive under way returns is made visible again at once)
// and waits for running handlers. With DeadLetterURL it also reads the dead-letter queue.
func (q *SQS) Consume(ctx context.Context, consumers int, h Handler) error {
	consumers = max(consumers, 1)
	slots := make(chan struct{}, consumers)
	var wg sync.WaitGroup
	defer wg.Wait()
	if q.cfg.DeadLetterURL != "" {
		wg.Add(1)
		go func() { defer wg.Done(); q.consumeDeadLetters(ctx, h) }()
	}
	for ctx.Err() == nil {
		n := reserve(ctx, slots, min(consumers, 10))
		if n == 0 {
			break
		}
		// A receive cut short would leave its messages invisible for the whole visibility
		// timeout: let it end on its own (within WaitTime).
		msgs, err := q.receive(context.WithoutCancel(ctx), q.cfg.QueueURL, n)
		if err != nil {
			release(slots, n)
			q.log.Warn("sqs receive failed", "queue", q.cfg.QueueURL, "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		release(slots, n-len(msgs))
		if ctx.Err() != nil { // draining: give back what arrived
			for _, m := range msgs {
				q.setVisibility(context.Background(), q.cfg.QueueURL, m, 0)
			}
			release(slots, len(msgs))
			break
		}
		// One goroutine per session in this batch, working its messages in order; each
		// message is kept (heartbeats) from now until it is settled.
		var groups []string
		byGroup := map[string][]*sqsHeld{}
		for _, m := range msgs {
			g := m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)]
			if _, ok := byGroup[g]; !ok {
				groups = append(groups, g)
			}
			byGroup[g] = append(byGroup[g], q.keep(m))
		}
		for _, g := range groups {
			wg.Add(1)
			go func(held []*sqsHeld) {
				defer wg.Done()
				for _, hm := range held {
					q.handle(ctx, hm, h)
					<-slots
				}
			}(byGroup[g])
		}
	}
	return nil
}

// sqsHeld is a received message and the heartbeat that keeps it invisible.
type sqsHeld struct {
	msg  types.Message
	stop context.CancelFunc
	done chan struct{}
}

// keep starts m's heartbeat: every third of the visibility timeout, the message's
// visibility is extended to a whole one.
func (q *SQS) keep(m types.Message) *sqsHeld {
	ctx, stop := context.WithCancel(context.Background())
	hm := &sqsHeld{msg: m, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(hm.done)
		t := time.NewTicker(max(q.cfg.VisibilityTimeout/3, 100*time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				q.setVisibility(ctx, q.cfg.QueueURL, m, q.cfg.VisibilityTimeout)
			}
		}
	}()
	return hm
}

// settled stops hm's heartbeat.
func (hm *sqsHeld) settled() {
	hm.stop()
	<-hm.done
}

// setVisibility makes m visible again after d (0: now).
func (q *SQS) setVisibility(ctx context.Context, queueURL string, m types.Message, d time.Duration) {
	_, err := q.api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: int32(d / time.Second)})
	if err != nil && ctx.Err() == nil {
		q.log.Warn("sqs: changing a message's visibility failed; another worker may receive it", "queue", queueURL, "message_id", aws.ToString(m.MessageId), "err", err)
	}
}

// remove deletes m from queueURL (retrying briefly); a message left behind is delivered again
// and skipped by the domain as finished.
func (q *SQS) remove(queueURL string, m types.Message) {
	var err error
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = q.api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(queueURL), ReceiptHandle: m.ReceiptHandle})
		cancel()
		if err == nil {
			return
		}
		var gone *types.ReceiptHandleIsInvalid
		if errors.As(err, &gone) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	q.log.Warn("sqs: deleting a finished message failed; it will be delivered again and skipped", "queue", queueURL, "message_id", aws.ToString(m.MessageId), "err", err)
}

// sqsDelivery is what the handler sees of m, and the receives of m's earlier copies.
func sqsDelivery(m types.Message) (Delivery, int) {
	var taskID string
	prior := 0
	if a, ok := m.MessageAttributes[sqsTaskAttribute]; ok {
		taskID = aws.ToString(a.StringValue)
	}
	if a, ok := m.MessageAttributes[sqsPriorAttribute]; ok {
		prior, _ = strconv.Atoi(aws.ToString(a.StringValue))
	}
	count, _ := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	return Delivery{
		Message:      Message{TaskID: taskID, GroupID: m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)], Body: []byte(aws.ToString(m.Body))},
		ReceiveCount: prior + count,
	}, prior
}

// handle runs h on a received message and settles it (see the package doc).
func (q *SQS) handle(ctx context.Context, hm *sqsHeld, h Handler) {
	m := hm.msg
	d, _ := sqsDelivery(m)
	d.InProgress = func() {}
	for {
		// Handlers run to completion even when a drain begins; ctx only stops new work.
		err := h(context.WithoutCancel(ctx), d)
		switch judge(err) {
		case acknowledge:
			hm.settled()
			q.remove(q.cfg.QueueURL, m)
			return
		case sendBehind:
			hm.settled()
			// A copy at the end of its group (the original still blocks the group until it is
			// deleted), with a deduplication id of its own, carrying the real receives so far.
			dedup := fmt.Sprintf("%s.%d", d.TaskID, time.Now().UnixNano())
			if err := q.send(context.WithoutCancel(ctx), d.TaskID, d.GroupID, dedup, string(d.Body), d.ReceiveCount-1); err != nil {
				q.log.Warn("sqs: sending a message behind its session's later ones failed; it will be delivered again", "task_id", d.TaskID, "err", err)
				q.setVisibility(context.Background(), q.cfg.QueueURL, m, failedDeliveryPause)
				return
			}
			q.remove(q.cfg.QueueURL, m)
			return
		case hold:
			if !sleepCtx(ctx, retryDelay(err)) {
				hm.settled()
				q.setVisibility(context.Background(), q.cfg.QueueURL, m, 0)
				return
			}
		case redeliver:
			hm.settled()
			q.log.Warn("operation failed; it will be delivered again", "task_id", d.TaskID, "receive_count", d.ReceiveCount, "err", err)
			q.setVisibility(context.Background(), q.cfg.QueueURL, m, failedDeliveryPause)
			return
		}
	}
}

// consumeDeadLetters hands each message of the dead-letter queue to h as DeadLettered (the
// domain records its task's permanent failure) and deletes it once h returned nil.
func (q *SQS) consumeDeadLetters(ctx context.Context, h Handler) {
	for ctx.Err() == nil {
		msgs, err := q.receive(context.WithoutCancel(ctx), q.cfg.DeadLetterURL, 10)
		if err != nil {
			q.log.Warn("sqs receive failed", "queue", q.cfg.DeadLetterURL, "err", err)
			sleepCtx(ctx, time.Second)
			continue
		}
		for _, m := range msgs {
			d, prior := sqsDelivery(m)
			d.DeadLettered, d.InProgress = true, func() {}
			if q.redriveMax > 0 {
				d.ReceiveCount = prior + q.redriveMax
			}
			if err := h(context.WithoutCancel(ctx), d); err != nil {
				q.log.Warn("recording a dead-lettered operation failed; it will be read again", "task_id", d.TaskID, "err", err)
				q.setVisibility(context.Background(), q.cfg.DeadLetterURL, m, failedDeliveryPause)
				continue
			}
			q.remove(q.cfg.DeadLetterURL, m)
		}
	}
}
