package awsfake

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// SQS limits and defaults the fake applies, as documented by AWS.
const (
	sqsDefaultVisibility   = 30        // seconds, a queue's VisibilityTimeout default
	sqsMaxVisibility       = 12 * 3600 // seconds
	sqsDefaultMaxSize      = 262144    // bytes, a queue's MaximumMessageSize default here
	sqsDefaultRetention    = 345600    // seconds (4 days)
	sqsDedupWindow         = 5 * time.Minute
	sqsMaxWaitSeconds      = 20
	sqsMaxMessagesPerCall  = 10
	sqsLongPollGranularity = 20 * time.Millisecond
)

// sqsQueue is one queue: its attributes as set, and its messages in the order they were sent.
type sqsQueue struct {
	name, url, arn string
	attrs          map[string]string
	created        time.Time
	messages       []*sqsMessage
	dedup          map[string]sqsDedup
	seq            int64
}

type sqsDedup struct {
	messageID, seq string
	at             time.Time
}

// sqsMessage is one message of a queue.
type sqsMessage struct {
	id, body, group, dedupID, seq string
	attrs                         map[string]sqsAttribute
	sender                        string
	sent, firstReceive            time.Time
	receives                      int
	visibleAt                     time.Time
	receipt                       string // the latest receipt handle; "" before the first receive
	deleted                       bool
	deadLetterSource              string // the ARN of the queue it was moved from
}

// sqsAttribute is a message attribute (MessageAttributeValue).
type sqsAttribute struct {
	DataType    string `json:"DataType"`
	StringValue string `json:"StringValue,omitempty"`
	BinaryValue []byte `json:"BinaryValue,omitempty"`
}

// SQSMessage is a snapshot of one message, for tests.
type SQSMessage struct {
	ID, Body, GroupID, DeduplicationID string
	Attributes                         map[string]string // String and Number message attributes
	ReceiveCount                       int
	InFlight                           bool // received and neither deleted nor visible again
	// DeadLetterSourceARN is the queue the message was moved from by a redrive policy.
	DeadLetterSourceARN string
}

// CreateSQSQueue creates a queue as CreateQueue would (attributes such as FifoQueue,
// VisibilityTimeout, MaximumMessageSize, RedrivePolicy) and returns its URL.
func (s *Server) CreateSQSQueue(name string, attrs map[string]string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.createQueueLocked(name, attrs)
	if code != "" {
		return "", fmt.Errorf("%s: %s", code, msg)
	}
	return q.url, nil
}

// SQSMessages returns the messages queue name holds (not deleted), oldest first.
func (s *Server) SQSMessages(name string) []SQSMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		return nil
	}
	now := time.Now()
	var out []SQSMessage
	for _, m := range q.messages {
		if m.deleted {
			continue
		}
		attrs := map[string]string{}
		for k, v := range m.attrs {
			if v.StringValue != "" {
				attrs[k] = v.StringValue
			}
		}
		out = append(out, SQSMessage{ID: m.id, Body: m.body, GroupID: m.group, DeduplicationID: m.dedupID, Attributes: attrs,
			ReceiveCount: m.receives, InFlight: m.receipt != "" && m.visibleAt.After(now), DeadLetterSourceARN: m.deadLetterSource})
	}
	return out
}

// serveSQS answers the AWS JSON 1.0 protocol of SQS (X-Amz-Target: AmazonSQS.<Operation>).
func (s *Server) serveSQS(w http.ResponseWriter, r *http.Request, body []byte) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	call, id, aerr := s.authenticate(r, body, "sqs")
	call.Service, call.Operation = "sqs", op
	fail := func(code, msg string) {
		call.ErrorCode = code
		s.record(call)
		sqsError(w, code, msg)
	}
	var input map[string]any
	if err := json.Unmarshal(body, &input); err != nil {
		fail("SerializationException", "the body is not JSON")
		return
	}
	call.Input = input
	switch {
	case aerr != nil:
		fail(aerr.ssm, aerr.msg)
		return
	case id == nil:
		fail("MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	case r.Header.Get("Content-Type") != "application/x-amz-json-1.0":
		fail("UnknownOperationException", "the content type must be application/x-amz-json-1.0")
		return
	case s.throttled(op):
		fail("RequestThrottled", "Rate exceeded")
		return
	}
	var (
		out  any
		code string
		msg  string
	)
	switch op {
	case "CreateQueue":
		out, code, msg = s.sqsCreateQueue(body)
	case "GetQueueUrl":
		out, code, msg = s.sqsGetQueueURL(body)
	case "DeleteQueue":
		out, code, msg = s.sqsDeleteQueue(body)
	case "GetQueueAttributes":
		out, code, msg = s.sqsGetQueueAttributes(body)
	case "SendMessage":
		out, code, msg = s.sqsSendMessage(body, id.AccessKeyID)
	case "ReceiveMessage":
		out, code, msg = s.sqsReceiveMessage(r.Context(), body)
	case "DeleteMessage":
		out, code, msg = s.sqsDeleteMessage(body)
	case "ChangeMessageVisibility":
		out, code, msg = s.sqsChangeMessageVisibility(body)
	default:
		code, msg = "UnsupportedOperation", "awsfake does not implement SQS "+op
	}
	if code != "" {
		fail(code, msg)
		return
	}
	s.record(call)
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", requestID())
	_, _ = w.Write(b)
}

// sqsQueryCodes are the AWS query-protocol codes SQS's JSON protocol sends in
// X-Amzn-Query-Error for its modelled errors (the rest keep their own name).
var sqsQueryCodes = map[string]string{
	"QueueDoesNotExist":    "AWS.SimpleQueueService.NonExistentQueue",
	"MessageNotInflight":   "AWS.SimpleQueueService.MessageNotInflight",
	"QueueNameExists":      "QueueAlreadyExists",
	"UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
}

// sqsModelled are the error shapes of SQS's model; their __type carries the namespace.
var sqsModelled = []string{"InvalidAddress", "InvalidAttributeName", "InvalidAttributeValue", "InvalidMessageContents",
	"InvalidSecurity", "MessageNotInflight", "OverLimit", "QueueDoesNotExist", "QueueNameExists", "ReceiptHandleIsInvalid",
	"RequestThrottled", "UnsupportedOperation"}

func sqsError(w http.ResponseWriter, code, msg string) {
	typ := code
	if slices.Contains(sqsModelled, code) {
		typ = "com.amazonaws.sqs#" + code
	}
	query := code
	if q, ok := sqsQueryCodes[code]; ok {
		query = q
	}
	b, _ := json.Marshal(map[string]string{"__type": typ, "message": msg})
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-Requestid", requestID())
	w.Header().Set("X-Amzn-Query-Error", query+";Sender")
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}

var sqsQueueName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

func (s *Server) sqsCreateQueue(body []byte) (any, string, string) {
	var in struct {
		QueueName  string
		Attributes map[string]string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.createQueueLocked(in.QueueName, in.Attributes)
	if code != "" {
		return nil, code, msg
	}
	return map[string]string{"QueueUrl": q.url}, "", ""
}

func (s *Server) createQueueLocked(name string, attrs map[string]string) (*sqsQueue, string, string) {
	fifo := attrs["FifoQueue"] == "true"
	base := name
	if fifo {
		var ok bool
		if base, ok = strings.CutSuffix(name, ".fifo"); !ok {
			return nil, "InvalidParameterValue", "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, must end with .fifo suffix and be 1 to 80 in length."
		}
	} else if strings.HasSuffix(name, ".fifo") {
		return nil, "InvalidParameterValue", "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length (a .fifo name needs FifoQueue=true)."
	}
	if !sqsQueueName.MatchString(base) {
		return nil, "InvalidParameterValue", "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
	}
	full := map[string]string{
		"VisibilityTimeout":             strconv.Itoa(sqsDefaultVisibility),
		"MaximumMessageSize":            strconv.Itoa(sqsDefaultMaxSize),
		"MessageRetentionPeriod":        strconv.Itoa(sqsDefaultRetention),
		"DelaySeconds":                  "0",
		"ReceiveMessageWaitTimeSeconds": "0",
	}
	if fifo {
		full["FifoQueue"], full["ContentBasedDeduplication"] = "true", "false"
		full["DeduplicationScope"], full["FifoThroughputLimit"] = "queue", "perQueue"
	}
	for k, v := range attrs {
		switch k {
		case "VisibilityTimeout", "MaximumMessageSize", "MessageRetentionPeriod", "DelaySeconds", "ReceiveMessageWaitTimeSeconds":
			if _, err := strconv.Atoi(v); err != nil {
				return nil, "InvalidAttributeValue", "Invalid value for the parameter " + k + "."
			}
		case "RedrivePolicy":
			if _, _, err := parseRedrive(v); err != nil {
				return nil, "InvalidAttributeValue", "Invalid value for the parameter RedrivePolicy. Reason: " + err.Error()
			}
		case "FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit", "Policy", "KmsMasterKeyId", "SqsManagedSseEnabled":
		default:
			return nil, "InvalidAttributeName", "Unknown Attribute " + k + "."
		}
		full[k] = v
	}
	if q := s.queues[name]; q != nil {
		for k, v := range full {
			if q.attrs[k] != v {
				return nil, "QueueNameExists", "A queue already exists with the same name and a different value for attribute " + k
			}
		}
		return q, "", ""
	}
	q := &sqsQueue{
		name: name, url: s.URL + "/" + s.Account + "/" + name,
		arn:   "arn:aws:sqs:" + s.Region + ":" + s.Account + ":" + name,
		attrs: full, created: time.Now(), dedup: map[string]sqsDedup{},
	}
	s.queues[name] = q
	return q, "", ""
}

// parseRedrive reads a RedrivePolicy: its target ARN and maxReceiveCount (a number or a
// string holding one, as AWS accepts both).
func parseRedrive(v string) (string, int, error) {
	var rp struct {
		Target   string          `json:"deadLetterTargetArn"`
		MaxCount json.RawMessage `json:"maxReceiveCount"`
	}
	if err := json.Unmarshal([]byte(v), &rp); err != nil {
		return "", 0, err
	}
	n, err := strconv.Atoi(strings.Trim(string(rp.MaxCount), `"`))
	if err != nil || n < 1 || n > 1000 || rp.Target == "" {
		return "", 0, fmt.Errorf("deadLetterTargetArn and a maxReceiveCount from 1 to 1000 are required")
	}
	return rp.Target, n, nil
}

// queueLocked finds the queue a QueueUrl names (its last two path segments: account and
// name, whatever the host).
func (s *Server) queueLocked(queueURL string) (*sqsQueue, string, string) {
	parts := strings.Split(strings.TrimRight(queueURL, "/"), "/")
	if len(parts) >= 2 && parts[len(parts)-2] == s.Account {
		if q := s.queues[parts[len(parts)-1]]; q != nil {
			return q, "", ""
		}
	}
	return nil, "QueueDoesNotExist", "The specified queue does not exist."
}

func (s *Server) sqsGetQueueURL(body []byte) (any, string, string) {
	var in struct{ QueueName string }
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[in.QueueName]
	if q == nil {
		return nil, "QueueDoesNotExist", "The specified queue does not exist."
	}
	return map[string]string{"QueueUrl": q.url}, "", ""
}

func (s *Server) sqsDeleteQueue(body []byte) (any, string, string) {
	var in struct{ QueueUrl string }
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.queueLocked(in.QueueUrl)
	if code != "" {
		return nil, code, msg
	}
	delete(s.queues, q.name)
	return map[string]any{}, "", ""
}

func (s *Server) sqsGetQueueAttributes(body []byte) (any, string, string) {
	var in struct {
		QueueUrl       string
		AttributeNames []string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.queueLocked(in.QueueUrl)
	if code != "" {
		return nil, code, msg
	}
	now := time.Now()
	all := map[string]string{}
	for k, v := range q.attrs {
		all[k] = v
	}
	visible, inFlight := 0, 0
	for _, m := range q.messages {
		switch {
		case m.deleted:
		case m.receipt != "" && m.visibleAt.After(now):
			inFlight++
		default:
			visible++
		}
	}
	all["QueueArn"] = q.arn
	all["ApproximateNumberOfMessages"] = strconv.Itoa(visible)
	all["ApproximateNumberOfMessagesNotVisible"] = strconv.Itoa(inFlight)
	all["ApproximateNumberOfMessagesDelayed"] = "0"
	all["CreatedTimestamp"] = strconv.FormatInt(q.created.Unix(), 10)
	all["LastModifiedTimestamp"] = strconv.FormatInt(q.created.Unix(), 10)
	out := map[string]string{}
	for _, name := range in.AttributeNames {
		if name == "All" {
			out = all
			break
		}
		if v, ok := all[name]; ok {
			out[name] = v
		} else if !slices.Contains([]string{"Policy", "RedrivePolicy", "RedriveAllowPolicy", "KmsMasterKeyId", "KmsDataKeyReusePeriodSeconds", "SqsManagedSseEnabled", "FifoQueue", "ContentBasedDeduplication", "DeduplicationScope", "FifoThroughputLimit"}, name) {
			return nil, "InvalidAttributeName", "Unknown Attribute " + name + "."
		}
	}
	return map[string]any{"Attributes": out}, "", ""
}

// validSQSBody reports whether body has only the characters SQS accepts: #x9, #xA, #xD,
// #x20 to #xD7FF, #xE000 to #xFFFD, #x10000 to #x10FFFF.
func validSQSBody(body string) bool {
	if !utf8.ValidString(body) {
		return false
	}
	for _, r := range body {
		switch {
		case r == 0x9 || r == 0xA || r == 0xD:
		case r >= 0x20 && r <= 0xD7FF:
		case r >= 0xE000 && r <= 0xFFFD:
		case r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}

var sqsAttributeName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)

func (s *Server) sqsSendMessage(body []byte, sender string) (any, string, string) {
	var in struct {
		QueueUrl               string
		MessageBody            string
		DelaySeconds           int
		MessageAttributes      map[string]sqsAttribute
		MessageDeduplicationId string
		MessageGroupId         string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.queueLocked(in.QueueUrl)
	if code != "" {
		return nil, code, msg
	}
	fifo := q.attrs["FifoQueue"] == "true"
	if in.MessageBody == "" {
		return nil, "MissingParameter", "The request must contain the parameter MessageBody."
	}
	if !validSQSBody(in.MessageBody) {
		return nil, "InvalidMessageContents", "Invalid characters found. Valid unicode characters are #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF"
	}
	size := len(in.MessageBody)
	if len(in.MessageAttributes) > 10 {
		return nil, "InvalidParameterValue", "Number of message attributes [" + strconv.Itoa(len(in.MessageAttributes)) + "] exceeds the allowed maximum [10]."
	}
	for name, a := range in.MessageAttributes {
		lower := strings.ToLower(name)
		if !sqsAttributeName.MatchString(name) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
			strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".") || strings.Contains(name, "..") {
			return nil, "InvalidParameterValue", "Message attribute name '" + name + "' is invalid."
		}
		typ, _, _ := strings.Cut(a.DataType, ".")
		switch typ {
		case "String":
			if a.StringValue == "" {
				return nil, "InvalidParameterValue", "Message attribute '" + name + "' must contain a non-empty message attribute value for message attribute type 'String'."
			}
		case "Number":
			if _, err := strconv.ParseFloat(a.StringValue, 64); err != nil {
				return nil, "InvalidParameterValue", "Can't cast the value of message (user) attribute '" + name + "' to a number."
			}
		case "Binary":
			if len(a.BinaryValue) == 0 {
				return nil, "InvalidParameterValue", "Message attribute '" + name + "' must contain a non-empty message attribute value for message attribute type 'Binary'."
			}
		default:
			return nil, "InvalidParameterValue", "The type of message (user) attribute '" + name + "' is invalid."
		}
		size += len(name) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	maxSize, _ := strconv.Atoi(q.attrs["MaximumMessageSize"])
	if size > maxSize {
		return nil, "InvalidParameterValue", fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", maxSize)
	}
	if fifo {
		if in.MessageGroupId == "" {
			return nil, "MissingParameter", "The request must contain the parameter MessageGroupId."
		}
		if in.DelaySeconds != 0 {
			return nil, "InvalidParameterValue", "Value " + strconv.Itoa(in.DelaySeconds) + " for parameter DelaySeconds is invalid. Reason: The request include parameter that is not valid for this queue type."
		}
		if in.MessageDeduplicationId == "" {
			if q.attrs["ContentBasedDeduplication"] != "true" {
				return nil, "InvalidParameterValue", "The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly"
			}
			sum := sha256.Sum256([]byte(in.MessageBody))
			in.MessageDeduplicationId = hex.EncodeToString(sum[:])
		}
		if len(in.MessageGroupId) > 128 || len(in.MessageDeduplicationId) > 128 {
			return nil, "InvalidParameterValue", "MessageGroupId and MessageDeduplicationId can be up to 128 characters long."
		}
	} else if in.MessageDeduplicationId != "" {
		return nil, "InvalidParameterValue", "The request include parameter MessageDeduplicationId that is not valid for this queue type"
	}
	now := time.Now()
	out := map[string]string{"MD5OfMessageBody": md5Hex([]byte(in.MessageBody))}
	if len(in.MessageAttributes) > 0 {
		out["MD5OfMessageAttributes"] = md5OfAttributes(in.MessageAttributes)
	}
	if fifo {
		if d, ok := q.dedup[in.MessageDeduplicationId]; ok && now.Sub(d.at) < sqsDedupWindow {
			out["MessageId"], out["SequenceNumber"] = d.messageID, d.seq // accepted, not delivered twice
			return out, "", ""
		}
	}
	q.seq++
	m := &sqsMessage{
		id: requestID(), body: in.MessageBody, group: in.MessageGroupId, dedupID: in.MessageDeduplicationId,
		seq: fmt.Sprintf("%020d", q.seq), attrs: in.MessageAttributes, sender: sender, sent: now,
		visibleAt: now.Add(time.Duration(in.DelaySeconds) * time.Second),
	}
	q.messages = append(q.messages, m)
	out["MessageId"] = m.id
	if fifo {
		q.dedup[m.dedupID] = sqsDedup{messageID: m.id, seq: m.seq, at: now}
		out["SequenceNumber"] = m.seq
	}
	return out, "", ""
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// md5OfAttributes is the digest SQS computes over message attributes: for each attribute in
// name order, the name, the data type (each as a 4-byte big-endian length and the bytes), a
// transport byte (1 for String and Number, 2 for Binary) and the value (length and bytes).
func md5OfAttributes(attrs map[string]sqsAttribute) string {
	names := make([]string, 0, len(attrs))
	for n := range attrs {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	field := func(b []byte) {
		_ = binary.Write(&buf, binary.BigEndian, uint32(len(b)))
		buf.Write(b)
	}
	for _, n := range names {
		a := attrs[n]
		field([]byte(n))
		field([]byte(a.DataType))
		if strings.HasPrefix(a.DataType, "Binary") {
			buf.WriteByte(2)
			field(a.BinaryValue)
		} else {
			buf.WriteByte(1)
			field([]byte(a.StringValue))
		}
	}
	return md5Hex(buf.Bytes())
}

// sqsReceiveMessage long-polls for messages. On a FIFO queue a message group whose messages
// are in flight gives none; one that gives a message gives its next ones in order in the same
// answer. A message received as many times as its queue's redrive policy allows is moved to
// the dead-letter queue instead of being delivered again.
func (s *Server) sqsReceiveMessage(ctx context.Context, body []byte) (any, string, string) {
	var in struct {
		QueueUrl                    string
		AttributeNames              []string
		MessageSystemAttributeNames []string
		MessageAttributeNames       []string
		MaxNumberOfMessages         *int
		VisibilityTimeout           *int
		WaitTimeSeconds             *int
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	q, code, msg := s.queueLocked(in.QueueUrl)
	if code != "" {
		s.mu.Unlock()
		return nil, code, msg
	}
	maxN, vis, wait := 1, 0, 0
	vis, _ = strconv.Atoi(q.attrs["VisibilityTimeout"])
	wait, _ = strconv.Atoi(q.attrs["ReceiveMessageWaitTimeSeconds"])
	s.mu.Unlock()
	if in.MaxNumberOfMessages != nil {
		maxN = *in.MaxNumberOfMessages
	}
	if in.VisibilityTimeout != nil {
		vis = *in.VisibilityTimeout
	}
	if in.WaitTimeSeconds != nil {
		wait = *in.WaitTimeSeconds
	}
	switch {
	case maxN < 1 || maxN > sqsMaxMessagesPerCall:
		return nil, "InvalidParameterValue", "Value " + strconv.Itoa(maxN) + " for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided."
	case vis < 0 || vis > sqsMaxVisibility:
		return nil, "InvalidParameterValue", "Value " + strconv.Itoa(vis) + " for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200, if provided."
	case wait < 0 || wait > sqsMaxWaitSeconds:
		return nil, "InvalidParameterValue", "Value " + strconv.Itoa(wait) + " for parameter WaitTimeSeconds is invalid. Reason: Must be >= 0 and <= 20, if provided."
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	for {
		got := s.takeMessages(q, maxN, time.Duration(vis)*time.Second, append(in.AttributeNames, in.MessageSystemAttributeNames...), in.MessageAttributeNames)
		if len(got) > 0 || !time.Now().Before(deadline) {
			return map[string]any{"Messages": got}, "", ""
		}
		select {
		case <-ctx.Done():
			return map[string]any{"Messages": got}, "", ""
		case <-time.After(sqsLongPollGranularity):
		}
	}
}

// takeMessages receives up to n available messages of q.
func (s *Server) takeMessages(q *sqsQueue, n int, vis time.Duration, systemNames, attrNames []string) []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	fifo := q.attrs["FifoQueue"] == "true"
	blocked := map[string]bool{}
	if fifo {
		for _, m := range q.messages {
			if !m.deleted && m.receipt != "" && m.visibleAt.After(now) {
				blocked[m.group] = true
			}
		}
	}
	var target *sqsQueue
	maxReceives := 0
	if rp := q.attrs["RedrivePolicy"]; rp != "" {
		arn, count, _ := parseRedrive(rp)
		for _, other := range s.queues {
			if other.arn == arn {
				target, maxReceives = other, count
			}
		}
	}
	var out []map[string]any
	kept := q.messages[:0]
	for _, m := range q.messages {
		if m.deleted {
			continue // dropped for good
		}
		switch {
		case len(out) >= n, m.visibleAt.After(now), fifo && blocked[m.group]:
			if fifo {
				blocked[m.group] = true // none of a group after one that is not taken
			}
			kept = append(kept, m)
			continue
		case target != nil && m.receives >= maxReceives:
			// The redrive policy: the message moves with its attributes and receive count.
			moved := *m
			moved.receipt, moved.visibleAt, moved.deadLetterSource = "", now, q.arn
			target.seq++
			moved.seq = fmt.Sprintf("%020d", target.seq)
			target.messages = append(target.messages, &moved)
			continue
		}
		kept = append(kept, m)
		m.receives++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.receipt = base64.RawURLEncoding.EncodeToString([]byte(m.id + ":" + randomHex(16)))
		m.visibleAt = now.Add(vis)
		out = append(out, s.renderMessage(q, m, systemNames, attrNames))
	}
	q.messages = kept
	return out
}

// renderMessage is m as ReceiveMessage returns it, with the requested attributes.
func (s *Server) renderMessage(q *sqsQueue, m *sqsMessage, systemNames, attrNames []string) map[string]any {
	system := map[string]string{
		"SenderId":                         m.sender,
		"SentTimestamp":                    strconv.FormatInt(m.sent.UnixMilli(), 10),
		"ApproximateReceiveCount":          strconv.Itoa(m.receives),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
	}
	if q.attrs["FifoQueue"] == "true" {
		system["MessageGroupId"], system["MessageDeduplicationId"], system["SequenceNumber"] = m.group, m.dedupID, m.seq
	}
	if m.deadLetterSource != "" {
		system["DeadLetterQueueSourceArn"] = m.deadLetterSource
	}
	attrs := map[string]string{}
	for _, name := range systemNames {
		if name == "All" {
			attrs = system
			break
		}
		if v, ok := system[name]; ok {
			attrs[name] = v
		}
	}
	out := map[string]any{"MessageId": m.id, "ReceiptHandle": m.receipt, "MD5OfBody": md5Hex([]byte(m.body)), "Body": m.body}
	if len(attrs) > 0 {
		out["Attributes"] = attrs
	}
	chosen := map[string]sqsAttribute{}
	for name, a := range m.attrs {
		for _, want := range attrNames {
			prefix, isPrefix := strings.CutSuffix(want, ".*")
			if want == "All" || want == ".*" || want == name || (isPrefix && strings.HasPrefix(name, prefix+".")) {
				chosen[name] = a
			}
		}
	}
	if len(chosen) > 0 {
		out["MessageAttributes"] = chosen
		out["MD5OfMessageAttributes"] = md5OfAttributes(chosen)
	}
	return out
}

// messageByReceipt finds the message a receipt handle was issued for; stale is true when the
// message was received again since (only its latest handle is valid).
func messageByReceipt(q *sqsQueue, receipt string) (m *sqsMessage, stale bool) {
	raw, err := base64.RawURLEncoding.DecodeString(receipt)
	if err != nil {
		return nil, false
	}
	id, _, _ := strings.Cut(string(raw), ":")
	for _, m := range q.messages {
		if m.id == id {
			return m, m.receipt != receipt
		}
	}
	return nil, false
}

func (s *Server) sqsDeleteMessage(body []byte) (any, string, string) {
	var in struct{ QueueUrl, ReceiptHandle string }
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.queueLocked(in.QueueUrl)
	if code != "" {
		return nil, code, msg
	}
	m, stale := messageByReceipt(q, in.ReceiptHandle)
	switch {
	case m == nil && in.ReceiptHandle != "":
		if _, err := base64.RawURLEncoding.DecodeString(in.ReceiptHandle); err == nil {
			return map[string]any{}, "", "" // already deleted: deleting again succeeds
		}
		return nil, "ReceiptHandleIsInvalid", "The input receipt handle \"" + in.ReceiptHandle + "\" is not a valid receipt handle."
	case m == nil || stale:
		return nil, "ReceiptHandleIsInvalid", "The input receipt handle \"" + in.ReceiptHandle + "\" is not a valid receipt handle."
	}
	m.deleted = true
	return map[string]any{}, "", ""
}

func (s *Server) sqsChangeMessageVisibility(body []byte) (any, string, string) {
	var in struct {
		QueueUrl, ReceiptHandle string
		VisibilityTimeout       *int
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	switch {
	case in.VisibilityTimeout == nil:
		return nil, "MissingParameter", "The request must contain the parameter VisibilityTimeout."
	case *in.VisibilityTimeout < 0 || *in.VisibilityTimeout > sqsMaxVisibility:
		return nil, "InvalidParameterValue", "Value " + strconv.Itoa(*in.VisibilityTimeout) + " for parameter VisibilityTimeout is invalid. Reason: Must be between 0 and 43200."
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, code, msg := s.queueLocked(in.QueueUrl)
	if code != "" {
		return nil, code, msg
	}
	m, stale := messageByReceipt(q, in.ReceiptHandle)
	switch {
	case m == nil || stale || m.deleted:
		return nil, "ReceiptHandleIsInvalid", "The input receipt handle \"" + in.ReceiptHandle + "\" is not a valid receipt handle."
	case !m.visibleAt.After(time.Now()):
		return nil, "MessageNotInflight", "The message referred to is not in flight."
	}
	m.visibleAt = time.Now().Add(time.Duration(*in.VisibilityTimeout) * time.Second)
	return map[string]any{}, "", ""
}
