//go:build unix

package sandboxd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
)

// maxContextName is the longest context name.
const maxContextName = 64

// errContextExists is the cause of addContext's conflict for a name in use.
var errContextExists = errors.New("context exists")

// Causes of an execution killed because its context went away.
var (
	errContextRestarted = errors.New("it was restarted")
	errContextDeleted   = errors.New("it was deleted")
)

// codeContext is one named, long-lived context.
type codeContext struct {
	name     string
	language string
	created  time.Time     // creation or last restart; under mu
	sem      chan struct{} // held by the execution, start or restart in progress
	stateDir string        // bash: the private folder of saved state

	mu         sync.Mutex
	executions int
	removed    bool                    // deleted, or the runtime closed
	py         *pyProcess              // python: the current interpreter, nil when none started
	abortFunc  context.CancelCauseFunc // bash: ends the running execution
	// reset: an earlier runtime kept a context of this name, lost in a restart; the next
	// execution reports it (Result.ContextReset).
	reset bool
}

// acquire waits for c's turn, or for ctx to end.
func (c *codeContext) acquire(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *codeContext) release() { <-c.sem }

func (c *codeContext) info() ContextInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	alive := true
	if c.language == "python" {
		alive = c.py != nil && c.py.alive()
	}
	return ContextInfo{Name: c.name, Language: c.language, CreatedAt: c.created, Executions: c.executions, Alive: alive}
}

// interrupt ends what runs in c now: it kills the python interpreter and aborts a running bash
// execution; cause says why, in the notice of the execution it ends. With remove, c is marked
// removed first.
func (c *codeContext) interrupt(cause error, remove bool) {
	c.mu.Lock()
	if remove {
		c.removed = true
	}
	py, abort := c.py, c.abortFunc
	c.mu.Unlock()
	if py != nil {
		py.kill(cause.Error())
		<-py.dead
	}
	if abort != nil {
		abort(cause)
	}
}

// stop ends c for good (Close).
func (c *codeContext) stop(cause error) { c.interrupt(cause, true) }

// dropPython kills and forgets c's python interpreter, if any; the caller has c's turn, so
// no execution uses it.
func (c *codeContext) dropPython(cause error) {
	c.mu.Lock()
	py := c.py
	c.py = nil
	c.mu.Unlock()
	if py != nil {
		py.kill(cause.Error())
		<-py.dead
	}
}

// setPython makes py c's interpreter, unless c was removed meanwhile: then py is killed and
// the error says why.
func (r *Runtime) setPython(c *codeContext, py *pyProcess) error {
	c.mu.Lock()
	removed := c.removed
	if !removed {
		c.py = py
	}
	c.mu.Unlock()
	if !removed {
		return nil
	}
	py.kill(errContextDeleted.Error())
	<-py.dead
	if r.life.Err() != nil {
		return fault.New(fault.Gone, "%s", errShutdown)
	}
	return fault.New(fault.NotFound, "context '%s' was deleted", c.name)
}

func (c *codeContext) isRemoved() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed
}

// checkContextName returns a fault.Validation error unless name has 1 to 64 characters of
// letters, digits, '_', '.' and '-', starting with a letter, digit or '_' (so never "." or
// "..", which would be path segments in the API's URLs).
func checkContextName(name string) error {
	ok := name != "" && len(name) <= maxContextName && name[0] != '.' && name[0] != '-'
	for i := 0; ok && i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '.', c == '-':
		default:
			ok = false
		}
	}
	if !ok {
		return fault.New(fault.Validation, "invalid context name %q: use 1 to %d letters, digits, '_', '.' or '-', starting with a letter, digit or '_'", name, maxContextName)
	}
	return nil
}

// CreateContext creates context name for language (python or bash). A python context's
// interpreter is started before it returns, so a failure shows here.
//
// Errors: fault.Validation for a bad name or language; fault.Conflict when it exists;
// fault.Capability when the interpreter is not installed; fault.Provision when it does not
// start; fault.Gone after Close.
func (r *Runtime) CreateContext(name, language string) (ContextInfo, error) {
	if err := checkContextName(name); err != nil {
		return ContextInfo{}, err
	}
	if !validLanguage(language) {
		return ContextInfo{}, fault.New(fault.Validation, "unknown context language %q: use python or bash", language)
	}
	c, err := r.addContext(name, language)
	if err != nil {
		return ContextInfo{}, err
	}
	c.mu.Lock()
	c.reset = false // made anew on purpose: nothing to report
	c.mu.Unlock()
	return c.info(), nil
}

// addContext registers a new context and starts it. Errors: CreateContext's.
func (r *Runtime) addContext(name, language string) (*codeContext, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, fault.New(fault.Gone, "%s", errShutdown)
	}
	if _, ok := r.contexts[name]; ok {
		r.mu.Unlock()
		return nil, fault.Wrap(fault.Conflict, errContextExists, "context '%s' exists", name)
	}
	if len(r.contexts) >= r.maxCtx {
		r.mu.Unlock()
		return nil, fault.New(fault.Conflict, "the sandbox has %d contexts, the most it keeps; delete one you no longer need (DELETE .../contexts/{name})", r.maxCtx)
	}
	r.nextID++
	c := &codeContext{
		name:     name,
		language: language,
		created:  time.Now().UTC(),
		sem:      make(chan struct{}, 1),
	}
	var err error
	if language == "bash" {
		if r.stateDir == "" {
			if r.stateDir, err = r.makeStateDir(); err != nil {
				r.stateDir = ""
				r.mu.Unlock()
				return nil, fmt.Errorf("sandboxd: creating the folder of bash context state: %w", err)
			}
		}
		c.stateDir = filepath.Join(r.stateDir, "ctx-"+strconv.Itoa(r.nextID))
	}
	c.sem <- struct{}{} // nobody runs in it before it started
	r.contexts[name] = c
	if _, ok := r.lost[name]; ok {
		delete(r.lost, name)
		c.reset = true
	}
	r.writeStateLocked()
	r.mu.Unlock()
	defer c.release()

	switch language {
	case "python":
		var py *pyProcess
		if py, err = r.startPython(c.name); err == nil {
			err = r.setPython(c, py)
		}
	case "bash":
		if err = os.Mkdir(c.stateDir, 0o700); err == nil && r.user != nil {
			err = os.Chown(c.stateDir, int(r.user.UID), int(r.user.GID))
		}
	}
	if err != nil {
		r.mu.Lock()
		if r.contexts[name] == c {
			delete(r.contexts, name)
			r.writeStateLocked()
		}
		r.mu.Unlock()
		c.mu.Lock()
		c.removed = true
		c.mu.Unlock()
		return nil, err
	}
	return c, nil
}

// contextFor returns context name, creating it for language (python when "") when it does not
// exist. An empty language takes the existing context's.
// Errors: fault.Validation when it exists for another language; addContext's.
func (r *Runtime) contextFor(name, language string) (*codeContext, error) {
	for {
		r.mu.Lock()
		c, ok := r.contexts[name]
		r.mu.Unlock()
		if ok {
			if language != "" && c.language != language {
				return nil, fault.New(fault.Validation, "context '%s' runs %s, not %s; omit language to use the context's own", name, c.language, language)
			}
			return c, nil
		}
		if language == "" {
			language = "python"
		}
		c, err := r.addContext(name, language)
		if errors.Is(err, errContextExists) {
			continue // created meanwhile
		}
		return c, err
	}
}

// lookup returns context name. Errors: fault.NotFound.
func (r *Runtime) lookup(name string) (*codeContext, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.contexts[name]; ok {
		return c, nil
	}
	return nil, fault.New(fault.NotFound, "no context '%s'", name)
}

// ListContexts returns the contexts, sorted by name.
func (r *Runtime) ListContexts() []ContextInfo {
	r.mu.Lock()
	ctxs := make([]*codeContext, 0, len(r.contexts))
	for _, c := range r.contexts {
		ctxs = append(ctxs, c)
	}
	r.mu.Unlock()
	out := make([]ContextInfo, 0, len(ctxs))
	for _, c := range ctxs {
		out = append(out, c.info())
	}
	slices.SortFunc(out, func(a, b ContextInfo) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// RestartContext gives context name a fresh start: a python context gets a new interpreter
// (its globals are gone), a bash context forgets its saved folder and variables. An execution
// running in it is ended first (python: its interpreter is killed; bash: its processes are) and
// reports ContextLost. Executions restart from zero.
//
// Errors: fault.NotFound when there is no such context; CreateContext's start errors (the
// context then stays, not alive, and the next execution tries again).
func (r *Runtime) RestartContext(name string) (ContextInfo, error) {
	c, err := r.lookup(name)
	if err != nil {
		return ContextInfo{}, err
	}
	c.interrupt(errContextRestarted, false)
	_ = c.acquire(context.Background())
	defer c.release()
	if c.isRemoved() {
		return ContextInfo{}, fault.New(fault.NotFound, "no context '%s'", name)
	}
	c.dropPython(errContextRestarted) // one an execution started meanwhile
	c.mu.Lock()
	c.executions = 0
	c.created = time.Now().UTC() // the state dates from now
	c.mu.Unlock()
	switch c.language {
	case "python":
		py, err := r.startPython(c.name)
		if err != nil {
			return ContextInfo{}, err
		}
		if err := r.setPython(c, py); err != nil {
			return ContextInfo{}, err
		}
	case "bash":
		for _, f := range bashStateFiles {
			_ = os.Remove(filepath.Join(c.stateDir, f))
		}
	}
	return c.info(), nil
}

// DeleteContext ends context name (an execution running in it reports ContextLost) and
// forgets it. Errors: fault.NotFound when there is no such context.
func (r *Runtime) DeleteContext(name string) error {
	r.mu.Lock()
	c, ok := r.contexts[name]
	if ok {
		delete(r.contexts, name)
		r.writeStateLocked()
	}
	r.mu.Unlock()
	if !ok {
		return fault.New(fault.NotFound, "no context '%s'", name)
	}
	c.interrupt(errContextDeleted, true)
	_ = c.acquire(context.Background()) // the execution it ended has returned
	defer c.release()
	c.dropPython(errContextDeleted)
	_ = os.RemoveAll(c.stateDir)
	return nil
}

// execInContext runs req.Code in context req.Context, creating it when needed. cwd is "" to
// keep the context's working folder.
func (r *Runtime) execInContext(ctx context.Context, req ExecRequest, cwd string, out Streams) (Result, error) {
	c, err := r.contextFor(req.Context, req.Language)
	if err != nil {
		return Result{}, err
	}
	if err := c.acquire(ctx); err != nil {
		return Result{}, err
	}
	defer c.release()
	if c.isRemoved() {
		if r.life.Err() != nil {
			return Result{}, fault.New(fault.Gone, "%s", errShutdown)
		}
		return Result{}, fault.New(fault.NotFound, "context '%s' was deleted", req.Context)
	}
	c.mu.Lock()
	c.executions++
	reset := c.reset
	c.reset = false
	c.mu.Unlock()
	if reset {
		_, _ = fmt.Fprintf(out.Stderr, "sandboxd: the %s context '%s' was lost when the sandbox restarted; this execution runs in a fresh one, without the state of earlier executions\n", c.language, c.name)
	}
	var res Result
	if c.language == "python" {
		res, err = r.execPython(ctx, c, req, cwd, out)
	} else {
		res, err = r.execBash(ctx, c, req, cwd, out)
	}
	res.ContextReset = reset
	return res, err
}

// makeStateDir makes the private folder of bash context state under os.TempDir: 0700, or,
// when programs run as another user, the runtime's own and 0711, so that they reach the
// folders of their contexts in it (theirs) but cannot replace them.
func (r *Runtime) makeStateDir() (string, error) {
	dir, err := os.MkdirTemp("", "sandboxd-state-")
	if err != nil || r.user == nil {
		return dir, err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		_ = os.Remove(dir)
		return "", err
	}
	return dir, nil
}

// stateRecord is the StateFile's content.
type stateRecord struct {
	Contexts []stateContext `json:"contexts"`
}

type stateContext struct {
	Name     string `json:"name"`
	Language string `json:"language"`
}

// readState returns the contexts the StateFile names (an earlier runtime's, all gone now);
// nil without a file. A file that cannot be read or parsed is logged and ignored.
func (r *Runtime) readState() map[string]string {
	if r.stateFile == "" {
		return nil
	}
	data, err := os.ReadFile(r.stateFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var rec stateRecord
	if err == nil {
		err = json.Unmarshal(data, &rec)
	}
	if err != nil {
		r.log.Warn("sandboxd: ignoring the context state file", "file", r.stateFile, "err", err)
		return nil
	}
	lost := map[string]string{}
	for _, c := range rec.Contexts {
		if checkContextName(c.Name) == nil && validLanguage(c.Language) {
			lost[c.Name] = c.Language
		}
	}
	return lost
}

// writeStateLocked records the contexts kept now, and those lost and not used since, in the
// StateFile (written beside it and renamed into place). r.mu must be held. A failure is
// logged: the record helps to report lost state, it never stops an execution.
func (r *Runtime) writeStateLocked() {
	if r.stateFile == "" {
		return
	}
	rec := stateRecord{Contexts: []stateContext{}}
	for name, c := range r.contexts {
		rec.Contexts = append(rec.Contexts, stateContext{Name: name, Language: c.language})
	}
	for name, lang := range r.lost {
		rec.Contexts = append(rec.Contexts, stateContext{Name: name, Language: lang})
	}
	slices.SortFunc(rec.Contexts, func(a, b stateContext) int { return cmp.Compare(a.Name, b.Name) })
	data, _ := json.Marshal(rec)
	// A fresh temporary name (O_EXCL): nothing left in the folder under a known name is
	// written through.
	f, err := os.CreateTemp(filepath.Dir(r.stateFile), "."+filepath.Base(r.stateFile)+".*")
	if err == nil {
		_, err = f.Write(data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), r.stateFile)
		}
		if err != nil {
			_ = os.Remove(f.Name())
		}
	}
	if err != nil {
		r.log.Warn("sandboxd: recording the contexts in the state file", "file", r.stateFile, "err", err)
	}
}
