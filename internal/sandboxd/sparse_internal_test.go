//go:build unix

package sandboxd

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMergeExtents(t *testing.T) {
	ext := []extent{{0, 10}, {20, 10}, {31, 1}, {100, 5}, {1000, 1}}
	assert.Equal(t, ext, mergeExtents(ext, 5), "within the limit: as they are")
	assert.Equal(t, []extent{{0, 10}, {20, 12}, {100, 5}, {1000, 1}}, mergeExtents(ext, 4), "the smallest hole goes first")
	assert.Equal(t, []extent{{0, 32}, {100, 5}, {1000, 1}}, mergeExtents(ext, 3))
	assert.Equal(t, []extent{{0, 1001}}, mergeExtents(ext, 1))
	assert.Equal(t, int64(10+10+1+5+1), dataSize(ext))
}

// A PAX record's length counts its own digits, also where they tip it over a power of ten.
func TestPAXRecordLength(t *testing.T) {
	for n := range 300 {
		rec := paxRecord("k", strings.Repeat("v", n))
		length, _, ok := strings.Cut(rec, " ")
		require.True(t, ok)
		l, err := strconv.Atoi(length)
		require.NoError(t, err)
		assert.Equal(t, len(rec), l, "value of %d bytes", n)
	}
}

// Lengths and times that the ustar header cannot hold are in the PAX header: archive/tar
// reads the entry's length and time from there.
func TestSparseHeaderBeyondUstar(t *testing.T) {
	const size = 20 << 30
	mtime := time.Date(1960, 1, 1, 0, 0, 0, 5, time.UTC) // before 1970: no octal for it
	e := sparseEntry{name: "big", mode: 0o600, modTime: mtime, size: size, extents: []extent{{0, 9 << 30}}}
	var buf bytes.Buffer
	_, err := writeSparse(&buf, e)
	require.NoError(t, err)
	hdr, err := tar.NewReader(&buf).Next()
	require.NoError(t, err)
	assert.Equal(t, "big", hdr.Name)
	assert.Equal(t, int64(size), hdr.Size)
	assert.True(t, hdr.ModTime.Equal(mtime), "%v", hdr.ModTime)
	assert.Equal(t, "1", hdr.PAXRecords["GNU.sparse.major"])
	assert.Equal(t, strconv.FormatInt(9<<30+tarBlock, 10), hdr.PAXRecords["size"], "map and data: more than 8 GiB")
}

// The stream a sparse entry is cut from: a broken file read fails as the file's error, not
// as the archive writer's.
func TestSourceReaderMarksFileErrors(t *testing.T) {
	boom := errors.New("boom")
	_, err := io.Copy(io.Discard, &sourceReader{io.MultiReader(strings.NewReader("x"), errReader{boom})})
	var se *sourceErr
	require.ErrorAs(t, err, &se)
	assert.ErrorIs(t, se.err, boom)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
