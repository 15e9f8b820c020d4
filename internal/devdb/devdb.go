// Package devdb runs a throwaway PostgreSQL server from the machine's own Postgres binaries
// (initdb and pg_ctl on PATH, or Debian's /usr/lib/postgresql/<version>/bin) for `gateway dev`
// and the tests. It listens on 127.0.0.1 on a free port, trusts local connections, and keeps
// its data under the folder it is given so the next start reuses it.
//
// Postgres refuses to run as root; when the gateway runs as root the server runs as the
// `postgres` (or `nobody`) user.
package devdb

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Instance is a running dev Postgres.
type Instance struct {
	Dir  string // data folder
	Port int
	bin  string
	cred *syscall.Credential
}

// URL returns the connection URL of database db.
func (i *Instance) URL(db string) string {
	return fmt.Sprintf("postgres://sandgate@127.0.0.1:%d/%s?sslmode=disable", i.Port, db)
}

// FindBin returns the folder holding initdb and pg_ctl.
func FindBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "initdb")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(a, b int) bool { return version(dirs[a]) > version(dirs[b]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries found (initdb, pg_ctl); install them (Debian: apt-get install postgresql) or set database.url")
}

func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// Options say how Start runs a server it starts (a server already running is reused as it
// runs).
type Options struct {
	// Durable runs the server as production does: fsync=on, synchronous_commit=on and
	// full_page_writes=on. Without it fsync and full_page_writes are off (a throwaway server
	// need not survive a crash of the machine, and a commit then costs no disk flush).
	Durable bool
}

// Start starts (initialising if needed) the server whose data lives in dir and waits until
// it accepts connections; a server already running from dir is reused. Database "sandgate"
// exists afterwards. The server runs with fsync off (Options).
func Start(ctx context.Context, dir string) (*Instance, error) {
	return StartWith(ctx, dir, Options{})
}

// StartWith is Start with options o.
func StartWith(ctx context.Context, dir string, o Options) (*Instance, error) {
	inst, err := locate(dir)
	if err != nil {
		return nil, err
	}
	dir = inst.Dir
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := inst.initdb(data); err != nil {
			return nil, err
		}
	}
	portFile := filepath.Join(dir, "port")
	if b, err := os.ReadFile(portFile); err == nil && inst.running(data) {
		if inst.Port, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil && inst.ping(ctx) == nil {
			return inst, inst.ensureDB(ctx)
		}
	}
	// The port of the last start when it is free again (a stopped server keeps its URL),
	// else a free one.
	if b, err := os.ReadFile(portFile); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && portFree(p) {
			inst.Port = p
		}
	}
	if inst.Port == 0 {
		if inst.Port, err = freePort(); err != nil {
			return nil, err
		}
	}
	logFile := filepath.Join(dir, "postgres.log")
	durability := "-c fsync=off -c full_page_writes=off"
	if o.Durable {
		durability = "-c fsync=on -c full_page_writes=on -c synchronous_commit=on"
	}
	opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s %s -c max_connections=200", inst.Port, dir, durability)
	if out, err := inst.run("pg_ctl", "-D", data, "-l", logFile, "-o", opts, "-w", "-t", "60", "start"); err != nil {
		return nil, fmt.Errorf("devdb: pg_ctl start: %v: %s (log: %s)", err, out, logFile)
	}
	if err := os.WriteFile(portFile, []byte(strconv.Itoa(inst.Port)), 0o644); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err = inst.ping(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("devdb: server did not accept connections: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return inst, inst.ensureDB(ctx)
}

// locate resolves where the cluster for dir lives and who runs it.
func locate(dir string) (*Instance, error) {
	bin, err := FindBin()
	if err != nil {
		return nil, err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	inst := &Instance{Dir: dir, bin: bin}
	if os.Geteuid() == 0 {
		if inst.cred, err = unprivileged(); err != nil {
			return nil, err
		}
		if !reachable(filepath.Dir(dir), inst.cred) {
			// e.g. a checkout under /root (mode 0700): keep the cluster where its user can
			// reach it, one per requested folder.
			sum := sha256.Sum256([]byte(dir))
			inst.Dir = filepath.Join(os.TempDir(), "sandgate-pg-"+hex.EncodeToString(sum[:6]))
		}
	}
	return inst, nil
}

// StopDir stops the server started by Start(dir), if one was ever initialised there.
func StopDir(dir string) error {
	inst, err := locate(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(inst.Dir, "data", "PG_VERSION")); err != nil {
		return nil
	}
	if !inst.running(filepath.Join(inst.Dir, "data")) {
		return nil
	}
	return inst.Stop()
}

// Stop shuts the server down (fast mode).
func (i *Instance) Stop() error {
	out, err := i.run("pg_ctl", "-D", filepath.Join(i.Dir, "data"), "-m", "fast", "-w", "stop")
	if err != nil {
		return fmt.Errorf("devdb: pg_ctl stop: %v: %s", err, out)
	}
	return nil
}

func (i *Instance) initdb(data string) error {
	if err := os.MkdirAll(i.Dir, 0o755); err != nil { // the server user must traverse it
		return err
	}
	if i.cred != nil {
		if err := os.Chown(i.Dir, int(i.cred.Uid), int(i.cred.Gid)); err != nil {
			return err
		}
	}
	if out, err := i.run("initdb", "-D", data, "-U", "sandgate", "--auth=trust", "--encoding=UTF8", "--no-sync"); err != nil {
		return fmt.Errorf("devdb: initdb: %v: %s", err, out)
	}
	return nil
}

func (i *Instance) running(data string) bool {
	_, err := i.run("pg_ctl", "-D", data, "status")
	return err == nil
}

func (i *Instance) run(name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(i.bin, name), args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	if i.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: i.cred}
		cmd.Dir = "/"
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (i *Instance) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, i.URL("postgres"))
	if err != nil {
		return err
	}
	return c.Close(ctx)
}

func (i *Instance) ensureDB(ctx context.Context) error {
	return i.CreateDatabase(ctx, "sandgate", "")
}

// CreateDatabase creates database name (from template when not "") unless it exists.
func (i *Instance) CreateDatabase(ctx context.Context, name, template string) error {
	c, err := pgx.Connect(ctx, i.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var exists bool
	if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil || exists {
		return err
	}
	q := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if template != "" {
		q += " TEMPLATE " + pgx.Identifier{template}.Sanitize()
	}
	_, err = c.Exec(ctx, q)
	return err
}

// reachable reports whether the user of cred may traverse every folder from / to path (the
// folders that do not exist yet will be created 0755).
func reachable(path string, cred *syscall.Credential) bool {
	for p := path; ; p = filepath.Dir(p) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err == nil {
			mode := st.Mode
			ok := mode&0o001 != 0 || (st.Uid == cred.Uid && mode&0o100 != 0) || (st.Gid == cred.Gid && mode&0o010 != 0)
			if !ok {
				return false
			}
		}
		if p == filepath.Dir(p) {
			return true
		}
	}
}

func unprivileged() (*syscall.Credential, error) {
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("devdb: Postgres cannot run as root and there is no 'postgres' or 'nobody' user to run it as")
}

// portFree reports whether 127.0.0.1:port can be listened on.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
