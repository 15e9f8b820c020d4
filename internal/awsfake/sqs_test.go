package awsfake_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/awsfake"
)

// The SQS part of the fake, driven by the real aws-sdk-go-v2 client (which checks the
// bodies' MD5s): FIFO groups, deduplication, receive counts, visibility, receipt handles and
// redrive, as AWS documents them.
func TestSQSFIFOSemantics(t *testing.T) {
	t.Parallel()
	fake := awsfake.New(t)
	api := sqs.NewFromConfig(fake.Config(fake.GatewayCredentials()), func(o *sqs.Options) { o.BaseEndpoint = aws.String(fake.URL) })
	ctx := context.Background()

	dead, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("d.fifo"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.NoError(t, err)
	q, err := api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("q.fifo"), Attributes: map[string]string{
		"FifoQueue": "true", "RedrivePolicy": fmt.Sprintf(`{"deadLetterTargetArn":"arn:aws:sqs:%s:%s:d.fifo","maxReceiveCount":"2"}`, fake.Region, fake.Account)}})
	require.NoError(t, err)
	_, err = api.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String("bad"), Attributes: map[string]string{"FifoQueue": "true"}})
	require.Error(t, err, "a FIFO queue's name ends in .fifo")

	send := func(body, group, dedup string) *sqs.SendMessageOutput {
		t.Helper()
		out, err := api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String(body), MessageGroupId: aws.String(group), MessageDeduplicationId: aws.String(dedup),
			MessageAttributes: map[string]types.MessageAttributeValue{"sandgate.task_id": {DataType: aws.String("String"), StringValue: aws.String(dedup)}}})
		require.NoError(t, err)
		return out
	}
	receive := func(n int32, vis int32) []types.Message {
		t.Helper()
		out, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: n, VisibilityTimeout: vis,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}, MessageAttributeNames: []string{"sandgate.*"}})
		require.NoError(t, err)
		return out.Messages
	}
	body := func(ms []types.Message) []string {
		var out []string
		for _, m := range ms {
			out = append(out, aws.ToString(m.Body))
		}
		return out
	}

	first := send("a0", "a", "a0")
	again := send("a0", "a", "a0")
	assert.Equal(t, aws.ToString(first.MessageId), aws.ToString(again.MessageId), "deduplicated within five minutes")
	send("a1", "a", "a1")
	send("b0", "b", "b0")
	_, err = api.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: q.QueueUrl, MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("x")})
	require.Error(t, err, "a FIFO message needs a group")

	got := receive(1, 30)
	require.Equal(t, []string{"a0"}, body(got))
	a0 := got[0]
	assert.Equal(t, "1", a0.Attributes["ApproximateReceiveCount"])
	assert.Equal(t, "a", a0.Attributes["MessageGroupId"])
	assert.Equal(t, "a0", aws.ToString(a0.MessageAttributes["sandgate.task_id"].StringValue))
	assert.NotEmpty(t, aws.ToString(a0.MD5OfMessageAttributes))
	assert.Equal(t, []string{"b0"}, body(receive(10, 30)), "group a waits while a0 is in flight")
	assert.Empty(t, receive(10, 30))

	_, err = api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: a0.ReceiptHandle})
	require.NoError(t, err)
	a1 := receive(10, 1)
	require.Equal(t, []string{"a1"}, body(a1))

	// A lapsed visibility gives the message again, counted, with a new receipt handle; the
	// old one no longer works.
	time.Sleep(1100 * time.Millisecond)
	_, err = api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: a1[0].ReceiptHandle, VisibilityTimeout: 30})
	var notInFlight *types.MessageNotInflight
	require.ErrorAs(t, err, &notInFlight)
	again2 := receive(10, 30)
	require.Equal(t, []string{"a1"}, body(again2))
	assert.Equal(t, "2", again2[0].Attributes["ApproximateReceiveCount"])
	_, err = api.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: q.QueueUrl, ReceiptHandle: a1[0].ReceiptHandle})
	var invalid *types.ReceiptHandleIsInvalid
	require.ErrorAs(t, err, &invalid, "only the latest receipt handle is valid")
	_, err = api.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: q.QueueUrl, ReceiptHandle: again2[0].ReceiptHandle, VisibilityTimeout: 0})
	require.NoError(t, err, "visible again at once")
	calls := fake.CallsTo("ChangeMessageVisibility")
	assert.Contains(t, calls[len(calls)-1].Input, "VisibilityTimeout", "a required member is sent even when zero")

	// Received twice (maxReceiveCount 2): the next receive moves it to the dead-letter queue.
	assert.Empty(t, receive(10, 30))
	moved, err := api.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: dead.QueueUrl, MaxNumberOfMessages: 10,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll}})
	require.NoError(t, err)
	require.Equal(t, []string{"a1"}, body(moved.Messages))
	assert.Contains(t, moved.Messages[0].Attributes["DeadLetterQueueSourceArn"], ":q.fifo")

	_, err = api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(fake.URL + "/" + fake.Account + "/none.fifo")})
	var missing *types.QueueDoesNotExist
	require.ErrorAs(t, err, &missing)
}
