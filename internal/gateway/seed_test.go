package gateway_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/gateway/gatewaytest"
	"github.com/sandgate/sandgate/internal/providers/local"
)

// What gatewaytest.SeedListing writes (the bench's scale rows) is what the gateway serves:
// the principal's sessions and finished tasks, newest first, readable by its token.
func TestSeedListingIsServed(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{})
	l, err := gatewaytest.SeedListing(t.Context(), e.DBURL, gatewaytest.ListingSeed{
		Issuer: e.Issuer.URL(), Subject: "seeded", Profile: "default", Provider: local.TypeName, Sessions: 12, Tasks: 30,
	})
	require.NoError(t, err)
	require.Len(t, l.Sessions, 12)
	require.Len(t, l.Tasks, 30)
	tok := e.Token("seeded")

	var sessions struct {
		Sessions []struct {
			ID string `json:"id"`
		} `json:"sessions"`
	}
	status, _, body := e.Do(http.MethodGet, "/v1/sessions?limit=500", tok, nil, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &sessions))
	var got []string
	for _, s := range sessions.Sessions {
		got = append(got, s.ID)
	}
	require.Equal(t, l.Sessions, got, "newest first: session i is i+1 seconds old")

	var tasks struct {
		Tasks []struct {
			ID string `json:"id"`
		} `json:"tasks"`
	}
	status, _, body = e.Do(http.MethodGet, "/v1/tasks?limit=50", tok, nil, nil)
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.NoError(t, json.Unmarshal(body, &tasks))
	require.Len(t, tasks.Tasks, 30)
	require.Equal(t, l.Tasks[0], tasks.Tasks[0].ID)

	task := e.WaitTask(tok, l.Tasks[7])
	require.Equal(t, "succeeded", task["status"])
	require.Equal(t, l.Sessions[7], task["session_id"])
	result, ok := task["result"].(map[string]any)
	require.True(t, ok, "a finished execution's result: %v", task)
	require.EqualValues(t, 0, result["exit_code"])

	other := e.Token("someone-else")
	status, _, _ = e.Do(http.MethodGet, "/v1/sessions/"+l.Sessions[0], other, nil, nil)
	require.Equal(t, http.StatusNotFound, status, "another principal's session is 404")
}

// gatewaytest.Installation and Sandboxes read what the gateway recorded: its installation id,
// and the sandbox a used session of a provider type names (the bench cleans up with them).
func TestDatabaseReadsWhatTheGatewayRecorded(t *testing.T) {
	t.Parallel()
	e := gatewaytest.Start(t, gatewaytest.Options{})
	inst, err := gatewaytest.Installation(t.Context(), e.DBURL)
	require.NoError(t, err)
	require.Equal(t, e.Gateway.Installation(), inst, "the installation the gateway recorded, not a new one")

	tok := e.Token("sandboxes")
	boxes, err := gatewaytest.Sandboxes(t.Context(), e.DBURL, local.TypeName)
	require.NoError(t, err)
	require.Empty(t, boxes, "no session has a sandbox yet")

	status, _, body := e.Do(http.MethodPost, "/v1/sessions", tok, strings.NewReader(`{"profile":"default"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var sess struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(body, &sess))
	status, _, body = e.Do(http.MethodPost, "/v1/sessions/"+sess.ID+"/commands", tok, strings.NewReader(`{"command":"true"}`), map[string]string{"Content-Type": "application/json"})
	require.Equal(t, http.StatusOK, status, "%s", body)

	row, err := e.Store().GetSession(t.Context(), sess.ID)
	require.NoError(t, err)
	require.NotEmpty(t, row.SandboxID, "a used session names its sandbox")
	boxes, err = gatewaytest.Sandboxes(t.Context(), e.DBURL, local.TypeName)
	require.NoError(t, err)
	require.Equal(t, []string{row.SandboxID}, boxes)
	boxes, err = gatewaytest.Sandboxes(t.Context(), e.DBURL, "docker")
	require.NoError(t, err)
	require.Empty(t, boxes, "only the provider type asked for")

	// Past the first page: the oldest of 1,100 more sessions names a sandbox too.
	l, err := gatewaytest.SeedListing(t.Context(), e.DBURL, gatewaytest.ListingSeed{
		Issuer: e.Issuer.URL(), Subject: "many", Profile: "default", Provider: local.TypeName, Sessions: 1100,
	})
	require.NoError(t, err)
	oldest := l.Sessions[len(l.Sessions)-1]
	require.NoError(t, e.Store().UpdateSessionBackend(t.Context(), oldest, "box-of-the-oldest", "active", time.Now()))
	boxes, err = gatewaytest.Sandboxes(t.Context(), e.DBURL, local.TypeName)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{row.SandboxID, "box-of-the-oldest"}, boxes)
}
