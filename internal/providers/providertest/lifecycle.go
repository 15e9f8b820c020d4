package providertest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// lifecycle holds attach and destroy tests beyond the seed's.
func (s *suite) lifecycle(t *testing.T) {
	s.leaf(t, "attach_keeps_workspace", needAttach|needFiles, func(e *env) {
		sb := e.create()
		e.write(sb, "kept.txt", []byte("state"))
		require.NoError(e.t, sb.Close())
		again, err := e.p.Attach(e.ctx, sb.ID(), e.h.Principal, e.h.Policy)
		require.NoError(e.t, err, "Close must not destroy what Attach needs")
		defer again.Close()
		assert.Equal(e.t, "state", string(e.read(again, "kept.txt")))
		r := e.run(e.ctx, again, providers.ExecSpec{Code: "print(open('kept.txt').read())", Language: "python"})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, "state\n", string(r.stdout))
	})

	s.leaf(t, "destroy_during_exec_fails_fast", needShell, func(e *env) {
		sb := e.create()
		done := make(chan result, 1)
		go func() {
			done <- e.run(e.ctx, sb, providers.ExecSpec{Command: "echo started; sleep 600"})
		}()
		time.Sleep(time.Second)
		require.NoError(e.t, e.p.Destroy(e.ctx, sb.ID()))
		select {
		case r := <-done:
			// Either an error (the sandbox is gone) or a status; never a hang.
			e.t.Logf("exec ended after destroy: status %+v, error %v", r.status, r.err)
		case <-time.After(30 * time.Second):
			e.t.Fatal("an execution still runs 30 s after its sandbox was destroyed")
		}
	})

	s.leaf(t, "attach_after_destroy_is_gone", needAttach, func(e *env) {
		sb := e.create()
		id := sb.ID()
		require.NoError(e.t, sb.Close())
		require.NoError(e.t, e.p.Destroy(e.ctx, id))
		_, err := e.p.Attach(e.ctx, id, e.h.Principal, e.h.Policy)
		requireKind(e.t, err, fault.Gone)
		assert.True(e.t, fault.IsKind(err, fault.Provision), "gone is a kind of provision failure")
	})
}
