package daytona

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// MaxContexts is how many contexts a sandbox keeps at most (docs/semantics.md §3).
const MaxContexts = 16

// contextName is what a context may be called.
var contextName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ctxEntry is one context in the sandbox's registry.
type ctxEntry struct {
	Name       string    `json:"name"`
	Language   string    `json:"language"`
	ID         string    `json:"id,omitempty"` // the Daytona interpreter context (python)
	CreatedAt  time.Time `json:"created_at"`
	Executions int       `json:"executions"`
	// Lost: the interpreter died (python); the next execution starts a fresh one.
	Lost bool `json:"lost,omitempty"`
}

// registry is the list of a sandbox's contexts, kept in contexts.json in the provider's
// scratch folder inside the sandbox, so that every gateway (and every handle) sees the same.
type registry struct {
	Contexts []ctxEntry `json:"contexts"`
}

func (r *registry) find(name string) int {
	return slices.IndexFunc(r.Contexts, func(e ctxEntry) bool { return e.Name == name })
}

func (s *Sandbox) registryPath(ctx context.Context) (string, error) {
	_, sc, err := s.paths(ctx)
	if err != nil {
		return "", err
	}
	return sc + "/contexts.json", nil
}

func (s *Sandbox) loadRegistry(ctx context.Context) (*registry, error) {
	p, err := s.registryPath(ctx)
	if err != nil {
		return nil, err
	}
	rc, err := s.tb.download(ctx, p)
	if statusOf(err) == http.StatusNotFound {
		return &registry{}, nil
	}
	if err != nil {
		return nil, s.failed(ctx, err, "reading the list of contexts")
	}
	defer rc.Close()
	var r registry
	if err := json.NewDecoder(io.LimitReader(rc, 1<<20)).Decode(&r); err != nil {
		return nil, fault.Wrap(fault.Provision, err, "%s: sandbox '%s': the list of contexts is unreadable", TypeName, s.id)
	}
	return &r, nil
}

func (s *Sandbox) saveRegistry(ctx context.Context, r *registry) error {
	p, err := s.registryPath(ctx)
	if err != nil {
		return err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := s.tb.upload(ctx, []uploadFile{{path: p, r: bytes.NewReader(b)}}); err != nil {
		return s.failed(ctx, err, "saving the list of contexts")
	}
	return nil
}

func checkContext(name, language string) error {
	if !contextName.MatchString(name) {
		return fault.New(fault.Validation, "invalid context name %q: use 1 to 64 letters, digits, '_', '.' or '-'", name)
	}
	if language != "python" && language != "bash" {
		return fault.New(fault.Validation, "a context's language is python or bash, not %q", language)
	}
	return nil
}

func info(e ctxEntry) providers.ContextInfo {
	return providers.ContextInfo{Name: e.Name, Language: e.Language, CreatedAt: e.CreatedAt, Executions: e.Executions, Alive: !e.Lost}
}

// ListContexts returns the sandbox's contexts, sorted by name.
func (s *Sandbox) ListContexts(ctx context.Context) ([]providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	r, err := s.loadRegistry(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]providers.ContextInfo, 0, len(r.Contexts))
	for _, e := range r.Contexts {
		out = append(out, info(e))
	}
	slices.SortFunc(out, func(a, b providers.ContextInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// CreateContext starts context name: a Daytona interpreter context for python, a fresh
// state folder for bash.
//
// Errors: fault.Validation for a bad name or language; fault.Conflict when it exists or the
// sandbox has MaxContexts already.
func (s *Sandbox) CreateContext(ctx context.Context, name, language string) (providers.ContextInfo, error) {
	if err := checkContext(name, language); err != nil {
		return providers.ContextInfo{}, err
	}
	if err := s.usable(); err != nil {
		return providers.ContextInfo{}, err
	}
	r, err := s.loadRegistry(ctx)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	e, err := s.addContext(ctx, r, name, language)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	return info(e), s.saveRegistry(ctx, r)
}

// addContext starts a context and adds it to r (which the caller saves).
func (s *Sandbox) addContext(ctx context.Context, r *registry, name, language string) (ctxEntry, error) {
	if r.find(name) >= 0 {
		return ctxEntry{}, fault.New(fault.Conflict, "context '%s' exists", name)
	}
	if len(r.Contexts) >= MaxContexts {
		return ctxEntry{}, fault.New(fault.Conflict, "the sandbox has %d contexts, the most it keeps; delete one first", MaxContexts)
	}
	e := ctxEntry{Name: name, Language: language, CreatedAt: time.Now().UTC()}
	if err := s.startContext(ctx, &e); err != nil {
		return ctxEntry{}, err
	}
	r.Contexts = append(r.Contexts, e)
	return e, nil
}

// startContext gives e a fresh interpreter (python) or a fresh state (bash).
func (s *Sandbox) startContext(ctx context.Context, e *ctxEntry) error {
	e.CreatedAt, e.Executions, e.Lost = time.Now().UTC(), 0, false
	if e.Language == "bash" {
		return s.forgetBashState(ctx, e.Name)
	}
	if e.ID != "" {
		s.dropInterpreter(ctx, e.ID)
		e.ID = ""
	}
	ws, _, err := s.paths(ctx)
	if err != nil {
		return err
	}
	ic, err := s.tb.createContext(ctx, ws)
	if err != nil {
		return s.failed(ctx, err, "starting a python interpreter context")
	}
	e.ID = ic.ID
	return nil
}

func (s *Sandbox) dropInterpreter(ctx context.Context, id string) {
	if err := s.tb.deleteContext(ctx, id); err != nil && statusOf(err) != http.StatusNotFound {
		s.p.log.Warn("daytona: could not delete an interpreter context", "sandbox_id", s.id, "context_id", id, "error", err)
	}
}

func (s *Sandbox) bashState(ctx context.Context, name string) (string, error) {
	_, sc, err := s.paths(ctx)
	if err != nil {
		return "", err
	}
	return sc + "/ctx-" + name, nil
}

func (s *Sandbox) forgetBashState(ctx context.Context, name string) error {
	dir, err := s.bashState(ctx, name)
	if err != nil {
		return err
	}
	if err := s.tb.remove(ctx, dir, true); err != nil && statusOf(err) != http.StatusNotFound {
		return s.failed(ctx, err, "clearing the state of context '"+name+"'")
	}
	return nil
}

// RestartContext replaces context name's interpreter (python) or forgets its state (bash).
// Errors: fault.NotFound when there is no such context.
func (s *Sandbox) RestartContext(ctx context.Context, name string) (providers.ContextInfo, error) {
	if err := s.usable(); err != nil {
		return providers.ContextInfo{}, err
	}
	r, err := s.loadRegistry(ctx)
	if err != nil {
		return providers.ContextInfo{}, err
	}
	i := r.find(name)
	if i < 0 {
		return providers.ContextInfo{}, fault.New(fault.NotFound, "context '%s' does not exist", name)
	}
	if err := s.startContext(ctx, &r.Contexts[i]); err != nil {
		return providers.ContextInfo{}, err
	}
	return info(r.Contexts[i]), s.saveRegistry(ctx, r)
}

// DeleteContext stops context name and forgets it. Errors: fault.NotFound.
func (s *Sandbox) DeleteContext(ctx context.Context, name string) error {
	if err := s.usable(); err != nil {
		return err
	}
	r, err := s.loadRegistry(ctx)
	if err != nil {
		return err
	}
	i := r.find(name)
	if i < 0 {
		return fault.New(fault.NotFound, "context '%s' does not exist", name)
	}
	e := r.Contexts[i]
	if e.Language == "bash" {
		if err := s.forgetBashState(ctx, e.Name); err != nil {
			return err
		}
	} else if e.ID != "" {
		s.dropInterpreter(ctx, e.ID)
	}
	r.Contexts = slices.Delete(r.Contexts, i, i+1)
	return s.saveRegistry(ctx, r)
}

// execInContext runs spec.Code in context spec.Context, creating it (with spec.Language,
// python by default) on first use.
func (s *Sandbox) execInContext(ctx context.Context, spec providers.ExecSpec) (providers.ExitStatus, error) {
	lang := spec.Language
	r, err := s.loadRegistry(ctx)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	i := r.find(spec.Context)
	if i >= 0 && lang != "" && lang != r.Contexts[i].Language {
		return providers.ExitStatus{}, fault.New(fault.Validation, "context '%s' runs %s, not %s", spec.Context, r.Contexts[i].Language, lang)
	}
	if i < 0 {
		if lang == "" {
			lang = "python"
		}
		if err := checkContext(spec.Context, lang); err != nil {
			return providers.ExitStatus{}, err
		}
		if _, err := s.addContext(ctx, r, spec.Context, lang); err != nil {
			return providers.ExitStatus{}, err
		}
		i = len(r.Contexts) - 1
	}
	e := &r.Contexts[i]
	var st providers.ExitStatus
	if e.Language == "bash" {
		st, err = s.execBash(ctx, e, spec)
	} else {
		st, err = s.execPython(ctx, e, spec)
	}
	if err != nil && ctx.Err() != nil {
		// Record what is known (a python context dropped by the cancellation) before returning.
		bctx, cancel := background()
		defer cancel()
		_ = s.saveRegistry(bctx, r)
		return st, err
	}
	if err != nil {
		return st, err
	}
	e.Executions++
	return st, s.saveRegistry(ctx, r)
}

// checkDir checks the working folder of a context execution; "" is fine.
func (s *Sandbox) checkDir(ctx context.Context, dir string) (string, error) {
	if dir == "" {
		return "", nil
	}
	abs, rel, err := s.abs(ctx, dir)
	if err != nil {
		return "", err
	}
	fi, err := s.tb.info(ctx, abs)
	switch {
	case statusOf(err) == http.StatusNotFound || statusOf(err) == http.StatusBadRequest:
		return "", fault.New(fault.NotFound, "working folder '%s' does not exist", rel)
	case err != nil:
		return "", s.unreached(ctx, err, "checking the working folder")
	case !fi.IsDir:
		return "", fault.New(fault.Validation, "working folder '%s' is not a folder", rel)
	}
	return abs, nil
}

// execPython runs code in a Daytona interpreter context (the execute WebSocket). Outcomes:
// an exception gives exit code 1 and its traceback on stderr; the timeout's interrupt
// (KeyboardInterrupt, state kept) gives TimedOut; an interpreter that died (the socket closed
// without a completion) gives ContextLost, exit code 1 and a notice on stderr, and the next
// execution starts a fresh one. Daytona's interpreter reports no exit status: sys.exit(n)
// ends an execution normally, with exit code 0.
func (s *Sandbox) execPython(ctx context.Context, e *ctxEntry, spec providers.ExecSpec) (providers.ExitStatus, error) {
	if spec.Stdin != nil {
		return providers.ExitStatus{}, fault.New(fault.Validation, "%s: a python context takes no standard input (Daytona's interpreter reads none); run the code without a context", TypeName)
	}
	dir, err := s.checkDir(ctx, spec.Dir)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	var reset bool
	if e.ID != "" && !e.Lost {
		// The interpreter is gone when the sandbox restarted (auto-stop) since the last use.
		list, err := s.tb.listContexts(ctx)
		if err != nil {
			return providers.ExitStatus{}, s.unreached(ctx, err, "listing interpreter contexts")
		}
		j := slices.IndexFunc(list, func(c interpContext) bool { return c.ID == e.ID })
		if j < 0 || !list[j].Active {
			reset = e.Executions > 0
			e.Lost = true
		}
	}
	if e.ID == "" || e.Lost {
		if err := s.startContext(ctx, e); err != nil {
			return providers.ExitStatus{}, err
		}
	}
	streams := providers.RuntimeStreams(spec.Output)
	if dir != "" {
		b, _ := json.Marshal(dir) // a JSON string is a valid Python string literal
		code := "import os as __sandgate_os\n__sandgate_os.chdir(" + string(b) + ")\ndel __sandgate_os\n"
		res, err := s.tb.runCode(ctx, code, e.ID, nil, time.Minute, io.Discard, streams.Stderr)
		if err != nil {
			return providers.ExitStatus{}, s.failed(ctx, err, "changing the context's working folder")
		}
		if res.Error != nil || !res.Completed {
			return providers.ExitStatus{}, fault.New(fault.Provision, "%s: could not change the working folder of context '%s'", TypeName, e.Name)
		}
	}
	// The toolbox interrupts the code at the timeout; the local deadline only guards
	// against a toolbox that never answers.
	rctx, cancel := ctx, context.CancelFunc(func() {})
	if spec.Timeout > 0 {
		rctx, cancel = context.WithTimeout(ctx, spec.Timeout+s.p.killGrace()+30*time.Second)
	}
	defer cancel()
	res, err := s.tb.runCode(rctx, spec.Code, e.ID, spec.Env, spec.Timeout, streams.Stdout, streams.Stderr)
	st := providers.ExitStatus{ContextReset: reset}
	if reset {
		fmt.Fprintf(streams.Stderr, "sandgate: the python context '%s' was lost when the sandbox restarted; this execution ran in a fresh one\n", e.Name)
	}
	if err != nil {
		if rctx.Err() != nil {
			// Cancelled, or the toolbox never answered: the only way to stop the code is to
			// end its interpreter.
			bctx, bcancel := background()
			s.dropInterpreter(bctx, e.ID)
			bcancel()
			e.ID, e.Lost = "", true
			if ctx.Err() != nil {
				return providers.ExitStatus{ContextLost: true}, ctx.Err()
			}
			return providers.ExitStatus{TimedOut: true, ContextLost: true, ExitCode: 1}, nil
		}
		return providers.ExitStatus{}, s.failed(ctx, err, "running code in context '"+e.Name+"'")
	}
	if res.Error != nil {
		tb := res.Error.Traceback
		if tb == "" {
			tb = res.Error.Name + ": " + res.Error.Value + "\n"
		}
		_, _ = io.WriteString(streams.Stderr, tb)
		st.ExitCode = 1
	}
	switch {
	case res.Interrupted:
		st.TimedOut, st.ExitCode = spec.Timeout > 0, 1
	case !res.Completed:
		// The interpreter died during the execution.
		st.ContextLost, st.ExitCode = true, 1
		st.TimedOut = res.CloseCode == closeTimeout
		fmt.Fprintf(streams.Stderr, "sandgate: the python context '%s' ended (%s); its state is lost and the next execution starts a fresh one\n",
			e.Name, closeReason(res))
		bctx, bcancel := background()
		s.dropInterpreter(bctx, e.ID)
		bcancel()
		e.ID, e.Lost = "", true
	}
	return st, nil
}

func closeReason(r runResult) string {
	if r.CloseText != "" {
		return r.CloseText
	}
	if r.CloseCode != 0 {
		return fmt.Sprintf("connection closed with code %d", r.CloseCode)
	}
	return "connection closed"
}

// bashDriver runs one execution of a bash context: it restores the exported variables and
// the working folder the previous execution saved, applies this execution's variables,
// sources the code, and on exit (also `exit N`) puts back the variables the code did not
// change and saves the state; renames make a save all or nothing. Arguments: the state
// folder, "1" when the execution has its own working folder, the code file, then the names
// of this execution's variables (whose values arrive as SANDGATE_OVERRIDE_<name>).
const bashDriver = `__sg_state=$1
__sg_here=$2
__sg_code=$3
shift 3
__sg_names=("$@")
set --
mkdir -p -- "$__sg_state"
if [[ -f $__sg_state/env ]]; then . "$__sg_state/env"; fi
if [[ -z $__sg_here && -f $__sg_state/cwd ]]; then
	cd -- "$(<"$__sg_state/cwd")" 2>/dev/null || true
fi
__sg_had=() __sg_old=() __sg_new=()
for __sg_n in "${__sg_names[@]}"; do
	__sg_v=SANDGATE_OVERRIDE_$__sg_n
	if [[ -v $__sg_n ]]; then __sg_had+=(1) __sg_old+=("${!__sg_n}"); else __sg_had+=(0) __sg_old+=(""); fi
	__sg_new+=("${!__sg_v}")
	export "$__sg_n=${!__sg_v}"
	unset "$__sg_v"
done
__sg_save() {
	local i k
	for i in "${!__sg_names[@]}"; do
		k=${__sg_names[i]}
		if [[ -v $k && ${!k} == "${__sg_new[i]}" ]]; then
			if [[ ${__sg_had[i]} == 1 ]]; then export "$k=${__sg_old[i]}"; else unset "$k"; fi
		fi
	done
	export -p >"$__sg_state/env.new" && printf '%s' "$PWD" >"$__sg_state/cwd.new" &&
		mv -f -- "$__sg_state/env.new" "$__sg_state/env" && mv -f -- "$__sg_state/cwd.new" "$__sg_state/cwd"
}
trap __sg_save EXIT
unset __sg_n __sg_v __sg_here
. "$__sg_code"
`

// execBash runs code in a bash context: a fresh bash (through a fresh session, like any
// execution) restores the state the previous execution saved in the context's folder.
func (s *Sandbox) execBash(ctx context.Context, e *ctxEntry, spec providers.ExecSpec) (providers.ExitStatus, error) {
	state, err := s.bashState(ctx, e.Name)
	if err != nil {
		return providers.ExitStatus{}, err
	}
	here := "''"
	if spec.Dir != "" {
		here = "1"
	}
	env := make(map[string]string, len(spec.Env))
	words := []string{"bash", "--noprofile", "--norc", "@D@/driver", shQuote(state), here, "@D@/prog"}
	for n, v := range spec.Env {
		env["SANDGATE_OVERRIDE_"+n] = v
		words = append(words, n) // a validated name
	}
	return s.run(ctx, runSpec{
		program: spec.Code, launch: strings.Join(words, " "), env: env, dir: spec.Dir,
		stdin: spec.Stdin, timeout: spec.Timeout, out: spec.Output,
		extra: map[string]string{"driver": bashDriver},
	})
}
