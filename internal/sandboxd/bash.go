//go:build unix

package sandboxd

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
)

// bashDriver runs one execution of a bash context; its header describes the state files.
//
//go:embed bash_driver.sh
var bashDriver string

// overridePrefix starts the environment names carrying req.Env into a bash context execution.
const overridePrefix = "SANDBOXD_OVERRIDE_"

// bashStateFiles are the files of a bash context's state folder.
var bashStateFiles = []string{"env", "cwd", "env.new", "cwd.new", "saved", "code"}

// writeCode writes code to the file "code" of a bash context's state folder, made afresh
// (never written through whatever a program left under that name: a symlink, a FIFO) and
// readable by the programs' user.
func (r *Runtime) writeCode(state *os.Root, code string) error {
	_ = state.Remove("code")
	f, err := state.OpenFile("code", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteString(code)
	if err == nil {
		err = r.ownFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// execBash runs req.Code in bash context c (whose turn it is): a fresh bash restores the
// saved state, sources the code and saves the state on exit.
func (r *Runtime) execBash(ctx context.Context, c *codeContext, req ExecRequest, cwd string, out Streams) (Result, error) {
	interp, err := r.interpreter("bash")
	if err != nil {
		return Result{}, err
	}
	// The folder belongs to the programs' user (when they run as another): go through an
	// os.Root, so that a symlink a program put there never leads the runtime elsewhere.
	state, err := os.OpenRoot(c.stateDir)
	if err != nil {
		return Result{}, fmt.Errorf("sandboxd: bash context '%s': opening its state: %w", c.name, err)
	}
	defer state.Close()
	for _, f := range []string{"env.new", "cwd.new", "saved"} {
		_ = state.Remove(f)
	}
	if err := r.writeCode(state, req.Code); err != nil {
		return Result{}, fmt.Errorf("sandboxd: bash context '%s': writing the code: %w", c.name, err)
	}
	start, here := r.workspace, ""
	if cwd != "" {
		start, here = cwd, "1"
	}
	// Without a saved state the execution starts from the base environment; with one, the
	// state alone says which variables exist (so an unset one stays unset).
	env := []string{}
	if _, err := state.Lstat("env"); errors.Is(err, os.ErrNotExist) {
		env = mergeEnv(r.env, map[string]string{"PWD": start})
	}
	args := []string{interp, "--noprofile", "--norc", "-c", bashDriver, "bash", c.stateDir, here}
	for _, name := range sortedKeys(req.Env) {
		args = append(args, name)
		env = append(env, overridePrefix+name+"="+req.Env[name])
	}

	ectx, cancel := r.execContext(ctx)
	defer cancel(nil)
	c.mu.Lock()
	c.abortFunc = cancel
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.abortFunc = nil
		c.mu.Unlock()
	}()
	spec := runSpec{
		path: interp, args: args, dir: start, env: env,
		stdin: stdinOf(req), timeout: req.Timeout, maxOutput: req.MaxOutput,
	}
	spec.hook(req.hooks)
	res, err := r.run(ectx, spec, out)

	// Keep the state only when the execution saved all of it, and only for this context's
	// current life (a restart or delete during the execution wins).
	if _, serr := state.Lstat("saved"); serr == nil && !c.isRemoved() && ectx.Err() == nil {
		if state.Rename("env.new", "env") == nil {
			_ = state.Rename("cwd.new", "cwd")
		}
	}
	for _, f := range []string{"env.new", "cwd.new", "saved"} {
		_ = state.Remove(f)
	}

	if err != nil && ectx.Err() != nil {
		if ctx.Err() == nil {
			switch cause := context.Cause(ectx); {
			case errors.Is(cause, errContextRestarted), errors.Is(cause, errContextDeleted):
				res.ContextLost = true
				if out.Stderr != nil {
					_, _ = fmt.Fprintf(out.Stderr, "sandboxd: the bash context '%s' ended (%s); its state is lost\n", c.name, cause)
				}
				return res, nil
			}
		}
		return res, r.cancelled(ctx, ectx)
	}
	return res, err
}
