package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/pkg/client"
)

// Rich results of code (the last expression's value, displays, charts, tables), as a
// terminal can show them: the text of each (its text/plain) is printed on stdout as it
// comes, after the output printed before it; an image (PNG, JPEG, SVG) is saved to a file of
// its own — <dir>/<task id>-<n>.<ext>, n counting the execution's results from 1 — named on
// stderr; a result with neither, or one dropped over the output limit, is named on stderr.

// imageFiles are the MIME types saved to files, in order of preference, with their
// extensions.
var imageFiles = []struct{ mime, ext string }{
	{"image/png", ".png"}, {"image/jpeg", ".jpg"}, {"image/svg+xml", ".svg"},
}

// resultPrinter shows the rich results of one execution.
type resultPrinter struct {
	a      *app
	dir    string // where images are saved; "" saves none
	taskID string
	shown  int // results shown so far
}

// show shows r, the execution's next result.
func (p *resultPrinter) show(r client.RichResult) error {
	p.shown++
	if d := r.Dropped; d != nil {
		p.a.warn("a result (%s, %s) was over the output limit (sandbox.max_output_bytes) and was dropped", strings.Join(d.Types, ", "), size(d.Bytes))
		return nil
	}
	saved := false
	for _, f := range imageFiles {
		data, ok, err := r.Bytes(f.mime)
		if !ok {
			continue
		}
		if err != nil {
			return err
		}
		if p.dir == "" {
			p.a.warn("result %d is an image (%s): 'sandgate code' saves images to files, or read it from task %s", p.shown, f.mime, p.taskID)
			saved = true
			break
		}
		name := filepath.Join(p.dir, fmt.Sprintf("%s-%d%s", p.taskID, p.shown, f.ext))
		// Never over a file that is there: a task id is new, so only a user's own file is.
		file, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return fmt.Errorf("saving result %d: %w", p.shown, err)
		}
		_, werr := file.Write(data)
		if cerr := file.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return fmt.Errorf("saving result %d to %s: %w", p.shown, name, werr)
		}
		p.a.warn("result %d (%s, %s) saved to %s", p.shown, f.mime, size(int64(len(data))), name)
		saved = true
		break
	}
	if text, ok := r.Text("text/plain"); ok && !saved {
		if !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		_, err := fmt.Fprint(p.a.env.stdout, text)
		return err
	}
	if !saved {
		p.a.warn("result %d has no text to print (%s): see the task's result", p.shown, strings.Join(r.Types(), ", "))
	}
	return nil
}

// size is n bytes for people.
func size(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
