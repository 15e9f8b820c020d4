//go:build unix

package sandboxd

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// bashDriver runs one execution of a bash context; its header describes the state files.
//
//go:embed bash_driver.sh
var bashDriver string

// overridePrefix starts the environment names carrying req.Env into a bash context execution.
const overridePrefix = "SANDBOXD_OVERRIDE_"

// bashStateFiles are the files of a bash context's state folder.
var bashStateFiles = []string{"env", "cwd", "env.new", "cwd.new", "saved", "code"}

// execBash runs req.Code in bash context c (whose turn it is): a fresh bash restores the
// saved state, sources the code and saves the state on exit.
func (r *Runtime) execBash(ctx context.Context, c *codeContext, req ExecRequest, cwd string, out Streams) (Result, error) {
	interp, err := r.interpreter("bash")
	if err != nil {
		return Result{}, err
	}
	state := func(name string) string { return filepath.Join(c.stateDir, name) }
	for _, f := range []string{"env.new", "cwd.new", "saved"} {
		_ = os.Remove(state(f))
	}
	if err := os.WriteFile(state("code"), []byte(req.Code), 0o600); err != nil {
		return Result{}, fmt.Errorf("sandboxd: bash context '%s': writing the code: %w", c.name, err)
	}
	start, here := r.workspace, ""
	if cwd != "" {
		start, here = cwd, "1"
	}
	// Without a saved state the execution starts from the base environment; with one, the
	// state alone says which variables exist (so an unset one stays unset).
	env := []string{}
	if _, err := os.Stat(state("env")); errors.Is(err, os.ErrNotExist) {
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
	if _, serr := os.Stat(state("saved")); serr == nil && !c.isRemoved() && ectx.Err() == nil {
		if os.Rename(state("env.new"), state("env")) == nil {
			_ = os.Rename(state("cwd.new"), state("cwd"))
		}
	}
	for _, f := range []string{"env.new", "cwd.new", "saved"} {
		_ = os.Remove(state(f))
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
