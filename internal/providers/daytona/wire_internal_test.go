package daytona

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The log demultiplexer splits the daemon's labelled log however it is cut into messages,
// markers included.
func TestDemuxAcrossChunks(t *testing.T) {
	t.Parallel()
	log := []byte("\x01\x01\x01out 1\n\x02\x02\x02err \x01 one\n\x01\x01\x01out\x02\x02 2\n\x02\x02\x02\x02\n")
	for cut := 1; cut <= len(log); cut++ {
		var out, errb bytes.Buffer
		d := &demux{out: &out, err: &errb}
		for i := 0; i < len(log); i += cut {
			d.write(log[i:min(i+cut, len(log))])
		}
		d.flush()
		assert.Equal(t, "out 1\nout\x02\x02 2\n", out.String(), "chunks of %d", cut)
		assert.Equal(t, "err \x01 one\n\x02\n", errb.String(), "chunks of %d", cut)
	}
}

// The end filter removes the wrapper's end marker wherever the cuts fall, keeps bytes that
// only look like its start, and gives back what it held when the marker never came.
func TestEndFilter(t *testing.T) {
	t.Parallel()
	marker := endMarker("0123456789abcdef")
	stream := append([]byte("partial \x03SANDGATE-not-it\x03SANDGATE"), marker...)
	for cut := 1; cut <= len(stream); cut++ {
		var out bytes.Buffer
		f := &endFilter{w: &out, marker: marker}
		for i := 0; i < len(stream); i += cut {
			_, _ = f.Write(stream[i:min(i+cut, len(stream))])
		}
		f.close()
		assert.Equal(t, "partial \x03SANDGATE-not-it\x03SANDGATE", out.String(), "chunks of %d", cut)
	}
	var out bytes.Buffer
	f := &endFilter{w: &out, marker: marker}
	_, _ = f.Write([]byte("killed before the end\x03SANDG"))
	f.close()
	assert.Equal(t, "killed before the end\x03SANDG", out.String())
}

// The wrapper quotes every value it is given.
func TestRunScriptQuotes(t *testing.T) {
	t.Parallel()
	s := runScript("/tmp/sandgate/x-1", "1", "/home/daytona/it's here", map[string]string{"V": "$(touch x) 'q'\nline", "d": "x"}, `/bin/sh @D@/prog`, true)
	assert.Contains(t, s, `cd -- '/home/daytona/it'\''s here' || exit 126`)
	assert.Contains(t, s, "export V='$(touch x) '\\''q'\\''\nline'")
	assert.Contains(t, s, `setsid /bin/sh '/tmp/sandgate/x-1'/prog <'/tmp/sandgate/x-1'/in &`)
	assert.NotContains(t, s, "$d", "no shell variable a caller's variable could replace")
}
