// Package spool keeps records on local disk until something else has taken them: the
// gateway's completions that the response store (Postgres) refused, so that a run that
// finished during a store outage survives a restart of its gateway (docs/semantics.md §9
// Completion).
//
// A spool is a folder holding one file per record, named after its id (<id>.rec). A record
// is written to a temporary file in the same folder, synced, renamed into place and the
// folder synced, so that after a crash a record's file either holds all of it or does not
// exist. Temporary files a crash left behind are removed by Open. The folder's records are
// bounded in bytes (Put answers ErrFull past it); several processes may share one folder.
package spool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// ext names a record's file: <id>.rec.
const ext = ".rec"

// tmpPrefix starts the name of a record being written (never read as a record).
const tmpPrefix = ".tmp-"

// ErrFull is Put's error when the record would take the spool past its bound.
var ErrFull = errors.New("spool: full")

// Spool is one spool folder. Its methods are safe for concurrent use.
type Spool struct {
	dir string
	max int64
	mu  sync.Mutex // one Put at a time per process (the size check and the write)
}

// Open makes dir (mode 0700, parents included) when it does not exist, removes what an
// interrupted Put left there, and checks that this process may write in it. maxBytes bounds
// the bytes of its records (> 0).
//
// Errors: a maxBytes ≤ 0; dir cannot be made, read or written (the os error, with the path).
func Open(dir string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("spool: a bound of %d bytes holds nothing", maxBytes)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	probe, err := os.CreateTemp(dir, tmpPrefix)
	if err != nil {
		return nil, err
	}
	_ = probe.Close()
	if err := os.Remove(probe.Name()); err != nil {
		return nil, err
	}
	return &Spool{dir: dir, max: maxBytes}, nil
}

// Dir is the spool's folder.
func (s *Spool) Dir() string { return s.dir }

// Max is the bound of its records, in bytes.
func (s *Spool) Max() int64 { return s.max }

// Put stores record data under id durably (synced to disk when it returns nil), replacing a
// record of the same id. id is a name of letters, digits, '-' and '_' (task ids are 32 hex
// digits).
//
// Errors: an invalid id; ErrFull (wrapped, saying the bound) when the spool's records and
// data would be more than its bound; the file system's.
func (s *Spool) Put(id string, data []byte) (err error) {
	if err := checkID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	held, err := s.size(id)
	if err != nil {
		return err
	}
	if held+int64(len(data)) > s.max {
		return fmt.Errorf("%w: its records hold %d bytes and this one has %d, over the bound of %d bytes", ErrFull, held, len(data), s.max)
	}
	f, err := os.CreateTemp(s.dir, tmpPrefix+id+"-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(f.Name(), s.path(id)); err != nil {
		return err
	}
	return syncDir(s.dir)
}

// size is the bytes of the records held, but that of id (which a Put of id replaces).
func (s *Spool) size(except string) (int64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		if e.Name() == except+ext {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		n += info.Size()
	}
	return n, nil
}

// Get returns record id. Errors: fs.ErrNotExist (wrapped) when there is none.
func (s *Spool) Get(id string) ([]byte, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	return os.ReadFile(s.path(id))
}

// Remove removes record id (and syncs the folder); removing a record that is not there is
// no error.
func (s *Spool) Remove(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := os.Remove(s.path(id)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return syncDir(s.dir)
}

// IDs lists the ids of the records held, in no particular order.
func (s *Spool) IDs() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ext)
		if ok && e.Type().IsRegular() && checkID(id) == nil {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

func (s *Spool) path(id string) string { return filepath.Join(s.dir, id+ext) }

// checkID accepts 1 to 128 letters, digits, '-' and '_': a file name on every system, with
// no path in it.
func checkID(id string) error {
	if id == "" || len(id) > 128 {
		return fmt.Errorf("spool: record id %q is empty or longer than 128 bytes", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("spool: record id %q has a character other than letters, digits, '-' and '_'", id)
		}
	}
	return nil
}

// syncDir makes the folder's entries (a rename, a removal) durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
