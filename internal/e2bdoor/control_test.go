package e2bdoor_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/config"
	"github.com/sandgate/sandgate/internal/e2bdoor"
)

type attempt[T any] struct {
	Value  T       `json:"value"`
	Thrown *thrown `json:"thrown"`
}

// TestControlPlaneWithTheOfficialSDK drives the door's control plane with E2B's JavaScript SDK,
// unchanged, on a Sandgate API key: sandboxes are made (template → profile, metadata → labels,
// timeout → lifetime, E2B's default lifetime when none is given), read back, listed by
// metadata and state page by page, given a new timeout and killed; what the door does not
// serve is refused with E2B's errors, saying so.
func TestControlPlaneWithTheOfficialSDK(t *testing.T) {
	t.Parallel()
	d := localDoor(t, nil)
	_, key := d.key("alice", nil, nil)
	var got struct {
		IDs  []string `json:"ids"`
		Info struct {
			SandboxID   string            `json:"sandboxId"`
			TemplateID  string            `json:"templateId"`
			Metadata    map[string]string `json:"metadata"`
			State       string            `json:"state"`
			LifetimeS   int               `json:"lifetimeS"`
			EnvdVersion string            `json:"envdVersion"`
			OnTimeout   string            `json:"onTimeout"`
		} `json:"info"`
		DefaultLifetimeS int      `json:"defaultLifetimeS"`
		ListedDoor       []string `json:"listedDoor"`
		ListedFirst      []string `json:"listedFirst"`
		ListedRunning    []string `json:"listedRunning"`
		ListedPaused     []string `json:"listedPaused"`
		ListedAll        []struct {
			ID       string            `json:"id"`
			State    string            `json:"state"`
			Metadata map[string]string `json:"metadata"`
		} `json:"listedAll"`
		SetTimeout       bracketed     `json:"setTimeout"`
		Running          bool          `json:"running"`
		Killed           bool          `json:"killed"`
		KilledAgain      bool          `json:"killedAgain"`
		InfoAfterKill    attempt[any]  `json:"infoAfterKill"`
		ConnectAfterKill attempt[any]  `json:"connectAfterKill"`
		RunningAfterKill bool          `json:"runningAfterKill"`
		UnknownTemplate  attempt[any]  `json:"unknownTemplate"`
		EgressRules      attempt[any]  `json:"egressRules"`
		Internet         attempt[any]  `json:"internet"`
		NoInternet       attempt[bool] `json:"noInternet"`
		Metrics          attempt[any]  `json:"metrics"`
		Snapshot         attempt[any]  `json:"snapshot"`
		Volumes          attempt[any]  `json:"volumes"`
		TooLong          attempt[any]  `json:"tooLong"`
		AutoPause        attempt[any]  `json:"autoPause"`
	}
	d.sdk(key, "control", &got)

	require.Len(t, got.IDs, 3)
	first, second, third := got.IDs[0], got.IDs[1], got.IDs[2]
	assert.Equal(t, first, got.Info.SandboxID)
	assert.Equal(t, "default", got.Info.TemplateID, "E2B's default template is served by the default profile")
	assert.Equal(t, map[string]string{"suite": "door", "kind": "first"}, got.Info.Metadata)
	assert.Equal(t, "running", got.Info.State)
	assert.Equal(t, 120, got.Info.LifetimeS, "timeoutMs is the session's lifetime")
	assert.Equal(t, 15, got.DefaultLifetimeS, "E2B's default timeout")
	assert.Equal(t, e2bdoor.EnvdVersion, got.Info.EnvdVersion)
	assert.Equal(t, "kill", got.Info.OnTimeout)

	assert.ElementsMatch(t, []string{first, second}, got.ListedDoor, "metadata filter, across pages of one")
	assert.Equal(t, []string{first}, got.ListedFirst, "every pair must match")
	assert.ElementsMatch(t, []string{first, second, third}, got.ListedRunning)
	assert.Empty(t, got.ListedPaused)
	require.Len(t, got.ListedAll, 3)
	assert.Equal(t, third, got.ListedAll[0].ID, "newest first")
	assert.Equal(t, map[string]string{"suite": "elsewhere"}, got.ListedAll[0].Metadata)

	assert.True(t, got.SetTimeout.Within, "setTimeout sets the lifetime from now: %+v", got.SetTimeout)
	assert.True(t, got.Running)
	assert.True(t, got.Killed)
	assert.False(t, got.KilledAgain, "killing a killed sandbox: false (404)")
	require.NotNil(t, got.InfoAfterKill.Thrown)
	assert.Equal(t, "SandboxNotFoundError", got.InfoAfterKill.Thrown.Name)
	require.NotNil(t, got.ConnectAfterKill.Thrown)
	assert.Equal(t, "SandboxNotFoundError", got.ConnectAfterKill.Thrown.Name)
	assert.False(t, got.RunningAfterKill, "envd of a killed sandbox answers as E2B's proxy does (502)")

	for name, a := range map[string]attempt[any]{
		"unknown template": got.UnknownTemplate, "egress rules": got.EgressRules, "internet on a no-egress profile": got.Internet,
		"metrics": got.Metrics, "snapshot": got.Snapshot, "volumes": got.Volumes, "a timeout past the longest lifetime": got.TooLong,
		"auto-pause on a profile that cannot pause": got.AutoPause,
	} {
		require.NotNil(t, a.Thrown, name)
		assert.Equal(t, "SandboxError", a.Thrown.Name, "%s: %+v", name, a.Thrown)
		assert.Equal(t, http.StatusBadRequest, a.Thrown.StatusCode, "%s: %+v", name, a.Thrown)
	}
	assert.True(t, got.UnknownTemplate.Thrown.has("unknown sandbox profile 'no-such-template'"), "%+v", got.UnknownTemplate.Thrown)
	assert.True(t, got.EgressRules.Thrown.has("does not offer network egress rules"), "%+v", got.EgressRules.Thrown)
	assert.True(t, got.Internet.Thrown.has("allow_internet_access: true", "'deny'"), "%+v", got.Internet.Thrown)
	require.Nil(t, got.NoInternet.Thrown, "%+v", got.NoInternet.Thrown)
	assert.True(t, got.Metrics.Thrown.has("does not offer GET /sandboxes/{id}/metrics"), "%+v", got.Metrics.Thrown)
	assert.True(t, got.Snapshot.Thrown.has("does not offer POST /sandboxes/{id}/snapshots"), "%+v", got.Snapshot.Thrown)
	assert.True(t, got.Volumes.Thrown.has("does not offer volumeMounts"), "%+v", got.Volumes.Thrown)
	assert.True(t, got.AutoPause.Thrown.has("pause"), "%+v", got.AutoPause.Thrown)
}

// TestAccessThroughTheDoor: a revoked key is refused (the SDK's AuthenticationError); another
// principal's sandbox is not found (SandboxNotFoundError; kill: false) and never listed; a
// template whose profile the key may not use is forbidden (403).
func TestAccessThroughTheDoor(t *testing.T) {
	t.Parallel()
	d := localDoor(t, nil)
	aliceKey, alice := d.key("alice", []string{"ml"}, nil)
	_, bob := d.key("bob", []string{"ml"}, []string{"default"})
	var made struct {
		IDs []string `json:"ids"`
	}
	d.sdk(alice, "control", &made)
	status, _, body := d.Do("POST", e2bdoor.Path+"/v2/sandboxes", "", strings.NewReader(`{"templateID":"base","timeout":300}`), map[string]string{"X-API-KEY": alice})
	require.Equal(t, http.StatusCreated, status, "%s", body)
	var alive struct {
		SandboxID string `json:"sandboxID"`
	}
	require.NoError(t, jsonUnmarshal(body, &alive))

	var refused struct {
		Connect, Info, Timeout, Pause, Template attempt[any]
		Kill                                    attempt[bool]
		Listed                                  []string
	}
	d.sdk(bob, "refused", &refused, alive.SandboxID, "restricted")
	for name, a := range map[string]attempt[any]{"connect": refused.Connect, "info": refused.Info, "timeout": refused.Timeout, "pause": refused.Pause} {
		require.NotNil(t, a.Thrown, name)
		assert.Equal(t, "SandboxNotFoundError", a.Thrown.Name, "%s: %+v", name, a.Thrown)
	}
	assert.False(t, refused.Kill.Value, "another principal's sandbox is not found: kill answers false")
	assert.NotContains(t, refused.Listed, alive.SandboxID)
	require.NotNil(t, refused.Template.Thrown)
	assert.Equal(t, http.StatusForbidden, refused.Template.Thrown.StatusCode, "%+v", refused.Template.Thrown)
	assert.True(t, refused.Template.Thrown.has("this API key may use only the profiles ['default'], not 'restricted'"), "%+v", refused.Template.Thrown)

	// Alice's sandbox is untouched, and her key stops working once revoked: at once on this
	// replica, everywhere within auth.KeyRecheck.
	status, _, body = d.Do("GET", e2bdoor.Path+"/sandboxes/"+alive.SandboxID, "", nil, map[string]string{"X-API-KEY": alice})
	require.Equal(t, http.StatusOK, status, "%s", body)
	d.revoke("alice", aliceKey)
	var revoked struct{ Create, List, Info attempt[any] }
	d.sdk(alice, "revoked", &revoked, alive.SandboxID)
	for name, a := range map[string]attempt[any]{"create": revoked.Create, "list": revoked.List, "info": revoked.Info} {
		require.NotNil(t, a.Thrown, name)
		assert.Equal(t, "AuthenticationError", a.Thrown.Name, "%s: %+v", name, a.Thrown)
		assert.True(t, a.Thrown.has("was revoked at"), "%s: %+v", name, a.Thrown)
	}
	// The sandbox plane takes the key as its access token: refused alike.
	status, _, body = d.Do("GET", e2bdoor.Path+"/health", "", nil, map[string]string{"E2b-Sandbox-Id": alive.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": alice})
	assert.Equal(t, http.StatusUnauthorized, status, "%s", body)
	// Without a key, or with something else than a Sandgate key: 401 saying what to send.
	status, _, body = d.Do("GET", e2bdoor.Path+"/v2/sandboxes", "", nil, nil)
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, string(body), `"message":"missing API key: set E2B_API_KEY to a Sandgate API key`)
	status, _, body = d.Do("GET", e2bdoor.Path+"/v2/sandboxes", "", nil, map[string]string{"X-API-KEY": "e2b_0123456789abcdef"})
	assert.Equal(t, http.StatusUnauthorized, status)
	assert.Contains(t, string(body), "E2B_API_KEY must be a Sandgate API key")
}

// TestDoorClosedUnlessEnabled: a gateway told nothing about E2B answers E2B's SDKs at once
// with an error that says the door is not enabled.
func TestDoorClosedUnlessEnabled(t *testing.T) {
	t.Parallel()
	d := localDoor(t, func(c *config.Config) { c.Server.E2B.Enabled = false })
	_, key := d.key("alice", nil, nil)
	var got struct{ Create attempt[any] }
	d.sdk(key, "closed", &got)
	require.NotNil(t, got.Create.Thrown)
	assert.Equal(t, http.StatusNotFound, got.Create.Thrown.StatusCode)
	assert.True(t, got.Create.Thrown.has("does not serve E2B's API", "server.e2b.enabled"), "%+v", got.Create.Thrown)
}
