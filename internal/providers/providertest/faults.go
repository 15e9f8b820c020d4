package providertest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
	"github.com/sandgate/sandgate/internal/wspath"
)

// badInput is one file operation on one path and the fault every provider answers with ("" for
// success).
type badInput struct {
	op   string // write, read, list or remove
	path string
	want fault.Kind
}

// badInputs is the table of the faults group: what each file operation answers for each bad
// path, the same on every provider (docs/semantics.md §8 "Files"; wspath.Clean and
// wspath.CleanEntry hold the lexical rules). The workspace holds dir/file.txt and full/kept.txt
// when it runs.
func badInputs() []badInput {
	var in []badInput
	all := func(path string, want fault.Kind) {
		for _, op := range []string{"write", "read", "list", "remove"} {
			in = append(in, badInput{op, path, want})
		}
	}
	// The workspace folder itself is no file: writing or removing it is malformed input,
	// whatever the workspace holds (validation, not conflict). Reading it finds a folder.
	for _, p := range []string{"", ".", "./", "dir/..", "dir/../."} {
		in = append(in,
			badInput{"write", p, fault.Validation},
			badInput{"remove", p, fault.Validation},
			badInput{"read", p, fault.Conflict})
	}
	// A NUL byte, an absolute path and a path that leaves the workspace are policy, for every
	// operation, before anything else is looked at.
	for _, p := range []string{"x\x00y", "dir/\x00", "\x00", "/", "/etc/passwd", "..", "../x", "dir/../../x", "./../dir", "../" + strings.Repeat("n", 300)} {
		all(p, fault.Policy)
	}
	// A name or a path longer than a Linux file system takes is validation, for every
	// operation (also one that would find nothing to remove).
	long := strings.Repeat("n", wspath.MaxNameBytes+1)
	deep := strings.Repeat("d/", wspath.MaxPathBytes/2+1)
	for _, p := range []string{long, "dir/" + long, long + "/x", deep + "f"} {
		all(p, fault.Validation)
	}
	in = append(in,
		// The workspace's state in the way: a folder where a file is wanted, a file where a
		// folder is wanted, a folder that is not empty.
		badInput{"write", "dir", fault.Conflict},
		badInput{"write", "dir/file.txt/below", fault.Conflict},
		badInput{"read", "dir", fault.Conflict},
		badInput{"read", "dir/", fault.Conflict},
		badInput{"list", "dir/file.txt", fault.Conflict},
		badInput{"remove", "full", fault.Conflict},
		// Nothing there: not found for reads and listings, nothing to do for a removal.
		badInput{"read", "missing.txt", fault.NotFound},
		badInput{"read", "missing/file.txt", fault.NotFound},
		badInput{"read", "dir/file.txt/below", fault.NotFound},
		badInput{"list", "missing", fault.NotFound},
		badInput{"list", "dir/missing", fault.NotFound},
		badInput{"list", "dir/file.txt/below", fault.NotFound},
		badInput{"remove", "missing.txt", ""},
		badInput{"remove", "missing/file.txt", ""},
		badInput{"remove", "dir/file.txt/below", ""},
	)
	return in
}

// faults holds the tests that pin one fault for one bad input on every provider: a caller
// gets the same answer (and the same problem type) whatever backend a profile runs on.
func (s *suite) faults(t *testing.T) {
	s.leaf(t, "same_fault_for_same_bad_path", needFiles, func(e *env) {
		sb := e.create()
		e.write(sb, "dir/file.txt", []byte("x"))
		e.write(sb, "full/kept.txt", []byte("x"))
		for _, c := range badInputs() {
			err := e.fileOp(sb, c.op, c.path)
			what := fmt.Sprintf("%s %q", c.op, shortPath(c.path))
			if c.want == "" {
				assert.NoError(e.t, err, what)
				continue
			}
			if assert.Error(e.t, err, what) {
				assert.Truef(e.t, fault.IsKind(err, c.want), "%s: want a %s fault, got %s: %v", what, c.want, fault.KindOf(err), err)
			}
		}
		// Nothing was written, removed or left behind on the way.
		assert.Equal(e.t, []string{"dir", "full"}, names(e.list(sb, "")))
		assert.Equal(e.t, []string{"file.txt"}, names(e.list(sb, "dir")))
		assert.Equal(e.t, []string{"kept.txt"}, names(e.list(sb, "full")))
		assert.Equal(e.t, "x", string(e.read(sb, "dir/file.txt")))
	})

	// A closed handle answers every operation with conflict, after the checks of the input.
	s.leaf(t, "closed_handle_is_conflict", 0, func(e *env) {
		sb := e.create()
		id := sb.ID()
		require.NoError(e.t, sb.Close())
		r := e.run(e.ctx, sb, providers.ExecSpec{Code: "print('hi')", Language: "python"})
		requireKind(e.t, r.err, fault.Conflict, "Exec on a closed handle")
		// Bad input is refused as such before the handle is looked at.
		r = e.run(e.ctx, sb, providers.ExecSpec{Code: "noop", Language: undeclaredLanguage})
		requireKind(e.t, r.err, fault.Capability, "Exec of an undeclared language on a closed handle")
		if e.caps.Files {
			for _, op := range []string{"write", "read", "list", "remove"} {
				requireKind(e.t, e.fileOp(sb, op, "dir/file.txt"), fault.Conflict, "%s on a closed handle", op)
				requireKind(e.t, e.fileOp(sb, op, "../x"), fault.Policy, "%s of an escape on a closed handle", op)
			}
			requireKind(e.t, e.fileOp(sb, "write", ""), fault.Validation, "write of the workspace on a closed handle")
			requireKind(e.t, e.fileOp(sb, "remove", ""), fault.Validation, "remove of the workspace on a closed handle")
		}
		if c, ok := sb.(providers.Contexts); ok && e.caps.Stateful {
			_, err := c.ListContexts(e.ctx)
			requireKind(e.t, err, fault.Conflict, "ListContexts on a closed handle")
		}
		// The sandbox itself is untouched: a new handle works.
		if !e.caps.Attach {
			return
		}
		again, err := e.p.Attach(e.ctx, id, e.h.Principal, e.h.Policy)
		require.NoError(e.t, err)
		defer again.Close()
		r = e.run(e.ctx, again, providers.ExecSpec{Code: "print('hi')", Language: "python"})
		require.NoError(e.t, r.err)
		assert.Equal(e.t, "hi\n", string(r.stdout))
	})
}

// fileOp runs file operation op on path p; a write writes one byte, a read reads nothing.
func (e *env) fileOp(sb providers.Sandbox, op, p string) error {
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	switch op {
	case "write":
		_, err := sb.WriteFile(ctx, p, strings.NewReader("x"), 1<<20)
		return err
	case "read":
		rc, err := sb.ReadFile(ctx, p)
		if err == nil {
			_ = rc.Close()
		}
		return err
	case "list":
		_, err := sb.ListFiles(ctx, p)
		return err
	case "remove":
		return sb.RemoveFile(ctx, p)
	}
	panic("providertest: unknown file operation " + op)
}

// shortPath keeps a test message short: long paths are cut.
func shortPath(p string) string {
	if len(p) > 40 {
		return fmt.Sprintf("%s…(%d bytes)", p[:40], len(p))
	}
	return p
}
