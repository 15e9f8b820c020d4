// Package wire is Sandgate's own description of the subset of E2B's three wire protocols that
// the e2b provider speaks and its test fake (package e2bfake) serves. It holds types only, no
// behaviour, so that the client and the fake cannot drift apart silently; both are checked
// against E2B's official JavaScript SDK in the fake's tests.
//
// The three protocols, as E2B publishes them (e2b-dev/infra spec/openapi.yml and
// packages/envd/spec/, e2b-dev/code-interpreter template/server/):
//
//   - the control plane: a JSON REST API at https://api.<domain>, authenticated by the
//     X-API-Key header (APIKeyHeader). Used: POST /sandboxes (NewSandbox → 201 Sandbox),
//     POST /sandboxes/{id}/connect (ConnectSandbox → 200 running or 201 resumed, Sandbox),
//     POST /sandboxes/{id}/timeout (TimeoutRequest → 204), GET /sandboxes/{id} (SandboxDetail),
//     GET /v2/sandboxes?metadata=… (ListedSandbox list), DELETE /sandboxes/{id} (204). Errors
//     are Error bodies; 404 means the sandbox does not exist (any more);
//   - envd, the daemon in every sandbox, at https://49983-<id>.<domain> (or one proxy URL
//     that routes by the E2b-Sandbox-Id and E2b-Sandbox-Port headers): two Connect-RPC
//     services, process.Process and filesystem.Filesystem (the messages below, named after
//     their proto fields in the proto3 JSON mapping: lowerCamelCase names, 64-bit integers as
//     strings, enums as names, bytes as base64), and a plain HTTP files API, GET and POST
//     /files?path=… (raw bytes; POST also takes multipart/form-data), answering errors as
//     Error bodies (400 bad path or a folder, 404 missing). With a sandbox created secure,
//     every envd request carries the sandbox's envd access token in X-Access-Token; with
//     network.allowPublicTraffic false, requests to its other ports carry the traffic access
//     token in E2B-Traffic-Access-Token;
//   - the code interpreter of the code-interpreter templates, on port 49999 of the same
//     sandbox: POST /execute (ExecuteRequest → a stream of newline-delimited Output objects
//     ending with {"type":"end_of_execution"}), and /contexts (GET list, POST create,
//     DELETE /contexts/{id}, POST /contexts/{id}/restart), each context a Jupyter kernel.
//
// The Connect-RPC messages travel with Codec, a plain encoding/json codec for
// connectrpc.com/connect: this package's structs carry the proto3 JSON names, so the
// library does the Connect protocol (envelopes, end-of-stream, errors, deadlines) and no
// generated protobuf code is needed for the dozen messages used.
package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// Header names of the protocols.
const (
	APIKeyHeader        = "X-API-Key"               // control plane: the team's API key
	AccessTokenHeader   = "X-Access-Token"          // envd: the sandbox's envd access token (secure sandboxes)
	SandboxIDHeader     = "E2b-Sandbox-Id"          // a proxy's routing header: the sandbox
	SandboxPortHeader   = "E2b-Sandbox-Port"        // a proxy's routing header: the port in it
	KeepalivePingHeader = "Keepalive-Ping-Interval" // envd: seconds between keepalive events
	// TrafficTokenHeader carries the sandbox's traffic access token to its ports other than
	// envd's, for sandboxes created with network.allowPublicTraffic false (E2B's proxy answers
	// 403 without it).
	TrafficTokenHeader = "E2B-Traffic-Access-Token"
)

// Ports inside a sandbox.
const (
	EnvdPort            = 49983
	CodeInterpreterPort = 49999
)

// Connect-RPC procedures (package.Service/Method of packages/envd/spec).
const (
	ProcStart      = "/process.Process/Start"
	ProcConnect    = "/process.Process/Connect"
	ProcList       = "/process.Process/List"
	ProcSendInput  = "/process.Process/SendInput"
	ProcCloseStdin = "/process.Process/CloseStdin"
	ProcSendSignal = "/process.Process/SendSignal"
	ProcUpdate     = "/process.Process/Update"
	FSStat         = "/filesystem.Filesystem/Stat"
	FSListDir      = "/filesystem.Filesystem/ListDir"
	FSMakeDir      = "/filesystem.Filesystem/MakeDir"
	FSMove         = "/filesystem.Filesystem/Move"
	FSRemove       = "/filesystem.Filesystem/Remove"
	FSWatchDir     = "/filesystem.Filesystem/WatchDir"
)

// ---- control plane (spec/openapi.yml) ----

// NewSandbox is the body of POST /sandboxes.
type NewSandbox struct {
	TemplateID string `json:"templateID"`
	// Timeout is the sandbox's time to live in seconds (E2B's default 15).
	Timeout *int32 `json:"timeout,omitempty"`
	// AutoPause pauses instead of killing the sandbox when the timeout passes.
	AutoPause *bool `json:"autoPause,omitempty"`
	// Secure makes envd require the envd access token on every request.
	Secure *bool `json:"secure,omitempty"`
	// AllowInternetAccess false denies all egress (like denyOut 0.0.0.0/0).
	AllowInternetAccess *bool             `json:"allow_internet_access,omitempty"`
	Network             *NetworkConfig    `json:"network,omitempty"`
	Metadata            map[string]string `json:"metadata,omitempty"`
	EnvVars             map[string]string `json:"envVars,omitempty"`
}

// AllTraffic is the CIDR that stands for every IPv4 destination in egress rules.
const AllTraffic = "0.0.0.0/0"

// NetworkConfig is a sandbox's egress configuration: allowed entries (CIDRs, IPs, domain names
// such as "example.com" or "*.example.com") take precedence over denied ones (CIDRs, IPs).
type NetworkConfig struct {
	AllowOut           []string `json:"allowOut,omitempty"`
	DenyOut            []string `json:"denyOut,omitempty"`
	AllowPublicTraffic *bool    `json:"allowPublicTraffic,omitempty"`
}

// Sandbox is the answer of create and connect.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken,omitempty"`
	// Domain is the base domain of the sandbox's traffic; nil means the client's own.
	Domain *string `json:"domain,omitempty"`
}

// ListedSandbox is one entry of GET /v2/sandboxes.
type ListedSandbox struct {
	TemplateID  string            `json:"templateID"`
	Alias       string            `json:"alias,omitempty"`
	SandboxID   string            `json:"sandboxID"`
	ClientID    string            `json:"clientID"`
	StartedAt   time.Time         `json:"startedAt"`
	EndAt       time.Time         `json:"endAt"`
	CPUCount    int32             `json:"cpuCount"`
	MemoryMB    int32             `json:"memoryMB"`
	DiskSizeMB  int32             `json:"diskSizeMB"`
	Metadata    map[string]string `json:"metadata,omitempty"`
	State       string            `json:"state"` // running | paused
	EnvdVersion string            `json:"envdVersion"`
}

// SandboxDetail is the answer of GET /sandboxes/{id}.
type SandboxDetail struct {
	ListedSandbox
	EnvdAccessToken     string         `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool          `json:"allowInternetAccess,omitempty"`
	Domain              *string        `json:"domain,omitempty"`
	Network             *NetworkConfig `json:"network,omitempty"`
}

// ConnectSandbox is the body of POST /sandboxes/{id}/connect: the new time to live in seconds
// (only ever extends it).
type ConnectSandbox struct {
	Timeout int32 `json:"timeout"`
}

// TimeoutRequest is the body of POST /sandboxes/{id}/timeout: the sandbox expires this many
// seconds from now.
type TimeoutRequest struct {
	Timeout int32 `json:"timeout"`
}

// Error is the error body of the control plane and of envd's HTTP API.
type Error struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

// ---- envd process service (packages/envd/spec/process/process.proto) ----

// ProcessConfig is what to run.
type ProcessConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

// StartRequest starts a process; the answer is a stream of StartResponse.
type StartRequest struct {
	Process *ProcessConfig `json:"process"`
	// Pty runs the process on a new pseudo-terminal of this size (its controlling terminal:
	// stdin, stdout and stderr); its output then comes as DataEvent.Pty, input goes as
	// ProcessInput.Pty, Update resizes it, and CloseStdin is refused (send ^D instead).
	Pty *PTY `json:"pty,omitempty"`
	// Tag names the process for ProcessSelector (envd does not require tags to be unique).
	Tag *string `json:"tag,omitempty"`
	// Stdin keeps the process's standard input open for SendInput (default true on envd
	// before the field existed; Sandgate always sets it for processes without a pty).
	Stdin *bool `json:"stdin,omitempty"`
}

// PTY is a pseudo-terminal's configuration.
type PTY struct {
	Size *PTYSize `json:"size,omitempty"`
}

// PTYSize is a terminal's size in character cells.
type PTYSize struct {
	Cols uint32 `json:"cols,omitempty"`
	Rows uint32 `json:"rows,omitempty"`
}

// UpdateRequest changes a running process: its terminal's size (the program gets SIGWINCH).
type UpdateRequest struct {
	Process *ProcessSelector `json:"process"`
	Pty     *PTY             `json:"pty,omitempty"`
}

// StartResponse is one event of a started process.
type StartResponse struct {
	Event *ProcessEvent `json:"event"`
}

// ConnectResponse is one event of a process followed again.
type ConnectResponse = StartResponse

// ProcessEvent is one of start, data, end or keepalive.
type ProcessEvent struct {
	Start     *StartEvent `json:"start,omitempty"`
	Data      *DataEvent  `json:"data,omitempty"`
	End       *EndEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

// StartEvent carries the process id.
type StartEvent struct {
	Pid uint32 `json:"pid,omitempty"`
}

// DataEvent carries one chunk of output (exactly one field set).
type DataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

// EndEvent says how the process ended. envd fills it from Go's os.ProcessState: ExitCode is
// -1 and Exited false when a signal ended the process, Status reads "exit status 3" or
// "signal: killed", Error the error of waiting for it, if any.
type EndEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// ProcessSelector names a process by pid or tag.
type ProcessSelector struct {
	Pid *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// PidSelector selects the process pid.
func PidSelector(pid uint32) *ProcessSelector { return &ProcessSelector{Pid: &pid} }

// TagSelector selects the process tagged tag.
func TagSelector(tag string) *ProcessSelector { return &ProcessSelector{Tag: &tag} }

// ConnectRequest follows a running process again: a start event, then what it writes from
// now on (envd replays nothing it wrote before), then its end. A process that ended within
// the last 30 s gives its start and end events only (envd keeps its exit that long since
// envd 0.6.12; an older envd answers NotFound).
type ConnectRequest struct {
	Process *ProcessSelector `json:"process"`
}

// ProcessInput is input for stdin (or a pty).
type ProcessInput struct {
	Stdin []byte `json:"stdin,omitempty"`
	Pty   []byte `json:"pty,omitempty"`
}

// SendInputRequest writes to a process's standard input.
type SendInputRequest struct {
	Process *ProcessSelector `json:"process"`
	Input   *ProcessInput    `json:"input"`
}

// CloseStdinRequest closes a process's standard input (EOF).
type CloseStdinRequest struct {
	Process *ProcessSelector `json:"process"`
}

// SendSignalRequest signals a process.
type SendSignalRequest struct {
	Process *ProcessSelector `json:"process"`
	Signal  Signal           `json:"signal"`
}

// ListRequest lists the running processes.
type ListRequest struct{}

// ListResponse is the answer of List.
type ListResponse struct {
	Processes []ProcessInfo `json:"processes,omitempty"`
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	Config *ProcessConfig `json:"config,omitempty"`
	Pid    uint32         `json:"pid,omitempty"`
	Tag    *string        `json:"tag,omitempty"`
}

// Empty is the empty answer of SendInput, CloseStdin, SendSignal, Update and Remove.
type Empty struct{}

// Signal is the process.Signal enum, by name.
type Signal string

// Signals of SendSignalRequest.
const (
	SignalUnspecified Signal = "SIGNAL_UNSPECIFIED"
	SignalSIGTERM     Signal = "SIGNAL_SIGTERM"
	SignalSIGKILL     Signal = "SIGNAL_SIGKILL"
)

var signalNumbers = map[int]Signal{0: SignalUnspecified, 15: SignalSIGTERM, 9: SignalSIGKILL}

// UnmarshalJSON accepts the enum's name or its number (both are valid proto3 JSON).
func (s *Signal) UnmarshalJSON(b []byte) error {
	name, err := enumJSON(b, func(n int) (string, bool) { v, ok := signalNumbers[n]; return string(v), ok })
	*s = Signal(name)
	return err
}

// ---- envd filesystem service (packages/envd/spec/filesystem/filesystem.proto) ----

// FileType is the filesystem.FileType enum, by name. For a symlink envd reports the type of
// its target (and SymlinkTarget); a dangling one is FileTypeUnspecified.
type FileType string

// File types of EntryInfo.
const (
	FileTypeUnspecified FileType = "FILE_TYPE_UNSPECIFIED"
	FileTypeFile        FileType = "FILE_TYPE_FILE"
	FileTypeDirectory   FileType = "FILE_TYPE_DIRECTORY"
	FileTypeSymlink     FileType = "FILE_TYPE_SYMLINK"
)

var fileTypeNumbers = map[int]FileType{0: FileTypeUnspecified, 1: FileTypeFile, 2: FileTypeDirectory, 3: FileTypeSymlink}

// UnmarshalJSON accepts the enum's name or its number.
func (t *FileType) UnmarshalJSON(b []byte) error {
	name, err := enumJSON(b, func(n int) (string, bool) { v, ok := fileTypeNumbers[n]; return string(v), ok })
	*t = FileType(name)
	return err
}

// EntryInfo describes one file system entry (lstat: a symlink is reported, not followed;
// SymlinkTarget is then its resolved absolute target, or its own path when it dangles).
type EntryInfo struct {
	Name          string            `json:"name,omitempty"`
	Type          FileType          `json:"type,omitempty"`
	Path          string            `json:"path,omitempty"`
	Size          Int64             `json:"size,omitempty"`
	Mode          uint32            `json:"mode,omitempty"`
	Permissions   string            `json:"permissions,omitempty"`
	Owner         string            `json:"owner,omitempty"`
	Group         string            `json:"group,omitempty"`
	ModifiedTime  *Timestamp        `json:"modifiedTime,omitempty"`
	SymlinkTarget *string           `json:"symlinkTarget,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
}

// StatRequest stats path.
type StatRequest struct {
	Path string `json:"path"`
}

// StatResponse is Stat's answer.
type StatResponse struct {
	Entry *EntryInfo `json:"entry"`
}

// ListDirRequest lists path (following it when it is a symlink) to Depth levels (0 means 1).
type ListDirRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth,omitempty"`
}

// ListDirResponse is ListDir's answer.
type ListDirResponse struct {
	Entries []*EntryInfo `json:"entries,omitempty"`
}

// MakeDirRequest makes path and its parents.
type MakeDirRequest struct {
	Path string `json:"path"`
}

// MakeDirResponse is MakeDir's answer.
type MakeDirResponse struct {
	Entry *EntryInfo `json:"entry"`
}

// MoveRequest renames Source to Destination.
type MoveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// MoveResponse is Move's answer.
type MoveResponse struct {
	Entry *EntryInfo `json:"entry"`
}

// RemoveRequest removes path (recursively: envd uses os.RemoveAll).
type RemoveRequest struct {
	Path string `json:"path"`
}

// WatchDirRequest watches folder Path (and, Recursive, the folders under it); the answer is a
// stream of WatchDirResponse: a start event once it watches, then one event per change.
// IncludeEntry adds the changed entry to each event (envd 0.6.3+); AllowNetworkMounts lets it
// watch a network file system (envd 0.6.4+).
type WatchDirRequest struct {
	Path               string `json:"path"`
	Recursive          bool   `json:"recursive,omitempty"`
	IncludeEntry       bool   `json:"includeEntry,omitempty"`
	AllowNetworkMounts bool   `json:"allowNetworkMounts,omitempty"`
}

// WatchDirResponse is one event of a watch (exactly one field set).
type WatchDirResponse struct {
	Start      *struct{}        `json:"start,omitempty"`
	Filesystem *FilesystemEvent `json:"filesystem,omitempty"`
	Keepalive  *struct{}        `json:"keepalive,omitempty"`
}

// FilesystemEvent is one change: Name is the changed entry's path relative to the watched
// folder.
type FilesystemEvent struct {
	Name  string     `json:"name,omitempty"`
	Type  EventType  `json:"type,omitempty"`
	Entry *EntryInfo `json:"entry,omitempty"`
}

// EventType is the filesystem.EventType enum, by name.
type EventType string

// Event types of FilesystemEvent.
const (
	EventCreate EventType = "EVENT_TYPE_CREATE"
	EventWrite  EventType = "EVENT_TYPE_WRITE"
	EventRemove EventType = "EVENT_TYPE_REMOVE"
	EventRename EventType = "EVENT_TYPE_RENAME"
	EventChmod  EventType = "EVENT_TYPE_CHMOD"
)

var eventTypeNumbers = map[int]EventType{1: EventCreate, 2: EventWrite, 3: EventRemove, 4: EventRename, 5: EventChmod}

// UnmarshalJSON accepts the enum's name or its number.
func (t *EventType) UnmarshalJSON(b []byte) error {
	name, err := enumJSON(b, func(n int) (string, bool) { v, ok := eventTypeNumbers[n]; return string(v), ok })
	*t = EventType(name)
	return err
}

// UploadedEntry is one element of the answer of POST /files.
type UploadedEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"` // "file"
}

// ---- code interpreter (e2b-dev/code-interpreter template/server) ----

// ExecuteRequest is the body of POST /execute: code for a context (by id) or for the default
// context of a language; never both. EnvVars apply to this execution only.
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID *string           `json:"context_id,omitempty"`
	Language  *string           `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
}

// Output types of the /execute stream.
const (
	OutputStdout             = "stdout"
	OutputStderr             = "stderr"
	OutputResult             = "result"
	OutputError              = "error"
	OutputNumberOfExecutions = "number_of_executions"
	OutputEndOfExecution     = "end_of_execution"
	OutputKeepalive          = "keepalive"
)

// Output is one line of the /execute stream. Which fields are set depends on Type: Text and
// Timestamp (stdout, stderr), Name, Value and Traceback (error: the exception; the traceback
// as IPython formats it, with terminal colour codes), ExecutionCount (number_of_executions),
// Text and IsMainResult plus other formats (result: Jupyter display data; the main result is
// the value of the cell's last expression).
type Output struct {
	Type           string     `json:"type"`
	Text           string     `json:"text,omitempty"`
	Timestamp      *time.Time `json:"timestamp,omitempty"`
	Name           string     `json:"name,omitempty"`
	Value          string     `json:"value,omitempty"`
	Traceback      string     `json:"traceback,omitempty"`
	ExecutionCount int        `json:"execution_count,omitempty"`
	IsMainResult   bool       `json:"is_main_result,omitempty"`
}

// Context is one code context (a Jupyter kernel).
type Context struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// CreateContext is the body of POST /contexts (defaults: python, /home/user).
type CreateContext struct {
	Language *string `json:"language,omitempty"`
	Cwd      *string `json:"cwd,omitempty"`
}

// ---- scalar encodings of the proto3 JSON mapping ----

// Int64 is a proto int64: written as a JSON string, read from a string or a number.
type Int64 int64

// MarshalJSON writes the value as a decimal string.
func (v Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(v), 10) + `"`), nil
}

// UnmarshalJSON reads a string or a number.
func (v *Int64) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("wire: int64 %s: %w", b, err)
	}
	*v = Int64(n)
	return nil
}

// Timestamp is a google.protobuf.Timestamp: RFC 3339 in UTC with nine fractional digits.
type Timestamp struct{ time.Time }

// MarshalJSON writes the UTC time with nanoseconds.
func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format("2006-01-02T15:04:05.000000000Z") + `"`), nil
}

// UnmarshalJSON reads any RFC 3339 time.
func (t *Timestamp) UnmarshalJSON(b []byte) error {
	return t.Time.UnmarshalJSON(b)
}

// enumJSON reads a proto enum given as its name or its number.
func enumJSON(b []byte, byNumber func(int) (string, bool)) (string, error) {
	var name string
	if err := json.Unmarshal(b, &name); err == nil {
		return name, nil
	}
	var n int
	if err := json.Unmarshal(b, &n); err != nil {
		return "", fmt.Errorf("wire: enum value %s is neither a name nor a number", b)
	}
	if s, ok := byNumber(n); ok {
		return s, nil
	}
	return strconv.Itoa(n), nil
}

// Codec is the "json" codec of connectrpc.com/connect for this package's message types: plain
// encoding/json over structs that carry the proto3 JSON field names. Register it on clients and
// handlers with connect.WithCodec(wire.Codec{}).
type Codec struct{}

// Name is "json", so requests go out as application/json (unary) and
// application/connect+json (streams), the format envd and E2B's JavaScript SDK use.
func (Codec) Name() string { return "json" }

// Marshal encodes v.
func (Codec) Marshal(v any) ([]byte, error) { return json.Marshal(v) }

// Unmarshal decodes data into v; an empty body is an empty message.
func (Codec) Unmarshal(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return json.Unmarshal(data, v)
}

// StrictCodec is Codec refusing fields a message does not have. envd itself discards unknown
// fields (connect-go's default); the fake serves with StrictCodec to check that this package
// describes every field a client sends.
type StrictCodec struct{ Codec }

// Unmarshal decodes data into v, refusing unknown fields.
func (StrictCodec) Unmarshal(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
