package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/sandgate/sandgate/internal/auth/devissuer"
)

// How `gateway token` finds the development gateway it mints for: `gateway dev` records
// where it runs in its data folder (devStateFile) and points to that folder from the user's
// cache folder (devPointer), so the token command works from any folder and signs with the
// key, and names the issuer, of the gateway that is actually running.

// defaultDataDir is `gateway dev`'s --data-dir default, relative to the working folder.
const defaultDataDir = ".sandgate/dev"

// devStateFile, in a dev gateway's data folder, describes the gateway that last ran there.
const devStateFile = "gateway.json"

// devKeyFile, in a dev gateway's data folder, is the development issuer's signing key.
const devKeyFile = "issuer-key.pem"

// devState is what a running `gateway dev` records.
type devState struct {
	DataDir     string    `json:"data_dir"` // absolute
	PublicURL   string    `json:"public_url"`
	Issuer      string    `json:"issuer"`
	PID         int       `json:"pid"`
	AdminGroups []string  `json:"admin_groups"`
	StartedAt   time.Time `json:"started_at"`
}

// devPointer is the file naming the data folder of the dev gateway started last by this
// user: $XDG_CACHE_HOME/sandgate/dev-gateway.json, else ~/.cache/sandgate/dev-gateway.json.
func devPointer(environ []string) (string, error) {
	dir := envValue(environ, "XDG_CACHE_HOME")
	if dir == "" {
		home := envValue(environ, "HOME")
		if home == "" {
			return "", errors.New("neither XDG_CACHE_HOME nor HOME is set")
		}
		dir = filepath.Join(home, ".cache")
	}
	return filepath.Join(dir, "sandgate", "dev-gateway.json"), nil
}

// recordDevState writes st into its data folder and points the user's devPointer at it.
// Failures only cost `gateway token` its discovery, so they are returned for a warning.
func recordDevState(environ []string, st devState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(st.DataDir, devStateFile), b); err != nil {
		return err
	}
	ptr, err := devPointer(environ)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(ptr), 0o700); err != nil {
		return err
	}
	return writeFileAtomic(ptr, b)
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readDevState(path string) (*devState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st devState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &st, nil
}

// running reports whether the process that wrote st still runs.
func (st *devState) running() bool {
	if st == nil || st.PID <= 0 {
		return false
	}
	err := syscall.Kill(st.PID, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// devTarget is the dev gateway a token is minted for.
type devTarget struct {
	dataDir string
	keyFile string
	state   *devState // nil: no gateway ever recorded itself there
}

// findDevGateway picks the data folder: --data-dir when given; else ./.sandgate/dev when it
// holds a key and its gateway runs (or no other dev gateway runs); else the one devPointer
// names. It never creates a key: without one the error says which folder was looked at and
// what to do. note says why a folder other than ./.sandgate/dev was picked over it.
func findDevGateway(flagDir string, environ []string) (t devTarget, note string, err error) {
	var dir string
	here := fileExists(filepath.Join(defaultDataDir, devKeyFile))
	if here && flagDir == "" {
		// A stale folder here (a gateway that ran from this folder once) loses to the dev
		// gateway that runs now elsewhere: its token would be refused there.
		local, _ := readDevState(filepath.Join(defaultDataDir, devStateFile))
		if !local.running() {
			if ptr, err := devPointer(environ); err == nil {
				if st, err := readDevState(ptr); err == nil && st.running() {
					if abs, _ := filepath.Abs(defaultDataDir); abs != st.DataDir {
						flagDir = st.DataDir
						note = fmt.Sprintf("gateway token: %s here belongs to no running gateway; minting for the running dev gateway of %s (pid %d) instead (--data-dir picks one)\n", defaultDataDir, st.DataDir, st.PID)
					}
				}
			}
		}
	}
	switch {
	case flagDir != "":
		dir = flagDir
	case here:
		dir = defaultDataDir
	default:
		ptr, err := devPointer(environ)
		if err != nil {
			return devTarget{}, "", fmt.Errorf("no development gateway found: there is no %s here and the record of the last `gateway dev` cannot be located (%v); pass --data-dir, the folder `gateway dev` keeps its state in", filepath.Join(defaultDataDir, devKeyFile), err)
		}
		st, err := readDevState(ptr)
		if err != nil {
			return devTarget{}, "", fmt.Errorf("no development gateway found: there is no %s in this folder and no `gateway dev` has recorded itself in %s; run this in the folder where you ran `make run` (or `gateway dev`), or pass --data-dir DIR (the folder given to `gateway dev --data-dir`)", filepath.Join(defaultDataDir, devKeyFile), ptr)
		}
		dir = st.DataDir
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return devTarget{}, "", err
	}
	t = devTarget{dataDir: abs, keyFile: filepath.Join(abs, devKeyFile)}
	if !fileExists(t.keyFile) {
		return devTarget{}, "", fmt.Errorf("%s holds no development issuer key (%s): `gateway dev --data-dir %s` creates it when it starts; start it first, or pass the --data-dir of the dev gateway you run", abs, devKeyFile, dir)
	}
	if st, err := readDevState(filepath.Join(abs, devStateFile)); err == nil {
		t.state = st
	}
	return t, note, nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkIssuer asks the running gateway's issuer for its keys: a gateway that does not list
// iss's key would refuse the token (it runs from another data folder). A gateway that does
// not answer is reported in warn (the token works once it serves again).
func checkIssuer(ctx context.Context, iss *devissuer.Issuer, dataDir string, warn io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, iss.URL()+"/jwks", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(warn, "gateway token: no development issuer answers at %s (%v); the token is for the dev gateway of %s once it serves there again\n", iss.URL(), err, dataDir)
		return nil
	}
	defer resp.Body.Close()
	var set struct {
		Keys []struct {
			Kid string `json:"kid"`
		} `json:"keys"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set) != nil {
		fmt.Fprintf(warn, "gateway token: %s/jwks answered %s, not a development issuer's keys; the token may be refused\n", iss.URL(), resp.Status)
		return nil
	}
	if !slices.ContainsFunc(set.Keys, func(k struct {
		Kid string `json:"kid"`
	}) bool {
		return k.Kid == iss.KeyID()
	}) {
		return fmt.Errorf("the gateway at %s signs with another key than %s: it was started with another --data-dir; pass that folder as --data-dir", iss.URL(), filepath.Join(dataDir, devKeyFile))
	}
	return nil
}
