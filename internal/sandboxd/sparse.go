//go:build unix

package sandboxd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// Sparse files in workspace archives.
//
// A file with holes (truncate -s 3G, a database's preallocated file) is archived as what it
// holds, not as its length in zeros: the archive carries its data regions, as the file system
// reports them (lseek SEEK_DATA/SEEK_HOLE), in the sparse format GNU tar defined for PAX
// archives, version 1.0 — a PAX header with GNU.sparse.major=1, GNU.sparse.minor=0,
// GNU.sparse.name (the real name) and GNU.sparse.realsize (the length), then an entry named
// "GNUSparseFile.0/<base name>" whose data is the region map (decimal numbers, one per line:
// the count, then offset and length of each region, padded to 512 bytes) followed by the
// regions' bytes. GNU tar, bsdtar and Go's archive/tar read it; a tool that does not
// understand it extracts the map and the regions as a plain file under GNUSparseFile.0.
// Go's archive/tar writes no sparse entries, so this file writes them itself: the PAX
// header and the ustar header by hand, between the entries tar.Writer writes.
//
// Reading back needs nothing of this: archive/tar expands holes to zeros, and the
// extraction turns every run of zero blocks back into a hole (extraction.writeHoles), also
// for archives made without this format.

// extent is a data region of a file: Length bytes at Offset.
type extent struct{ Offset, Length int64 }

// maxExtents bounds the regions one sparse entry lists (its map stays far below the 1 MiB
// archive/tar accepts): past it, the regions closest to each other are merged, the hole
// between them archived as the zeros it reads as.
const maxExtents = 4096

// tarBlock is the tar block size.
const tarBlock = 512

// errSeekUnsupported says the file system cannot report data regions.
var errSeekUnsupported = errors.New("the file system does not report holes")

// dataExtents returns the data regions of the first size bytes of f, in order (holes left
// out), merged down to at most maxExtents. A file system that cannot report holes gives
// errSeekUnsupported; callers then treat the whole file as data.
func dataExtents(f *os.File, size int64) ([]extent, error) {
	if seekData < 0 {
		return nil, errSeekUnsupported
	}
	var out []extent
	for off := int64(0); off < size; {
		start, err := f.Seek(off, seekData)
		if errors.Is(err, syscall.ENXIO) {
			break // no data after off: the rest is a hole
		}
		if err != nil {
			return nil, seekErr(err)
		}
		if start >= size {
			break
		}
		end, err := f.Seek(start, seekHole)
		if err != nil {
			return nil, seekErr(err)
		}
		end = min(end, size)
		if end <= start {
			return nil, fmt.Errorf("the file system reported a hole at %d inside data starting there", start)
		}
		out = append(out, extent{start, end - start})
		off = end
	}
	return mergeExtents(out, maxExtents), nil
}

func seekErr(err error) error {
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EOPNOTSUPP) {
		return errSeekUnsupported
	}
	return err
}

// mergeExtents merges the regions separated by the smallest holes until at most limit remain.
func mergeExtents(ext []extent, limit int) []extent {
	if len(ext) <= limit {
		return ext
	}
	gaps := make([]int64, len(ext)-1)
	for i := range gaps {
		gaps[i] = ext[i+1].Offset - (ext[i].Offset + ext[i].Length)
	}
	sorted := slices.Clone(gaps)
	slices.Sort(sorted)
	// Merging every gap up to the (len-limit)th smallest leaves at most limit regions.
	threshold := sorted[len(ext)-limit-1]
	out := []extent{ext[0]}
	for i, g := range gaps {
		last := &out[len(out)-1]
		if g <= threshold {
			last.Length = ext[i+1].Offset + ext[i+1].Length - last.Offset
			continue
		}
		out = append(out, ext[i+1])
	}
	return out
}

// dataSize is the total length of ext.
func dataSize(ext []extent) int64 {
	var n int64
	for _, e := range ext {
		n += e.Length
	}
	return n
}

// sparseEntry is one sparse file to archive.
type sparseEntry struct {
	name    string // the file's name in the archive (relative, slash-separated)
	mode    int64  // tarMode
	modTime time.Time
	size    int64    // the file's length, holes included
	extents []extent // its data regions, within size
}

// sparseMap renders e's region map: count, then offset and length per region, each on a
// line, padded to whole blocks. A file that ends in a hole gets a last region of length 0
// at its end, as GNU tar writes one (older readers take the length from it).
func (e sparseEntry) sparseMap() []byte {
	ext := e.extents
	if len(ext) == 0 || ext[len(ext)-1].Offset+ext[len(ext)-1].Length < e.size {
		ext = append(slices.Clone(ext), extent{e.size, 0})
	}
	b := strconv.AppendInt(nil, int64(len(ext)), 10)
	b = append(b, '\n')
	for _, x := range ext {
		b = strconv.AppendInt(b, x.Offset, 10)
		b = append(b, '\n')
		b = strconv.AppendInt(b, x.Length, 10)
		b = append(b, '\n')
	}
	return append(b, make([]byte, padding(int64(len(b))))...)
}

// padding is what fills n bytes up to whole blocks.
func padding(n int64) int64 { return (tarBlock - n%tarBlock) % tarBlock }

// writeSparse writes e's two headers and its map to w; the caller then writes the regions'
// bytes (dataSize(e.extents) of them) and padding(len(map)+that) zero bytes. It returns
// the length of the map.
func writeSparse(w io.Writer, e sparseEntry) (int64, error) {
	m := e.sparseMap()
	stored := int64(len(m)) + dataSize(e.extents)
	recs := []string{
		paxRecord("GNU.sparse.major", "1"),
		paxRecord("GNU.sparse.minor", "0"),
		paxRecord("GNU.sparse.name", e.name),
		paxRecord("GNU.sparse.realsize", strconv.FormatInt(e.size, 10)),
		paxRecord("mtime", paxTime(e.modTime)),
	}
	if stored > maxOctal(12) {
		recs = append(recs, paxRecord("size", strconv.FormatInt(stored, 10)))
	}
	var body []byte
	for _, r := range recs {
		body = append(body, r...)
	}
	base := path.Base(e.name)
	xhdr := ustarHeader("PaxHeaders.0/"+base, 'x', 0o644, int64(len(body)), e.modTime)
	fhdr := ustarHeader("GNUSparseFile.0/"+base, '0', e.mode, stored, e.modTime)
	out := make([]byte, 0, 3*tarBlock+len(body)+len(m))
	out = append(out, xhdr[:]...)
	out = append(out, body...)
	out = append(out, make([]byte, padding(int64(len(body))))...)
	out = append(out, fhdr[:]...)
	out = append(out, m...)
	if _, err := w.Write(out); err != nil {
		return 0, err
	}
	return int64(len(m)), nil
}

// paxRecord formats one PAX record, "<length> <key>=<value>\n", whose length counts itself.
func paxRecord(k, v string) string {
	n := len(k) + len(v) + 3 // ' ', '=', '\n'
	n += len(strconv.Itoa(n))
	rec := strconv.Itoa(n) + " " + k + "=" + v + "\n"
	if len(rec) != n { // the length's own digits carried it into one more digit
		rec = strconv.Itoa(len(rec)) + " " + k + "=" + v + "\n"
	}
	return rec
}

// paxTime renders t as PAX does: seconds, and a fraction when there is one (before 1970 the
// sign covers both: -1.25 is a second and a quarter before).
func paxTime(t time.Time) string {
	sec, ns := t.Unix(), int64(t.Nanosecond())
	sign := ""
	if sec < 0 {
		sign, sec = "-", -sec
		if ns != 0 {
			sec, ns = sec-1, 1e9-ns
		}
	}
	s := sign + strconv.FormatInt(sec, 10)
	if ns != 0 {
		frac := strconv.FormatInt(ns+1e9, 10)[1:] // 9 digits, leading zeros kept
		s += "." + strings.TrimRight(frac, "0")
	}
	return s
}

// maxOctal is the largest number an octal field of width bytes holds (one byte is its NUL).
func maxOctal(width int) int64 { return 1<<(3*(width-1)) - 1 }

// ustarHeader is a ustar header block (POSIX.1-1988 layout, magic "ustar\x00" version "00")
// for a name that the PAX header names properly: name is cut to fit, at a character
// boundary. Numbers that do not fit their field are written as 0 (the PAX header has them).
func ustarHeader(name string, typeflag byte, mode, size int64, mtime time.Time) [tarBlock]byte {
	var b [tarBlock]byte
	for len(name) > 100 {
		_, n := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-n]
	}
	copy(b[0:100], name)
	octal(b[100:108], mode)
	octal(b[108:116], 0) // uid
	octal(b[116:124], 0) // gid
	octal(b[124:136], size)
	octal(b[136:148], mtime.Unix())
	b[156] = typeflag
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	octal(b[329:337], 0) // devmajor
	octal(b[337:345], 0) // devminor
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// octal writes v into field as zero-padded octal digits and a NUL; 0 when v does not fit.
func octal(field []byte, v int64) {
	if v < 0 || v > maxOctal(len(field)) {
		v = 0
	}
	s := strconv.FormatInt(v, 8)
	for i := range field[:len(field)-1] {
		field[i] = '0'
	}
	copy(field[len(field)-1-len(s):], s)
	field[len(field)-1] = 0
}
