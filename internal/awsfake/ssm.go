package awsfake

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Inline output limits of GetCommandInvocation.
const (
	stdoutLimit = 24000
	stderrLimit = 8000
)

// instanceIDPattern is what SSM accepts as a managed node id.
var instanceIDPattern = regexp.MustCompile(`^m?i-[0-9a-f]{8,17}$`)

// Instance is a managed node played by the fake: its commands run locally in Dir.
type Instance struct {
	ID  string
	Dir string
	// PingStatus is reported by DescribeInstanceInformation; default "Online".
	PingStatus string
}

// command is one SendCommand invocation on one instance.
type command struct {
	id, instance     string
	bucket, prefix   string
	pgid             int
	status, details  string
	code             int
	stdout, stderr   []byte
	start, end       time.Time
	cancelled        bool
	timedOut         bool
	hide             int
	lead             []string
	executionTimeout time.Duration
}

// AddInstance registers a managed node with SSM; its commands run in a new temporary folder.
func (s *Server) AddInstance(id string) *Instance {
	dir, err := os.MkdirTemp(s.scripts, "instance-")
	if err != nil {
		panic(err)
	}
	in := &Instance{ID: id, Dir: dir, PingStatus: "Online"}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.instances[id] = in
	return in
}

// RemoveInstance deregisters a managed node: it is no longer described and commands to it
// fail with InvalidInstanceId.
func (s *Server) RemoveInstance(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.instances, id)
}

func (s *Server) serveSSM(w http.ResponseWriter, r *http.Request, body []byte) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "AmazonSSM.")
	call, id, aerr := s.authenticate(r, body, "ssm")
	call.Service, call.Operation = "ssm", op
	var input map[string]any
	if err := json.Unmarshal(body, &input); err != nil {
		call.ErrorCode = "SerializationException"
		s.record(call)
		ssmError(w, "SerializationException", "the body is not JSON")
		return
	}
	call.Input = input
	fail := func(code, msg string) {
		call.ErrorCode = code
		s.record(call)
		ssmError(w, code, msg)
	}
	switch {
	case aerr != nil:
		fail(aerr.ssm, aerr.msg)
		return
	case id == nil:
		fail("MissingAuthenticationTokenException", "Missing Authentication Token")
		return
	case r.Header.Get("Content-Type") != "application/x-amz-json-1.1":
		fail("UnknownOperationException", "the content type must be application/x-amz-json-1.1")
		return
	case s.throttled(op):
		fail("ThrottlingException", "Rate exceeded")
		return
	}
	var (
		out  any
		code string
		msg  string
	)
	switch op {
	case "DescribeInstanceInformation":
		out, code, msg = s.describeInstanceInformation(body)
	case "SendCommand":
		out, code, msg = s.sendCommand(body)
	case "GetCommandInvocation":
		out, code, msg = s.getCommandInvocation(body)
	case "CancelCommand":
		out, code, msg = s.cancelCommand(body)
	default:
		code, msg = "UnknownOperationException", "awsfake does not implement SSM "+op
	}
	if code != "" {
		fail(code, msg)
		return
	}
	s.record(call)
	b, _ := json.Marshal(out)
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", requestID())
	_, _ = w.Write(b)
}

func ssmError(w http.ResponseWriter, code, msg string) {
	b, _ := json.Marshal(map[string]string{"__type": code, "message": msg})
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.Header().Set("X-Amzn-Requestid", requestID())
	w.WriteHeader(http.StatusBadRequest)
	_, _ = w.Write(b)
}

func epoch(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

func (s *Server) describeInstanceInformation(body []byte) (any, string, string) {
	var in struct {
		Filters []struct {
			Key    string
			Values []string
		}
		InstanceInformationFilterList []struct {
			Key      string   `json:"key"`
			ValueSet []string `json:"valueSet"`
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	var ids []string
	filtered := false
	for _, f := range in.Filters {
		if f.Key == "InstanceIds" {
			ids, filtered = append(ids, f.Values...), true
		}
	}
	for _, f := range in.InstanceInformationFilterList {
		if f.Key == "InstanceIds" {
			ids, filtered = append(ids, f.ValueSet...), true
		}
	}
	for _, id := range ids {
		if !instanceIDPattern.MatchString(id) {
			return nil, "InvalidInstanceId", fmt.Sprintf("Instances [[%s]] not in a valid state for account %s", id, s.Account)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	list := []map[string]any{}
	for id, inst := range s.instances {
		if filtered && !contains(ids, id) {
			continue
		}
		list = append(list, map[string]any{
			"InstanceId":       id,
			"PingStatus":       inst.PingStatus,
			"LastPingDateTime": epoch(time.Now()),
			"AgentVersion":     "3.3.1142.0",
			"IsLatestVersion":  false,
			"PlatformType":     "Linux",
			"PlatformName":     "Amazon Linux",
			"PlatformVersion":  "2023",
			"ResourceType":     "EC2Instance",
			"IPAddress":        "10.0.0.12",
			"ComputerName":     "ip-10-0-0-12.ec2.internal",
			"SourceId":         id,
			"SourceType":       "AWS::EC2::Instance",
		})
	}
	return map[string]any{"InstanceInformationList": list}, "", ""
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (s *Server) sendCommand(body []byte) (any, string, string) {
	var in struct {
		DocumentName       string
		InstanceIds        []string
		Comment            string
		Parameters         map[string][]string
		OutputS3BucketName string
		OutputS3KeyPrefix  string
		TimeoutSeconds     int
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	if in.DocumentName != "AWS-RunShellScript" {
		return nil, "InvalidDocument", "awsfake only runs AWS-RunShellScript, not " + in.DocumentName
	}
	if len(in.InstanceIds) != 1 {
		return nil, "InvalidParameters", "awsfake runs a command on exactly one instance"
	}
	commands := in.Parameters["commands"]
	if len(commands) == 0 {
		return nil, "InvalidParameters", "Parameter \"commands\" is required"
	}
	var execTimeout time.Duration
	if v := in.Parameters["executionTimeout"]; len(v) > 0 {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > 172800 {
			return nil, "InvalidParameters", "executionTimeout must be a number of seconds between 1 and 172800"
		}
		execTimeout = time.Duration(n) * time.Second
	}
	s.mu.Lock()
	inst, ok := s.instances[in.InstanceIds[0]]
	s.mu.Unlock()
	if !ok {
		return nil, "InvalidInstanceId", fmt.Sprintf("Instances [[%s]] not in a valid state for account %s", in.InstanceIds[0], s.Account)
	}
	c, err := s.run(inst, strings.Join(commands, "\n"), in.OutputS3BucketName, in.OutputS3KeyPrefix, execTimeout)
	if err != nil {
		return nil, "InternalServerError", err.Error()
	}
	now := time.Now()
	return map[string]any{"Command": map[string]any{
		"CommandId":          c.id,
		"DocumentName":       in.DocumentName,
		"DocumentVersion":    "$DEFAULT",
		"Comment":            in.Comment,
		"ExpiresAfter":       epoch(now.Add(time.Hour)),
		"Parameters":         in.Parameters,
		"InstanceIds":        in.InstanceIds,
		"Targets":            []any{},
		"RequestedDateTime":  epoch(now),
		"Status":             "Pending",
		"StatusDetails":      "Pending",
		"OutputS3Region":     s.Region,
		"OutputS3BucketName": in.OutputS3BucketName,
		"OutputS3KeyPrefix":  in.OutputS3KeyPrefix,
		"MaxConcurrency":     "50",
		"MaxErrors":          "0",
		"TargetCount":        1,
		"CompletedCount":     0,
		"ErrorCount":         0,
		"TimeoutSeconds":     3600,
	}}, "", ""
}

// run starts script on inst the way the agent does: written to a file, run by /bin/sh in the
// instance's folder, in its own process group, with its streams captured in files.
func (s *Server) run(inst *Instance, script, bucket, prefix string, execTimeout time.Duration) (*command, error) {
	id := requestID()
	dir := filepath.Join(s.scripts, "cmd-"+id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "_script.sh")
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		return nil, err
	}
	outF, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		return nil, err
	}
	errF, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		outF.Close()
		return nil, err
	}
	cmd := exec.Command("/bin/sh", path)
	cmd.Dir = inst.Dir
	cmd.Env = []string{
		"PATH=" + s.sudoDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + inst.Dir,
		"TMPDIR=" + dir,
		"LANG=C.UTF-8",
	}
	cmd.Stdout, cmd.Stderr = outF, errF
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		outF.Close()
		errF.Close()
		return nil, errors.New("awsfake is closed")
	}
	c := &command{
		id: id, instance: inst.ID, bucket: bucket, prefix: prefix,
		status: "InProgress", details: "InProgress", code: -1, start: time.Now(),
		hide: s.hideInvocation, lead: append([]string(nil), s.leadStatuses...), executionTimeout: execTimeout,
	}
	if err := cmd.Start(); err != nil {
		outF.Close()
		errF.Close()
		return nil, err
	}
	outF.Close()
	errF.Close()
	c.pgid = cmd.Process.Pid
	s.commands[id] = c
	var timer *time.Timer
	if execTimeout > 0 {
		timer = time.AfterFunc(execTimeout, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if c.end.IsZero() && !c.cancelled {
				c.timedOut = true
				_ = syscall.Kill(-c.pgid, syscall.SIGKILL)
			}
		})
	}
	s.wg.Go(func() {
		werr := cmd.Wait()
		if timer != nil {
			timer.Stop()
		}
		stdout, _ := os.ReadFile(filepath.Join(dir, "stdout"))
		stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
		code := 0
		var exitErr *exec.ExitError
		if errors.As(werr, &exitErr) {
			// Like the agent: the exit status, or -1 when a signal ended the script.
			code = exitErr.ExitCode()
		} else if werr != nil {
			code = -1
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		c.end, c.stdout, c.stderr, c.code = time.Now(), stdout, stderr, code
		switch {
		case c.cancelled:
			c.status, c.details = "Cancelled", "Cancelled"
		case c.timedOut:
			c.status, c.details = "TimedOut", "ExecutionTimedOut"
		case code == 0:
			c.status, c.details = "Success", "Success"
		default:
			c.status, c.details = "Failed", "Failed"
		}
		if c.bucket != "" && !s.noUpload {
			base := c.id + "/" + c.instance + "/awsrunShellScript/0.awsrunshellscript/"
			if c.prefix != "" {
				base = strings.TrimSuffix(c.prefix, "/") + "/" + base
			}
			if s.buckets[c.bucket] == nil {
				s.buckets[c.bucket] = make(map[string][]byte)
			}
			if len(stdout) > 0 {
				s.buckets[c.bucket][base+"stdout"] = stdout
			}
			if len(stderr) > 0 {
				s.buckets[c.bucket][base+"stderr"] = stderr
			}
		}
	})
	return c, nil
}

// cut returns the first n characters of b, as a string.
func cut(b []byte, n int) string {
	i := 0
	for k := 0; k < n && i < len(b); k++ {
		_, size := utf8.DecodeRune(b[i:])
		i += size
	}
	return string(b[:i])
}

func (s *Server) getCommandInvocation(body []byte) (any, string, string) {
	var in struct {
		CommandId  string
		InstanceId string
		PluginName string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.commands[in.CommandId]
	if !ok || c.instance != in.InstanceId {
		return nil, "InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)"
	}
	if c.hide > 0 {
		c.hide--
		return nil, "InvocationDoesNotExist", "An error occurred (InvocationDoesNotExist)"
	}
	status, details, code := c.status, c.details, c.code
	if len(c.lead) > 0 {
		status, details, code = c.lead[0], c.lead[0], -1
		c.lead = c.lead[1:]
	} else if c.cancelled && c.end.IsZero() {
		status, details = "Cancelling", "Cancelling"
	}
	out := map[string]any{
		"CommandId":              c.id,
		"InstanceId":             c.instance,
		"Comment":                "",
		"DocumentName":           "AWS-RunShellScript",
		"DocumentVersion":        "$DEFAULT",
		"PluginName":             "aws:runShellScript",
		"ResponseCode":           -1,
		"ExecutionStartDateTime": c.start.UTC().Format("2006-01-02T15:04:05.000Z"),
		"ExecutionElapsedTime":   "",
		"ExecutionEndDateTime":   "",
		"Status":                 status,
		"StatusDetails":          details,
		"StandardOutputContent":  "",
		"StandardOutputUrl":      "",
		"StandardErrorContent":   "",
		"StandardErrorUrl":       "",
		"CloudWatchOutputConfig": map[string]any{"CloudWatchLogGroupName": "", "CloudWatchOutputEnabled": false},
	}
	// Output and the response code are reported for finished invocations only (AWS: "If the
	// command hasn't finished running, if ExecutionStatus is neither Succeeded nor Failed, then
	// this string is empty").
	if status == "Success" || status == "Failed" {
		out["ResponseCode"] = code
		out["ExecutionEndDateTime"] = c.end.UTC().Format("2006-01-02T15:04:05.000Z")
		out["ExecutionElapsedTime"] = fmt.Sprintf("PT%.3fS", c.end.Sub(c.start).Seconds())
		out["StandardOutputContent"] = cut(c.stdout, stdoutLimit)
		out["StandardErrorContent"] = cut(c.stderr, stderrLimit)
		if c.bucket != "" {
			base := fmt.Sprintf("https://s3.%s.amazonaws.com/%s/", s.Region, c.bucket)
			if c.prefix != "" {
				base += strings.TrimSuffix(c.prefix, "/") + "/"
			}
			base += c.id + "/" + c.instance + "/awsrunShellScript/0.awsrunshellscript/"
			out["StandardOutputUrl"] = base + "stdout"
			out["StandardErrorUrl"] = base + "stderr"
		}
	}
	return out, "", ""
}

func (s *Server) cancelCommand(body []byte) (any, string, string) {
	var in struct {
		CommandId   string
		InstanceIds []string
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "SerializationException", err.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.commands[in.CommandId]
	if !ok {
		return nil, "InvalidCommandId", "the command id is not known"
	}
	if c.end.IsZero() && !c.cancelled {
		c.cancelled = true
		_ = syscall.Kill(-c.pgid, syscall.SIGKILL)
	}
	return map[string]any{}, "", ""
}

// Running returns the number of commands whose script has not ended yet.
func (s *Server) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.commands {
		if c.end.IsZero() {
			n++
		}
	}
	return n
}
