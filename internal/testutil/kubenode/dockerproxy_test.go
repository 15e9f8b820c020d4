package kubenode

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRewriteCreateLabelsAndClampsOOMScoreAdj(t *testing.T) {
	in := `{"Image":"p","Labels":{"io.kubernetes.pod.name":"x"},"HostConfig":{"OomScoreAdj":-998,"Memory":9223372036854775807,"CgroupParent":"/sgk-1/kubepods"}}`
	out, err := rewriteCreate([]byte(in), "abc123")
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, map[string]any{"io.kubernetes.pod.name": "x", LabelCluster: "abc123"}, got["Labels"])
	hc := got["HostConfig"].(map[string]any)
	assert.EqualValues(t, 0, hc["OomScoreAdj"], "raised to what an unprivileged runc can set")
	assert.Equal(t, "9223372036854775807", string(out[bytes.Index(out, []byte("922")):][:19]), "int64 fields exactly as sent")
	assert.Equal(t, "/sgk-1/kubepods", hc["CgroupParent"])
	assert.Equal(t, "p", got["Image"])
}

func TestRewriteCreateKeepsHigherOOMScoreAdjAndAddsLabels(t *testing.T) {
	out, err := rewriteCreate([]byte(`{"HostConfig":{"OomScoreAdj":1000}}`), "c")
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal(out, &got))
	assert.EqualValues(t, 1000, got["HostConfig"].(map[string]any)["OomScoreAdj"], "Burstable/BestEffort scores are kept")
	assert.Equal(t, map[string]any{LabelCluster: "c"}, got["Labels"])

	_, err = rewriteCreate([]byte(`not json`), "c")
	assert.Error(t, err)
}
