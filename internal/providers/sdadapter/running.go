package sdadapter

import (
	"context"
	"errors"
	"sync"
)

// ErrDestroyed is the cause (context.Cause) with which Running.Stop ends the executions of a
// destroyed sandbox.
var ErrDestroyed = errors.New("sandbox destroyed")

// Running holds the executions that run in a provider's sandboxes, by sandbox id, so that
// Destroy can end them at once rather than leave them to find out when their connection
// breaks. The zero value is ready to use; a provider keeps one and hands it to every handle
// (Config.Running).
type Running struct {
	mu  sync.Mutex
	set map[string]map[*execution]struct{}
}

// execution is one running Exec, as Stop sees it.
type execution struct {
	cancel context.CancelCauseFunc
}

// track registers an execution of sandbox id, ended by cancel; the returned untrack must be
// called once it has ended.
func (r *Running) track(id string, cancel context.CancelCauseFunc) (untrack func()) {
	ex := &execution{cancel: cancel}
	r.mu.Lock()
	if r.set == nil {
		r.set = make(map[string]map[*execution]struct{})
	}
	if r.set[id] == nil {
		r.set[id] = make(map[*execution]struct{})
	}
	r.set[id][ex] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if set := r.set[id]; set != nil {
			delete(set, ex)
			if len(set) == 0 {
				delete(r.set, id)
			}
		}
		r.mu.Unlock()
	}
}

// Stop ends every execution running in sandbox id (with cause ErrDestroyed: they return
// fault.Gone). Providers call it from Destroy before the sandbox goes.
func (r *Running) Stop(id string) {
	r.mu.Lock()
	set := r.set[id]
	delete(r.set, id)
	r.mu.Unlock()
	for ex := range set {
		ex.cancel(ErrDestroyed)
	}
}
