//go:build unix

package sandboxd

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// tarMode is the part of file mode m an archive keeps, as tar writes it: permission bits,
// setuid (0o4000), setgid (0o2000) and sticky (0o1000).
func tarMode(m fs.FileMode) int64 {
	out := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		out |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		out |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

// ArchiveWorkspace writes the workspace's content to w as a tar stream (PAX format, names
// relative to the workspace, folders ending in "/"): folders, regular files (a file's
// further names as hard links to the first) and symlinks — as links, never followed — with
// their permission bits (setuid, setgid and sticky
// included: the archive records what is there, ExtractWorkspace decides what comes back)
// and modification times. A file with holes is written as a sparse entry holding only its
// data regions (GNU's PAX sparse format 1.0, sparse.go), so a 3 GiB file with no blocks
// costs a few hundred bytes of archive, not 3 GiB of zeros. Owners are not recorded (an
// extraction makes everything the extracting user's). Sockets, FIFOs, devices and the
// temporary files of uploads in progress are left out. The walk reads through the
// workspace's os.Root, so a symlink swapped in meanwhile cannot lead it out; a file that
// grows while it is read is cut at the size it had when opened. Memory use does not depend
// on file sizes: content is copied in 32 KiB pieces.
//
// Errors: fault.Conflict when a file shrinks while it is read (the archive would be
// inconsistent; try again); ctx.Err() when ctx ends; w's error (wrapped) when writing fails;
// fault.Gone once the runtime is closed. On an error the stream written so far is not a
// complete archive (it lacks the end-of-archive blocks).
func (r *Runtime) ArchiveWorkspace(ctx context.Context, w io.Writer) (ArchiveStats, error) {
	var st ArchiveStats
	tw := tar.NewWriter(w)
	linked := map[fileID]string{} // files with more than one name: the name archived first
	err := fs.WalkDir(r.root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && rel != "." {
				return nil // removed meanwhile
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), uploadPrefix) && d.Type().IsRegular() {
			return nil // an upload in progress: not part of the content yet
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		hdr := &tar.Header{Name: rel, Mode: tarMode(info.Mode()), ModTime: info.ModTime(), Format: tar.FormatPAX}
		switch {
		case d.IsDir():
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			if err := tw.WriteHeader(hdr); err != nil {
				return archiveWriteErr(err)
			}
		case d.Type()&fs.ModeSymlink != 0:
			link, err := r.root.Readlink(rel)
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, link
			if err := tw.WriteHeader(hdr); err != nil {
				return archiveWriteErr(err)
			}
		case d.Type().IsRegular():
			id, many := hardLinked(info)
			if first, ok := linked[id]; many && ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				if err := tw.WriteHeader(hdr); err != nil {
					return archiveWriteErr(err)
				}
				break
			}
			n, data, err := r.archiveFile(w, tw, hdr, rel)
			if err != nil {
				return err
			}
			if n < 0 {
				return nil // gone, or no longer a regular file
			}
			st.Bytes += n
			st.DataBytes += data
			if many {
				linked[id] = rel
			}
		default:
			return nil // sockets, FIFOs, devices: not content
		}
		st.Entries++
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return st, ctx.Err()
		}
		if errors.Is(err, fs.ErrClosed) {
			return st, fault.New(fault.Gone, "%s", errShutdown)
		}
		var fe *fault.Error
		if errors.As(err, &fe) || errors.Is(err, errArchiveWrite) {
			return st, err
		}
		return st, fmt.Errorf("archiving the workspace: %w", err)
	}
	if err := tw.Close(); err != nil {
		return st, archiveWriteErr(err)
	}
	return st, nil
}

// fileID identifies a file across its names (hard links).
type fileID struct{ dev, ino uint64 }

// hardLinked returns info's file identity and whether the file has more than one name.
func hardLinked(info fs.FileInfo) (fileID, bool) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok || st.Nlink < 2 {
		return fileID{}, false
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, true // the fields' types differ by system
}

// errArchiveWrite marks a failure to write the archive (the reader went away).
var errArchiveWrite = errors.New("writing the archive failed")

func archiveWriteErr(err error) error { return fmt.Errorf("%w: %w", errArchiveWrite, err) }

// archiveFile writes regular file rel with header hdr (its size taken from the open file)
// and returns its size and the bytes of it the archive holds; -1 when it vanished or is no
// longer a regular file. A file with holes is written as a sparse entry (sparse.go) through
// w, between tw's entries; any other file through tw.
func (r *Runtime) archiveFile(w io.Writer, tw *tar.Writer, hdr *tar.Header, rel string) (size, data int64, err error) {
	// O_NONBLOCK: a file swapped for a FIFO meanwhile must not wait for a writer.
	f, err := r.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return -1, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	if !info.Mode().IsRegular() {
		return -1, 0, nil
	}
	hdr.Typeflag, hdr.Size = tar.TypeReg, info.Size()
	hdr.Mode, hdr.ModTime = tarMode(info.Mode()), info.ModTime()
	if ext, err := dataExtents(f, hdr.Size); err == nil && dataSize(ext) < hdr.Size {
		data, err := writeSparseFile(w, tw, f, rel, hdr, ext)
		return hdr.Size, data, err
	} else if err != nil && !errors.Is(err, errSeekUnsupported) {
		return 0, 0, fmt.Errorf("finding the holes of '%s': %w", rel, err)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return 0, 0, archiveWriteErr(err)
	}
	// From the start: looking for holes moved the file's offset.
	n, err := io.CopyN(tw, io.NewSectionReader(f, 0, hdr.Size), hdr.Size)
	switch {
	case errors.Is(err, io.EOF):
		return 0, 0, shrankErr(rel, hdr.Size, n)
	case err != nil:
		return 0, 0, archiveWriteErr(fmt.Errorf("copying '%s': %w", rel, err))
	}
	return n, n, nil
}

func shrankErr(rel string, size, n int64) error {
	return fault.New(fault.Conflict, "file '%s' shrank from %d to %d bytes while the workspace was archived; try again", rel, size, n)
}

// writeSparseFile writes file f (archived as rel with header hdr) as a sparse entry of data
// regions ext, straight to w once tw's last entry is complete, and returns the bytes of
// data written.
func writeSparseFile(w io.Writer, tw *tar.Writer, f *os.File, rel string, hdr *tar.Header, ext []extent) (int64, error) {
	if err := tw.Flush(); err != nil {
		return 0, archiveWriteErr(err)
	}
	mapLen, err := writeSparse(w, sparseEntry{name: rel, mode: hdr.Mode, modTime: hdr.ModTime, size: hdr.Size, extents: ext})
	if err != nil {
		return 0, archiveWriteErr(err)
	}
	var data int64
	for _, x := range ext {
		n, err := io.Copy(w, &sourceReader{io.NewSectionReader(f, x.Offset, x.Length)})
		data += n
		var se *sourceErr
		switch {
		case errors.As(err, &se):
			return data, fmt.Errorf("reading '%s': %w", rel, se.err)
		case err != nil:
			return data, archiveWriteErr(fmt.Errorf("copying '%s': %w", rel, err))
		case n < x.Length:
			return data, shrankErr(rel, hdr.Size, x.Offset+n)
		}
	}
	if _, err := w.Write(make([]byte, padding(mapLen+data))); err != nil {
		return data, archiveWriteErr(err)
	}
	return data, nil
}

// sourceReader marks its reader's errors but io.EOF, telling a failing file apart from a
// failing archive writer in io.Copy.
type sourceReader struct{ r io.Reader }

type sourceErr struct{ err error }

func (e *sourceErr) Error() string { return e.err.Error() }

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &sourceErr{err}
	}
	return n, err
}

// ExtractWorkspace extracts tar stream rd into the workspace, which must be empty. Accepted
// entries: folders, regular files (sparse ones too, in any of the sparse formats
// archive/tar reads), symlinks (created as they are; a link may point anywhere, as programs'
// links may, because every later file operation follows links only inside the workspace)
// and hard links to a regular file extracted earlier from the same stream. Permission bits,
// the sticky bit and the modification times of files and folders are restored; setuid and
// setgid are dropped (keptModeBits), owners are not restored. Every run of zero blocks in a
// file is written as a hole, so files take no more room than their non-zero blocks.
// Missing parent folders are created (mode 0755). PAX and GNU long-name records are
// understood; a global PAX header is ignored.
//
// Confinement is strict, whatever os.Root would allow: a name that is absolute, contains a
// ".." element or a NUL byte, or leads through a symlink the stream created, is refused, as
// are a hard link whose target is not such a file, device nodes, FIFOs and any other entry
// type, and a name that appears twice (but for a folder). maxBytes (< 0: no limit) bounds
// the bytes written, holes not counted (ArchiveStats.DataBytes). Content streams to disk in
// 1 MiB pieces; memory holds the names of folders, symlinks and files (for the checks above
// and the folders' modes).
//
// On any error the workspace is emptied again (best effort), so nothing half-restored is
// left behind.
//
// Errors: fault.Conflict when the workspace is not empty; fault.Policy for an entry that
// would leave the workspace or lead through a symlink, and for device nodes; fault.Validation
// for a malformed stream, another refused entry type or a repeated name; fault.TooLarge over
// maxBytes, and when the workspace's file system (a bounded disk) runs out of room;
// ctx.Err() when ctx ends; rd's error (wrapped) when reading fails; fault.Gone once the
// runtime is closed.
func (r *Runtime) ExtractWorkspace(ctx context.Context, rd io.Reader, maxBytes int64) (ArchiveStats, error) {
	if err := r.workspaceEmpty(); err != nil {
		return ArchiveStats{}, err
	}
	x := &extraction{r: r, ctx: ctx, maxBytes: maxBytes, names: map[string]byte{}, dirs: map[string]dirMeta{}}
	st, err := x.run(tar.NewReader(rd))
	if err != nil {
		r.emptyWorkspace()
		if ctx.Err() != nil {
			return ArchiveStats{}, ctx.Err()
		}
		if errors.Is(err, fs.ErrClosed) {
			return ArchiveStats{}, fault.New(fault.Gone, "%s", errShutdown)
		}
		return ArchiveStats{}, err
	}
	return st, nil
}

// ReplaceWorkspace empties the workspace, then extracts tar stream rd into it as
// ExtractWorkspace does: for a sandbox made only to receive an archive whose image put files
// in its workspace (the archive is the whole workspace, so they must not survive it).
//
// Errors: ExtractWorkspace's; fault.Conflict when an entry cannot be removed.
func (r *Runtime) ReplaceWorkspace(ctx context.Context, rd io.Reader, maxBytes int64) (ArchiveStats, error) {
	if err := ctx.Err(); err != nil {
		return ArchiveStats{}, err
	}
	r.emptyWorkspace()
	return r.ExtractWorkspace(ctx, rd, maxBytes)
}

// workspaceEmpty returns fault.Conflict unless the workspace has no entries.
func (r *Runtime) workspaceEmpty() error {
	f, err := r.root.Open(".")
	if err != nil {
		return pathErr(".", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading the workspace: %w", err)
	}
	if len(names) > 0 {
		return fault.New(fault.Conflict, "the workspace is not empty ('%s' and maybe more): an archive is extracted into an empty workspace only", names[0])
	}
	return nil
}

// emptyWorkspace removes every entry of the workspace (after a failed extraction, or before
// ReplaceWorkspace), best effort.
func (r *Runtime) emptyWorkspace() {
	f, err := r.root.Open(".")
	if err != nil {
		return
	}
	names, _ := f.Readdirnames(-1)
	_ = f.Close()
	for _, n := range names {
		// Folders may have been made read-only by the archive: give back write permission
		// first, or their content could not go.
		_ = fs.WalkDir(r.root.FS(), n, func(rel string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				_ = r.root.Chmod(rel, 0o700)
			}
			return nil
		})
		if err := r.root.RemoveAll(n); err != nil {
			r.log.Warn("sandboxd: emptying the workspace after a failed extraction", "entry", n, "error", err)
		}
	}
}

// Kinds of names an extraction made.
const (
	madeDir     = 'd'
	madeFile    = 'f'
	madeSymlink = 'l'
)

type extraction struct {
	r        *Runtime
	ctx      context.Context
	maxBytes int64
	names    map[string]byte    // name → madeDir, madeFile or madeSymlink
	dirs     map[string]dirMeta // folders whose mode and time are set at the end
	st       ArchiveStats
	buf      []byte // for files' content, made on first use
}

type dirMeta struct {
	mode  fs.FileMode
	mtime time.Time
}

func (x *extraction) run(tr *tar.Reader) (ArchiveStats, error) {
	for {
		if err := x.ctx.Err(); err != nil {
			return x.st, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, tar.ErrHeader) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrInsecurePath) {
				return x.st, fault.Wrap(fault.Validation, err, "the archive is malformed")
			}
			return x.st, fmt.Errorf("reading the archive: %w", err)
		}
		if err := x.entry(tr, hdr); err != nil {
			return x.st, err
		}
	}
	// Deepest first: a folder made unreadable must not stop the ones inside it.
	names := slices.Collect(maps.Keys(x.dirs))
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(strings.Count(b, "/"), strings.Count(a, "/")), strings.Compare(a, b))
	})
	for _, name := range names {
		d := x.dirs[name]
		if err := x.r.root.Chmod(name, d.mode); err != nil {
			return x.st, pathErr(name, err)
		}
		if err := x.r.root.Chtimes(name, d.mtime, d.mtime); err != nil {
			return x.st, pathErr(name, err)
		}
	}
	return x.st, nil
}

// entryName checks and cleans an entry's name; "" for the workspace itself ("./").
func entryName(raw string) (string, error) {
	if raw == "" || strings.IndexByte(raw, 0) >= 0 {
		return "", fault.New(fault.Validation, "an archive entry has an empty name or one with a NUL byte")
	}
	if strings.HasPrefix(raw, "/") {
		return "", fault.New(fault.Policy, "archive entry '%s' has an absolute name", raw)
	}
	for _, el := range strings.Split(raw, "/") {
		if el == ".." {
			return "", fault.New(fault.Policy, "archive entry '%s' has a '..' element", raw)
		}
	}
	clean := path.Clean(raw)
	if clean == "." {
		return "", nil
	}
	return clean, nil
}

func (x *extraction) entry(tr *tar.Reader, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := entryName(hdr.Name)
	if err != nil {
		return err
	}
	if name == "" {
		if hdr.Typeflag == tar.TypeDir {
			return nil // the workspace itself
		}
		return fault.New(fault.Validation, "archive entry '%s' names the workspace but is not a folder", hdr.Name)
	}
	// No element of the path may be a symlink this stream made (os.Root would follow one
	// inside the workspace; an archive has no business doing so).
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		switch x.names[dir] {
		case madeSymlink:
			return fault.New(fault.Policy, "archive entry '%s' leads through symlink '%s'", hdr.Name, dir)
		case madeFile:
			return fault.New(fault.Validation, "archive entry '%s' is inside '%s', a file", hdr.Name, dir)
		}
	}
	if prev, ok := x.names[name]; ok && (prev != madeDir || hdr.Typeflag != tar.TypeDir) {
		return fault.New(fault.Validation, "archive entry '%s' appears twice", hdr.Name)
	}
	mode := fs.FileMode(hdr.Mode).Perm() | keptModeBits(hdr.Mode)
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.parents(name); err != nil {
			return err
		}
		if _, ok := x.names[name]; !ok {
			if err := x.r.root.Mkdir(name, 0o700); err != nil && !x.isMadeDir(name, err) {
				return x.fsErr(hdr.Name, err)
			}
			if err := x.r.own(name); err != nil {
				return x.fsErr(hdr.Name, err)
			}
			x.names[name] = madeDir
			x.st.Entries++
		}
		x.dirs[name] = dirMeta{mode: mode, mtime: hdr.ModTime}
	case tar.TypeReg, tar.TypeGNUSparse: // archive/tar expands holes to zeros (and reads TypeRegA as TypeReg)
		if err := x.parents(name); err != nil {
			return err
		}
		if err := x.file(name, hdr, tr, mode); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if hdr.Linkname == "" || strings.IndexByte(hdr.Linkname, 0) >= 0 {
			return fault.New(fault.Validation, "symlink '%s' has an empty target or one with a NUL byte", hdr.Name)
		}
		if err := x.parents(name); err != nil {
			return err
		}
		if err := x.r.root.Symlink(hdr.Linkname, name); err != nil {
			return x.fsErr(hdr.Name, err)
		}
		if err := x.r.own(name); err != nil {
			return x.fsErr(hdr.Name, err)
		}
		x.names[name] = madeSymlink
		x.st.Entries++
	case tar.TypeLink:
		target, err := entryName(hdr.Linkname)
		if err != nil || target == "" || x.names[target] != madeFile {
			return fault.New(fault.Policy, "hard link '%s' must point to a file extracted before it from the same archive, not '%s'", hdr.Name, hdr.Linkname)
		}
		if err := x.parents(name); err != nil {
			return err
		}
		if err := x.r.root.Link(target, name); err != nil {
			return x.fsErr(hdr.Name, err)
		}
		x.names[name] = madeFile
		x.st.Entries++
	case tar.TypeChar, tar.TypeBlock:
		return fault.New(fault.Policy, "archive entry '%s' is a device node; a workspace holds none", hdr.Name)
	default:
		return fault.New(fault.Validation, "archive entry '%s' has type %q, which is not a folder, file or link", hdr.Name, hdr.Typeflag)
	}
	return nil
}

// keptModeBits is the special bit of tar mode m an extraction keeps: sticky (a folder whose
// entries only their owner may remove or rename) as fs.ModeSticky. Setuid and setgid are
// dropped: everything extracted belongs to the extracting user, so such a bit would only
// lend that user's (or group's) identity to whoever runs the file, and the providers restore
// alike whatever their engine would allow.
func keptModeBits(m int64) fs.FileMode {
	if m&0o1000 != 0 {
		return fs.ModeSticky
	}
	return 0
}

// parents makes the missing folders above name (mode 0755, unless a later entry for them
// says otherwise).
func (x *extraction) parents(name string) error {
	var missing []string
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if x.names[dir] == madeDir {
			break
		}
		missing = append(missing, dir)
	}
	for _, dir := range slices.Backward(missing) {
		if err := x.r.root.Mkdir(dir, 0o700); err != nil && !x.isMadeDir(dir, err) {
			return x.fsErr(dir, err)
		}
		if err := x.r.own(dir); err != nil {
			return x.fsErr(dir, err)
		}
		x.names[dir] = madeDir
		x.st.Entries++
		x.dirs[dir] = dirMeta{mode: 0o755, mtime: time.Now()}
	}
	return nil
}

// isMadeDir reports whether err is Mkdir finding a folder the stream made.
func (x *extraction) isMadeDir(name string, err error) bool {
	return errors.Is(err, fs.ErrExist) && x.names[name] == madeDir
}

// holeBlock is the unit in which extraction looks for zeros: a file system block.
const holeBlock = 4096

// copyBuffer is how much of a file's content an extraction reads at a time.
const copyBuffer = 1 << 20

var zeroBlock [holeBlock]byte

// file writes a regular file's content, within maxBytes, as a sparse file: every run of zero
// blocks is left as a hole (extraction.writeHoles).
func (x *extraction) file(name string, hdr *tar.Header, tr *tar.Reader, mode fs.FileMode) error {
	if hdr.Size < 0 {
		return fault.New(fault.Validation, "archive entry '%s' has a negative size", hdr.Name)
	}
	// O_EXCL: an existing name (a symlink included) is never written through.
	f, err := x.r.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return x.fsErr(hdr.Name, err)
	}
	x.names[name] = madeFile
	copyErr := x.writeHoles(f, tr, hdr)
	if copyErr == nil {
		copyErr = x.r.ownFile(f) // before the mode: a change of owner clears setuid bits
	}
	if copyErr == nil {
		copyErr = f.Chmod(mode)
	}
	if cerr := f.Close(); copyErr == nil {
		copyErr = cerr
	}
	if copyErr != nil {
		var fe *fault.Error
		switch {
		case errors.As(copyErr, &fe):
			return copyErr
		case errors.Is(copyErr, io.ErrUnexpectedEOF) || errors.Is(copyErr, io.EOF):
			return fault.Wrap(fault.Validation, copyErr, "the archive ends inside file '%s'", hdr.Name)
		case noSpace(copyErr):
			return x.noSpaceErr(hdr.Name, copyErr)
		}
		return fmt.Errorf("extracting '%s': %w", hdr.Name, copyErr)
	}
	if err := x.r.root.Chtimes(name, hdr.ModTime, hdr.ModTime); err != nil {
		return x.fsErr(hdr.Name, err)
	}
	x.st.Entries++
	return nil
}

// writeHoles copies the content of entry hdr from tr into empty file f, writing only the
// blocks that are not all zeros: a run of zero blocks stays a hole, which reads as zeros and
// takes no space, so a sparse file comes back sparse (also from an archive that stored its
// holes as zeros) and a file of zeros takes no room in a bounded workspace. Blocks are
// holeBlock bytes from the file's start; the length is set at the end. The blocks written
// count against maxBytes (fault.TooLarge past it).
func (x *extraction) writeHoles(f *os.File, tr io.Reader, hdr *tar.Header) error {
	if x.buf == nil {
		x.buf = make([]byte, copyBuffer)
	}
	var off int64
	for off < hdr.Size {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		chunk := x.buf[:min(int64(len(x.buf)), hdr.Size-off)]
		if _, err := io.ReadFull(tr, chunk); err != nil {
			return err
		}
		for i := 0; i < len(chunk); {
			end := min(i+holeBlock, len(chunk))
			if bytes.Equal(chunk[i:end], zeroBlock[:end-i]) {
				i = end
				continue
			}
			j := end
			for j < len(chunk) {
				e := min(j+holeBlock, len(chunk))
				if bytes.Equal(chunk[j:e], zeroBlock[:e-j]) {
					break
				}
				j = e
			}
			if x.maxBytes >= 0 && x.st.DataBytes+int64(j-i) > x.maxBytes {
				return fault.New(fault.TooLarge, "the archive's files hold more than the limit of %d bytes (holes and runs of zeros not counted)", x.maxBytes)
			}
			if _, err := f.WriteAt(chunk[i:j], off+int64(i)); err != nil {
				return err
			}
			x.st.DataBytes += int64(j - i)
			i = j
		}
		off += int64(len(chunk))
		x.st.Bytes += int64(len(chunk))
	}
	return f.Truncate(hdr.Size)
}

// noSpace reports whether err is the file system (or its quota) being full.
func noSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

func (x *extraction) noSpaceErr(name string, err error) error {
	return fault.Wrap(fault.TooLarge, err, "the workspace has no room left for '%s' (%d bytes of files written so far): the archive does not fit it", name, x.st.DataBytes)
}

// fsErr classifies an os.Root error of extracting entry name.
func (x *extraction) fsErr(name string, err error) error {
	if noSpace(err) {
		return x.noSpaceErr(name, err)
	}
	if errors.Is(err, fs.ErrExist) {
		return fault.New(fault.Validation, "archive entry '%s' appears twice", name)
	}
	return pathErr(name, err)
}
