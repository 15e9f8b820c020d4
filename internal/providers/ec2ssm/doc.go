// Package ec2ssm is the ec2_ssm provider: it runs programs on an existing EC2 instance (or any
// SSM managed node) through AWS Systems Manager Run Command (docs/semantics.md §12, "ec2_ssm").
// It is attach-only (provisions=false, attaches_external=true): a profile names the instance
// with attach_to and must say environment: attached; the configuration refuses any other
// combination (docs/semantics.md §5–§6). Create binds to that instance, Destroy never touches it.
//
// Attach (and Create) resolve the AWS identity for the principal, then check that the instance
// is registered with SSM (DescribeInstanceInformation filtered by InstanceIds): an empty
// answer or InvalidInstanceId is fault.Gone. An id other than the profile's instance is Gone
// too, without any AWS call.
//
// Executions (Sandbox.Exec):
//   - every execution is one SendCommand of the AWS-RunShellScript document, polled with
//     GetCommandInvocation every Provider.PollInterval (Pending, InProgress, Delayed and
//     InvocationDoesNotExist keep polling). The exit code is the invocation's ResponseCode;
//     stdout and stderr are its two separate contents. There is no persistent shell: each
//     execution is a new process, so a cd or an exported variable does not carry over
//     (capabilities: stateful false);
//   - a command is sent as it is; python code is fed to `python3 - <<'SANDGATE_EOF'` through
//     a quoted here-document whose delimiter never collides with a line of the code
//     (SANDGATE_EOF_1, _2, … while a line equals it);
//   - ExecSpec.Env becomes `export NAME='value'` lines (names validated, values single-quoted,
//     so nothing in a value is ever interpreted); python gets PYTHONUNBUFFERED=1;
//   - standard input is empty (/dev/null) unless ExecSpec.Stdin is set; it is then shipped
//     base64-encoded inside the script, decoded into an unlinked temporary file on the
//     instance and opened as the program's standard input (python code then reads its program
//     from file descriptor 3 instead of standard input);
//   - with a user-mode principal whose credentials carry RunAs, the whole program runs as
//     `sudo -n -u <user> sh -c '<program>'` (user name validated, program single-quoted);
//   - when the timeout passes the command is cancelled (CancelCommand) and the status says
//     TimedOut; SSM documents output only for finished invocations, so output of a cancelled
//     command is whatever SSM still reports (usually none). When ctx ends the command is
//     cancelled too and Exec returns ctx.Err(). An executionTimeout slightly longer than the
//     timeout is also sent, so the agent ends the command if the gateway is gone;
//   - SSM returns at most 24,000 characters of stdout and 8,000 of stderr inline. Exec writes
//     exactly what SSM returned; a stream that reached its limit counts as cut and is reported
//     to its writer through the optional TruncationMarker interface (or, when the writer does
//     not implement it, by a one-line notice appended to stderr). With output_s3_bucket set,
//     SSM also writes the full streams to S3 and Exec reads a cut stream back from there
//     (same identity as the SSM calls).
//
// Identity:
//   - agent mode: the gateway's own AWS identity, from the default credential chain
//     (config.LoadDefaultConfig), in the block's region;
//   - user mode: the principal's role (Credentials.RoleARN) is required (fault.Policy before
//     any AWS call otherwise) and assumed with STS AssumeRole using the gateway's credentials,
//     RoleSessionName "sandgate-<subject>" and SourceIdentity "<subject>" (both limited to
//     [A-Za-z0-9_+=,.@-], other characters replaced by "_", cut to 64), so CloudTrail names the
//     real user; or, with web_identity: true, with AssumeRoleWithWebIdentity and the caller's
//     own OIDC token (an unsigned call: the gateway needs no AWS credentials at all). The
//     resulting credentials are cached per (subject, role) and refreshed before they expire.
//     Every SSM and S3 call of a user-mode execution is signed with them.
//
// AWS errors are classified: access denied (from STS or SSM) and rejected tokens are
// fault.Policy, InvalidInstanceId is fault.Gone, everything else fault.Provision. Throttling is
// retried by the SDK's standard retryer.
//
// The package was tested against the real AWS SDK clients talking to a local fake of STS, SSM
// and S3 (package awsfake), not against AWS itself; see docs/providers/ec2-ssm.md.
package ec2ssm
