package ec2ssm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	ssmtypes "github.com/aws/aws-sdk-go-v2/service/ssm/types"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// TruncationMarker is the optional interface of an output writer (ExecSpec.Stdout or Stderr)
// that wants to know when what it received is a cut of what the program printed, because a
// backend returned at most a fixed amount of output (SSM: 24,000 characters of stdout, 8,000
// of stderr). Exec writes exactly what the backend returned, then calls MarkTruncated on the
// stream's writer. A writer without the method gets nothing extra; instead a one-line notice
// saying which stream was cut is appended to stderr.
type TruncationMarker interface {
	MarkTruncated()
}

// maxStdin bounds ExecSpec.Stdin, which travels inside the command.
const maxStdin = 1 << 20

// runShellScript is the SSM document every execution uses.
const runShellScript = "AWS-RunShellScript"

// executionTimeoutSlack is added to the execution's timeout for the agent-side
// executionTimeout, which only matters when the gateway is gone before the timeout.
const executionTimeoutSlack = 30 * time.Second

// Sandbox is a handle on the instance, acting for one principal. Closing it touches nothing
// on the instance.
type Sandbox struct {
	providers.NoFiles
	providers.NoPackageInstall

	p      *Provider
	id     string
	c      *clients
	runAs  string
	closed atomic.Bool
}

var _ providers.Sandbox = (*Sandbox)(nil)

// ID returns the instance id.
func (s *Sandbox) ID() string { return s.id }

// Close marks the handle closed, as every provider's: Exec then returns fault.Conflict. The
// instance is untouched — an attached environment is never closed (seed
// AttachedEnvironment) — and a later Attach works. Idempotent.
func (s *Sandbox) Close() error {
	s.closed.Store(true)
	return nil
}

// Exec runs spec on the instance through SSM Run Command and returns how it ended (see the
// package doc). A non-zero exit is a status, never an error.
//
// Errors: CheckExecSpec's (fault.Validation, fault.Capability, fault.Policy); fault.Validation
// for a working folder (an attached instance has no workspace) or unreadable standard input;
// fault.Conflict on a closed handle; fault.TooLarge for standard input over 1 MiB; ctx.Err()
// when ctx ends first (the command is cancelled); the classified AWS errors of the package
// doc; fault.Gone when SSM cannot deliver the command to the instance.
func (s *Sandbox) Exec(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if err := providers.CheckExecSpec(TypeName, s.p.caps, spec); err != nil {
		return providers.ExitStatus{}, err
	}
	if dir, _ := providers.CleanPath(spec.Dir); dir != "." {
		return providers.ExitStatus{}, fault.New(fault.Validation, "%s has no workspace, so a working folder cannot be set; change folder inside the command instead (e.g. `cd /srv/app && ./run.sh`)", TypeName)
	}
	if s.closed.Load() {
		return providers.ExitStatus{}, fault.New(fault.Conflict, "%s: the handle on instance '%s' is closed", TypeName, s.id)
	}
	if err := ctx.Err(); err != nil {
		return providers.ExitStatus{}, err
	}
	var stdin []byte
	if spec.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(spec.Stdin, maxStdin+1))
		if err != nil {
			return providers.ExitStatus{}, fault.Wrap(fault.Validation, err, "%s: reading standard input", TypeName)
		}
		if len(b) > maxStdin {
			return providers.ExitStatus{}, fault.New(fault.TooLarge, "%s: standard input is over %d bytes, the most that travels inside an SSM command", TypeName, maxStdin)
		}
		stdin = b
	}
	script := program(spec, s.p.cfg.Python, stdin)
	if s.runAs != "" {
		script = asUser(s.runAs, script)
	}

	in := &ssm.SendCommandInput{
		DocumentName: aws.String(runShellScript),
		InstanceIds:  []string{s.id},
		Comment:      aws.String("sandgate"),
		Parameters:   map[string][]string{"commands": {script}},
	}
	if spec.Timeout > 0 {
		secs := int64(math.Ceil((spec.Timeout + executionTimeoutSlack).Seconds()))
		in.Parameters["executionTimeout"] = []string{strconv.FormatInt(min(secs, 172800), 10)}
	}
	if b := s.p.cfg.OutputS3Bucket; b != "" {
		in.OutputS3BucketName = aws.String(b)
		if pfx := s.p.cfg.OutputS3Prefix; pfx != "" {
			in.OutputS3KeyPrefix = aws.String(pfx)
		}
	}
	sent, err := s.c.ssm.SendCommand(ctx, in)
	if err != nil {
		if ctx.Err() != nil {
			return providers.ExitStatus{}, ctx.Err()
		}
		return providers.ExitStatus{}, classify(err, "%s: sending the command to instance '%s', as %s", TypeName, s.id, s.c.who)
	}
	if sent.Command == nil || aws.ToString(sent.Command.CommandId) == "" {
		return providers.ExitStatus{}, fault.New(fault.Provision, "%s: SSM accepted the command but returned no command id", TypeName)
	}
	cmdID := aws.ToString(sent.Command.CommandId)
	s.p.logger.Debug("ec2_ssm: command sent", "instance", s.id, "command_id", cmdID)
	return s.await(ctx, cmdID, spec)
}

// await polls command cmdID until it finishes, the timeout passes or ctx ends.
func (s *Sandbox) await(ctx context.Context, cmdID string, spec providers.ExecSpec) (providers.ExitStatus, error) {
	var deadline <-chan time.Time
	if spec.Timeout > 0 {
		timer := time.NewTimer(spec.Timeout)
		defer timer.Stop()
		deadline = timer.C
	}
	tick := time.NewTicker(s.p.pollInterval())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			s.cancel(ctx, cmdID)
			return providers.ExitStatus{}, ctx.Err()
		case <-deadline:
			s.cancel(ctx, cmdID)
			inv := s.afterCancel(ctx, cmdID)
			if inv != nil && (inv.Status == ssmtypes.CommandInvocationStatusSuccess ||
				inv.Status == ssmtypes.CommandInvocationStatusFailed && failedDelivery(inv, s.id) == nil) {
				// It finished before the cancellation took effect: not a timeout.
				return s.finish(ctx, cmdID, inv, spec)
			}
			if inv != nil {
				s.write(ctx, cmdID, inv, spec)
			}
			return providers.ExitStatus{TimedOut: true}, nil
		case <-tick.C:
		}
		inv, err := s.invocation(ctx, cmdID)
		switch {
		case err != nil && ctx.Err() != nil:
			s.cancel(ctx, cmdID)
			return providers.ExitStatus{}, ctx.Err()
		case err != nil:
			s.cancel(ctx, cmdID)
			return providers.ExitStatus{}, err
		case inv == nil: // not visible yet
			continue
		}
		switch inv.Status {
		case ssmtypes.CommandInvocationStatusPending, ssmtypes.CommandInvocationStatusInProgress,
			ssmtypes.CommandInvocationStatusDelayed, ssmtypes.CommandInvocationStatusCancelling:
			continue
		case ssmtypes.CommandInvocationStatusSuccess:
			return s.finish(ctx, cmdID, inv, spec)
		case ssmtypes.CommandInvocationStatusFailed:
			if err := failedDelivery(inv, s.id); err != nil {
				return providers.ExitStatus{}, err
			}
			return s.finish(ctx, cmdID, inv, spec)
		case ssmtypes.CommandInvocationStatusTimedOut:
			if aws.ToString(inv.StatusDetails) == "DeliveryTimedOut" {
				return providers.ExitStatus{}, fault.New(fault.Gone, "%s: SSM could not deliver the command to instance '%s' in time; is its agent online?", TypeName, s.id)
			}
			s.write(ctx, cmdID, inv, spec)
			return providers.ExitStatus{TimedOut: true}, nil
		case ssmtypes.CommandInvocationStatusCancelled:
			return providers.ExitStatus{}, fault.New(fault.Provision, "%s: command %s on instance '%s' was cancelled outside the gateway", TypeName, cmdID, s.id)
		default:
			return providers.ExitStatus{}, fault.New(fault.Provision, "%s: command %s on instance '%s' ended in unknown status %q (%s)", TypeName, cmdID, s.id, inv.Status, aws.ToString(inv.StatusDetails))
		}
	}
}

// invocation returns the command's invocation on the instance, or nil while SSM does not know
// it yet (InvocationDoesNotExist).
func (s *Sandbox) invocation(ctx context.Context, cmdID string) (*ssm.GetCommandInvocationOutput, error) {
	inv, err := s.c.ssm.GetCommandInvocation(ctx, &ssm.GetCommandInvocationInput{CommandId: aws.String(cmdID), InstanceId: aws.String(s.id)})
	if err != nil {
		if apiCode(err) == "InvocationDoesNotExist" {
			return nil, nil
		}
		return nil, classify(err, "%s: polling command %s on instance '%s', as %s", TypeName, cmdID, s.id, s.c.who)
	}
	return inv, nil
}

// failedDelivery turns the terminal details of a Failed invocation that never ran the program
// into an error; nil when the program ran (its exit code is the result).
func failedDelivery(inv *ssm.GetCommandInvocationOutput, id string) error {
	switch d := aws.ToString(inv.StatusDetails); d {
	case "Undeliverable":
		return fault.New(fault.Gone, "%s: SSM cannot deliver commands to instance '%s' (Undeliverable): it is stopped, terminated or its agent is gone", TypeName, id)
	case "AccessDenied":
		return fault.New(fault.Policy, "%s: the command on instance '%s' was refused (AccessDenied)", TypeName, id)
	case "InvalidPlatform", "Terminated":
		return fault.New(fault.Provision, "%s: the command on instance '%s' did not run (%s)", TypeName, id, d)
	}
	return nil
}

// cancel asks SSM to cancel the command, best effort, even when ctx has ended.
func (s *Sandbox) cancel(ctx context.Context, cmdID string) {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer stop()
	if _, err := s.c.ssm.CancelCommand(cctx, &ssm.CancelCommandInput{CommandId: aws.String(cmdID), InstanceIds: []string{s.id}}); err != nil {
		s.p.logger.Warn("ec2_ssm: cancelling a command failed; it may run on until its executionTimeout", "instance", s.id, "command_id", cmdID, "error", err)
	}
}

// afterCancel polls the cancelled command for up to CancelWait and returns its final
// invocation (nil when SSM did not report one in time), whose output SSM may still report.
func (s *Sandbox) afterCancel(ctx context.Context, cmdID string) *ssm.GetCommandInvocationOutput {
	cctx, stop := context.WithTimeout(context.WithoutCancel(ctx), s.p.cancelWait())
	defer stop()
	tick := time.NewTicker(s.p.pollInterval())
	defer tick.Stop()
	for {
		inv, err := s.invocation(cctx, cmdID)
		if err == nil && inv != nil {
			switch inv.Status {
			case ssmtypes.CommandInvocationStatusPending, ssmtypes.CommandInvocationStatusInProgress,
				ssmtypes.CommandInvocationStatusDelayed, ssmtypes.CommandInvocationStatusCancelling:
			default:
				return inv
			}
		}
		select {
		case <-cctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// finish writes the output of a finished invocation and returns its exit status.
func (s *Sandbox) finish(ctx context.Context, cmdID string, inv *ssm.GetCommandInvocationOutput, spec providers.ExecSpec) (providers.ExitStatus, error) {
	s.write(ctx, cmdID, inv, spec)
	return providers.ExitStatus{ExitCode: int(inv.ResponseCode)}, nil
}

// write writes the invocation's two streams. A stream that reached its inline limit is read
// from S3 when output_s3_bucket is set; otherwise (or when that fails) it is written as SSM
// returned it and reported as cut.
func (s *Sandbox) write(ctx context.Context, cmdID string, inv *ssm.GetCommandInvocationOutput, spec providers.ExecSpec) {
	streams := []struct {
		name   string
		inline string
		limit  int
		w      io.Writer
	}{
		{"stdout", aws.ToString(inv.StandardOutputContent), StdoutInlineLimit, spec.Stdout},
		{"stderr", aws.ToString(inv.StandardErrorContent), StderrInlineLimit, spec.Stderr},
	}
	var notices []string
	for _, st := range streams {
		if st.w == nil {
			continue
		}
		// "Characters" per the API; counting bytes errs on the side of reporting a cut.
		cut := len(st.inline) >= st.limit
		if cut && s.c.s3 != nil {
			full, err := s.fromS3(ctx, cmdID, st.name)
			if err == nil {
				_, _ = st.w.Write(full)
				continue
			}
			s.p.logger.Warn("ec2_ssm: reading the full output from S3 failed; returning SSM's inline output", "instance", s.id, "command_id", cmdID, "stream", st.name, "error", err)
		}
		_, _ = io.WriteString(st.w, st.inline)
		if !cut {
			continue
		}
		if m, ok := st.w.(TruncationMarker); ok {
			m.MarkTruncated()
		} else {
			notices = append(notices, fmt.Sprintf("\nsandgate: %s was cut at SSM's inline limit of %d characters; set ec2_ssm.output_s3_bucket for full output\n", st.name, st.limit))
		}
	}
	if spec.Stderr != nil {
		for _, n := range notices {
			_, _ = io.WriteString(spec.Stderr, n)
		}
	}
}

// fromS3 reads stream ("stdout" or "stderr") of command cmdID from the output bucket. SSM
// writes it under <prefix>/<command id>/<instance id>/<plugin folders>/<stream> once the
// command has finished, which may take a moment: it waits up to S3Wait for the object to
// appear (the download itself is bounded by ctx only).
func (s *Sandbox) fromS3(ctx context.Context, cmdID, stream string) ([]byte, error) {
	bucket := s.p.cfg.OutputS3Bucket
	prefix := cmdID + "/" + s.id + "/"
	if pfx := strings.TrimSuffix(s.p.cfg.OutputS3Prefix, "/"); pfx != "" {
		prefix = pfx + "/" + prefix
	}
	wctx, stop := context.WithTimeout(ctx, s.p.s3Wait())
	defer stop()
	for {
		key, err := s.findKey(wctx, bucket, prefix, stream)
		if err != nil {
			return nil, err
		}
		if key != "" {
			obj, err := s.c.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
			if err != nil {
				return nil, err
			}
			defer obj.Body.Close()
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, obj.Body); err != nil {
				return nil, err
			}
			return buf.Bytes(), nil
		}
		select {
		case <-wctx.Done():
			return nil, fmt.Errorf("no %s object under s3://%s/%s after %s", stream, bucket, prefix, s.p.s3Wait())
		case <-time.After(s.p.pollInterval()):
		}
	}
}

// findKey lists prefix for the key whose last element is stream ("" when there is none yet).
func (s *Sandbox) findKey(ctx context.Context, bucket, prefix, stream string) (string, error) {
	pages := s3.NewListObjectsV2Paginator(s.c.s3, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return "", err
		}
		for _, o := range page.Contents {
			if k := aws.ToString(o.Key); strings.HasSuffix(k, "/"+stream) {
				return k, nil
			}
		}
	}
	return "", nil
}
