//go:build unix

package remote

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
)

// A sandboxd from before port tunnels answers unknown-route: the client says the image is too
// old instead of reporting an internal error.
func TestDialPortOfAnOlderSandboxd(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, newProblem(http.StatusNotFound, kindUnknownRoute, "no route "+r.URL.Path))
	}))
	defer srv.Close()
	c := NewTCPClient(srv.URL, "token")
	defer c.Close()
	_, err := c.DialPort(t.Context(), 8000)
	require.Error(t, err)
	assert.Equal(t, fault.Capability, fault.KindOf(err))
	assert.Contains(t, err.Error(), "rebuild the image")
}
