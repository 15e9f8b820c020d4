package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The proto3 JSON mapping: 64-bit integers as strings (read from numbers too), enums by name
// (read from numbers too), timestamps in RFC 3339 UTC, oneofs as the one field that is set.
func TestProto3JSONMapping(t *testing.T) {
	e := EntryInfo{Name: "f", Type: FileTypeFile, Size: 1 << 40, Mode: 0o644, ModifiedTime: &Timestamp{time.Date(2025, 1, 2, 3, 4, 5, 6, time.FixedZone("x", 3600))}}
	b, err := json.Marshal(e)
	require.NoError(t, err)
	assert.JSONEq(t, `{"name":"f","type":"FILE_TYPE_FILE","size":"1099511627776","mode":420,"modifiedTime":"2025-01-02T02:04:05.000000006Z"}`, string(b))

	var got EntryInfo
	require.NoError(t, json.Unmarshal([]byte(`{"type":2,"size":12,"symlinkTarget":"/home/user/x"}`), &got))
	assert.Equal(t, FileTypeDirectory, got.Type)
	assert.Equal(t, Int64(12), got.Size)
	assert.Equal(t, "/home/user/x", *got.SymlinkTarget)

	var sig SendSignalRequest
	require.NoError(t, json.Unmarshal([]byte(`{"process":{"pid":7},"signal":9}`), &sig))
	assert.Equal(t, SignalSIGKILL, sig.Signal)
	assert.Equal(t, uint32(7), *sig.Process.Pid)

	b, err = json.Marshal(StartResponse{Event: &ProcessEvent{Data: &DataEvent{Stderr: []byte("\xff")}}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"event":{"data":{"stderr":"/w=="}}}`, string(b), "bytes are base64")
	b, err = json.Marshal(StartResponse{Event: &ProcessEvent{Keepalive: &struct{}{}}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"event":{"keepalive":{}}}`, string(b))

	tag := "task-1"
	b, err = json.Marshal(StartRequest{Process: &ProcessConfig{Cmd: "/bin/sh"}, Pty: &PTY{Size: &PTYSize{Cols: 80, Rows: 24}}, Tag: &tag})
	require.NoError(t, err)
	assert.JSONEq(t, `{"process":{"cmd":"/bin/sh"},"pty":{"size":{"cols":80,"rows":24}},"tag":"task-1"}`, string(b))
	b, err = json.Marshal(UpdateRequest{Process: TagSelector(tag), Pty: &PTY{Size: &PTYSize{Cols: 100, Rows: 30}}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"process":{"tag":"task-1"},"pty":{"size":{"cols":100,"rows":30}}}`, string(b), "a oneof selector is its one field")

	b, err = json.Marshal(WatchDirResponse{Start: &struct{}{}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"start":{}}`, string(b), "a watch's start event")
	b, err = json.Marshal(WatchDirResponse{Filesystem: &FilesystemEvent{Name: "a/b.txt", Type: EventWrite}})
	require.NoError(t, err)
	assert.JSONEq(t, `{"filesystem":{"name":"a/b.txt","type":"EVENT_TYPE_WRITE"}}`, string(b))
	var ev FilesystemEvent
	require.NoError(t, json.Unmarshal([]byte(`{"name":"x","type":3}`), &ev))
	assert.Equal(t, EventRemove, ev.Type)

	var c Codec
	var empty Empty
	require.NoError(t, c.Unmarshal(nil, &empty), "an empty body is an empty message")
	assert.Equal(t, "json", c.Name())
}
