//go:build unix

package remote

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/sandboxd"
)

// A failure once the archive's stream began (here a file cut short while it is read) breaks
// the stream off: the reader gets an error, never the io.EOF of a complete archive.
func TestReadArchiveBreaksOffAFailedStream(t *testing.T) {
	ws := t.TempDir()
	rt, err := sandboxd.New(sandboxd.Options{Workspace: ws})
	require.NoError(t, err)
	defer rt.Close()
	srv := httptest.NewServer(Handler(rt, contractToken, nil))
	defer srv.Close()
	client := NewTCPClient(srv.URL, contractToken)
	defer client.Close()

	// A file far larger than any buffer between the two ends (data: holes are not archived).
	big := filepath.Join(ws, "big")
	require.NoError(t, os.WriteFile(big, bytes.Repeat([]byte("x"), 64<<20), 0o644))

	rc, err := client.ReadArchive(t.Context(), false)
	require.NoError(t, err)
	defer rc.Close()
	hdr, err := tar.NewReader(rc).Next()
	require.NoError(t, err)
	assert.Equal(t, "big", hdr.Name)
	require.NoError(t, os.Truncate(big, 0))
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, rc)
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		t.Fatal("the stream neither ended nor broke off")
	}
	t.Logf("the reader got: %v", err)
	require.Error(t, err, "a partial archive must not read as a complete one (io.Copy turns io.EOF into nil)")
}
