package main

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/pkg/client"
)

// remotePath is SESSION:PATH of cp.
type remotePath struct {
	session, path string
}

// parseRemote reads SESSION:PATH: a colon before any slash (as scp does). A local path with
// a colon in its first element is written ./a:b.
func parseRemote(arg string) (remotePath, bool) {
	i := strings.IndexByte(arg, ':')
	if i <= 0 || strings.ContainsAny(arg[:i], `/\`) {
		return remotePath{}, false
	}
	return remotePath{session: arg[:i], path: arg[i+1:]}, true
}

func (a *app) cpCommand() *cobra.Command {
	var profile string
	cmd := &cobra.Command{
		Use:   "cp SOURCE DEST",
		Short: "Copy a file into or out of a session (SESSION:PATH), streamed and byte-exact",
		Long: `Copy one file between this machine and a session's workspace, streamed in constant memory
and byte-exact:

  sandgate cp data.bin SESSION:in/data.bin     upload (parent folders are made)
  sandgate cp SESSION:out/result.csv .         download (into a folder: same name)
  sandgate cp - SESSION:in/notes.txt           upload standard input
  sandgate cp SESSION:out/log.txt -            download to standard output

A remote path is relative to the workspace; one ending in / (or empty) takes the local
file's name. SESSION is a session's id or name; "default" with --profile is your default session of that profile.`,
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, srcRemote := parseRemote(args[0])
			dst, dstRemote := parseRemote(args[1])
			switch {
			case srcRemote == dstRemote:
				return usagef("exactly one of SOURCE and DEST must be SESSION:PATH")
			case srcRemote && src.path == "":
				return usagef("%s names no file", args[0])
			}
			c, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			editors := profileEditors(profile)
			if dstRemote {
				if dst.session, err = resolveSession(cmd.Context(), c, dst.session, profile); err != nil {
					return err
				}
				return a.upload(cmd, c, args[0], dst, editors)
			}
			if src.session, err = resolveSession(cmd.Context(), c, src.session, profile); err != nil {
				return err
			}
			return a.download(cmd, c, src, args[1], editors)
		},
	}
	cmd.Flags().StringVar(&profile, "profile", "", `with SESSION "default": that profile's default session`)
	return cmd
}

func (a *app) upload(cmd *cobra.Command, c *client.Client, local string, dst remotePath, editors []client.RequestEditorFn) error {
	var body io.Reader
	size := int64(-1)
	name := filepath.Base(local)
	if local == "-" {
		body, name = a.env.stdin, ""
	} else {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer closeQuietly(f)
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if st.IsDir() {
			return fmt.Errorf("%s is a folder: cp copies one file", local)
		}
		body, size = f, st.Size()
	}
	p := dst.path
	if p == "" || strings.HasSuffix(p, "/") {
		if name == "" {
			return usagef("name the remote file: standard input has no name")
		}
		p += name
	}
	w, err := c.Upload(cmd.Context(), dst.session, p, body, size, editors...)
	if err != nil {
		return err
	}
	if a.structured() {
		return a.print(w)
	}
	return nil
}

// downloaded is the JSON report of a download.
type downloaded struct {
	SessionID string `json:"session_id"`
	Path      string `json:"path"`
	Local     string `json:"local"`
	Size      int64  `json:"size"`
}

func (a *app) download(cmd *cobra.Command, c *client.Client, src remotePath, local string, editors []client.RequestEditorFn) error {
	if local == "-" {
		_, err := c.Download(cmd.Context(), src.session, src.path, a.env.stdout, editors...)
		return err
	}
	if st, err := os.Stat(local); err == nil && st.IsDir() {
		local = filepath.Join(local, path.Base(src.path))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// Into a temporary file beside the destination, renamed over it once complete: a broken
	// download leaves no partial file.
	// Mode 0666 less the umask, as any new file.
	tmp, err := os.OpenFile(filepath.Join(filepath.Dir(local), "."+filepath.Base(local)+".sandgate-"+rand.Text()[:10]), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o666)
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	n, err := c.Download(cmd.Context(), src.session, src.path, tmp, editors...)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return err
	}
	if a.structured() {
		return a.print(downloaded{SessionID: src.session, Path: src.path, Local: local, Size: n})
	}
	return nil
}
