// Package queue holds the queue flavor's transports (docs/semantics.md §10 queue): the gateway
// enqueues each execution, `gateway worker` processes consume them. Only requests travel on a
// transport; workers record completions in the task rows (Postgres), where every gateway
// waits for them.
//
// Delivery is at least once. The domain (internal/broker.Queued) makes a redelivered message
// safe to receive twice, keeps each session's executions in submission order across the
// fleet, and caps how often one may start; transports move bytes, redeliver, and report how
// often they delivered a message (Delivery.ReceiveCount) where they can.
//
// Built in:
//
//   - postgres: River jobs inserted in the task row's own transaction; a claimed job is
//     offered again after rescue_after.
//   - nats: a JetStream work queue; in-progress heartbeats keep a running message, a silent
//     worker's message is redelivered after ack_wait.
//   - kafka: one input topic keyed by session id, so one session's executions share a
//     partition and keep their order; a consumer group of workers, offsets committed only
//     past records whose handler returned nil (records of different sessions in one
//     partition run side by side, a session's one at a time). A dead worker's partitions
//     move to the others after the group's session timeout and resume at the last commit. A
//     failed delivery is produced again, behind the partition's later records, with its
//     failed-delivery header raised by one (see Kafka).
//   - sqs: a FIFO queue with MessageGroupId = session id and MessageDeduplicationId = task id;
//     a received message stays invisible for the visibility timeout, extended by heartbeats
//     while its handler runs; SQS's ApproximateReceiveCount is the receive count, and a
//     message SQS moves to the dead-letter queue of the queue's redrive policy is recorded as
//     a permanent failure (see SQS).
//   - in_memory: one process (tests and `gateway dev`).
//
// Ordered transports (kafka, sqs) hand out each session's messages strictly in order, so the
// handler's answers map onto them as follows: nil acknowledges; ErrOutOfTurn sends the
// message again behind its session's later ones (uncounted) and acknowledges this copy; any
// other ErrRetryLater keeps the message and runs the handler again after the delay
// (uncounted); any other error is a failed delivery, redelivered and counted.
//
// Another transport is added by implementing Transport; nothing else changes.
package queue
