//go:build unix

package sandboxd

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/wspath"
)

// cleanPath is wspath.Clean: lexical confinement; symlinks are confined later, by os.Root.
func cleanPath(p string) (string, error) { return wspath.Clean(p) }

func escapes(p string) error { return wspath.Escapes(p) }

// workingDir resolves workspace folder dir to an absolute path without symlinks, inside the
// workspace.
//
// Errors: cleanPath's; fault.Policy when a symlink leads out; fault.NotFound when it does not
// exist; fault.Validation when it is not a folder.
func (r *Runtime) workingDir(dir string) (string, error) {
	clean, err := cleanPath(dir)
	if err != nil {
		return "", err
	}
	if clean == "." {
		return r.workspace, nil
	}
	st, err := r.root.Stat(clean)
	if err != nil {
		return "", pathErr(dir, err)
	}
	if !st.IsDir() {
		return "", fault.New(fault.Validation, "working folder '%s' is not a folder", dir)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(r.workspace, filepath.FromSlash(clean)))
	if err != nil {
		return "", pathErr(dir, err)
	}
	if real != r.workspace && !strings.HasPrefix(real, r.workspace+string(filepath.Separator)) {
		return "", escapes(dir)
	}
	return real, nil
}

// pathErr classifies an error of an os.Root operation on workspace path p (wspath.RootError);
// a closed root means the runtime was closed.
func pathErr(p string, err error) error {
	if errors.Is(err, fs.ErrClosed) {
		return fault.New(fault.Gone, "%s", errShutdown)
	}
	return wspath.RootError(p, err)
}
