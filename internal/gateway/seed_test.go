package gateway_test

import (
	"encoding/json"
	"net/http"
	"testing"

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
