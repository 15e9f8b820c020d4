package daytonafake

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func (s *Server) fileRoutes(h func(string, func(http.ResponseWriter, *http.Request, *sandbox)), t string) {
	h("GET "+t+"/files", s.listFiles)
	h("DELETE "+t+"/files", s.deleteFile)
	h("GET "+t+"/files/info", s.fileInfo)
	h("GET "+t+"/files/download", s.downloadFile)
	h("POST "+t+"/files/bulk-upload", s.uploadFiles)
	h("POST "+t+"/files/bulk-download", s.downloadFiles)
	h("POST "+t+"/files/folder", s.createFolder)
	h("POST "+t+"/files/move", s.moveFile)
}

// fileInfo is Daytona's FileInfo of a stat (symlinks followed), as the daemon renders it.
func fileInfoOf(fi fs.FileInfo) map[string]any {
	uid, gid := "0", "0"
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		uid, gid = strconv.FormatUint(uint64(st.Uid), 10), strconv.FormatUint(uint64(st.Gid), 10)
	}
	return map[string]any{
		"name": fi.Name(), "size": fi.Size(), "mode": fi.Mode().String(),
		"modTime": fi.ModTime().Format(time.RFC3339Nano), "isDir": fi.IsDir(),
		"owner": uid, "group": gid, "permissions": fmt.Sprintf("%04o", fi.Mode().Perm()),
	}
}

// fsStatus maps a file-system error onto the daemon's status codes; a path leading out of
// the sandbox's folder (through a symlink) is 403, where a real sandbox would follow it.
func fsStatus(err error) int {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden
	case strings.Contains(err.Error(), "escapes"):
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// pathOf reads the query parameter name and maps it into the sandbox's folder.
func pathOf(w http.ResponseWriter, r *http.Request, b *sandbox, name string, required bool) (string, bool) {
	p := r.URL.Query().Get(name)
	if p == "" && required {
		writeError(w, http.StatusBadRequest, "%s is required", name)
		return "", false
	}
	rel, ok := b.relPath(p)
	if !ok {
		writeError(w, http.StatusForbidden, "%s is outside the sandbox", p)
		return "", false
	}
	return rel, true
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, b *sandbox) {
	rel, ok := pathOf(w, r, b, "path", false)
	if !ok {
		return
	}
	entries, err := fs.ReadDir(b.fsroot.FS(), rel)
	if err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	out := []map[string]any{}
	for _, e := range entries {
		fi, err := b.fsroot.Stat(path.Join(rel, e.Name()))
		if err != nil {
			continue // the daemon leaves out what it cannot stat (dangling links)
		}
		out = append(out, fileInfoOf(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) fileInfo(w http.ResponseWriter, r *http.Request, b *sandbox) {
	rel, ok := pathOf(w, r, b, "path", true)
	if !ok {
		return
	}
	fi, err := b.fsroot.Stat(rel)
	if err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, fileInfoOf(fi))
}

func (s *Server) downloadFile(w http.ResponseWriter, r *http.Request, b *sandbox) {
	rel, ok := pathOf(w, r, b, "path", true)
	if !ok {
		return
	}
	f, err := b.fsroot.Open(rel)
	if err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	if fi.IsDir() {
		writeError(w, http.StatusBadRequest, "path must be a file")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename="+fi.Name())
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	_, _ = io.Copy(w, f)
}

func (s *Server) deleteFile(w http.ResponseWriter, r *http.Request, b *sandbox) {
	rel, ok := pathOf(w, r, b, "path", true)
	if !ok {
		return
	}
	if rel == "." {
		writeError(w, http.StatusForbidden, "the fake does not delete a sandbox's root")
		return
	}
	fi, err := b.fsroot.Stat(rel)
	if err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	if fi.IsDir() && !recursive {
		writeError(w, http.StatusBadRequest, "cannot delete directory without recursive flag")
		return
	}
	if recursive {
		err = b.fsroot.RemoveAll(rel)
	} else {
		err = b.fsroot.Remove(rel)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) createFolder(w http.ResponseWriter, r *http.Request, b *sandbox) {
	rel, ok := pathOf(w, r, b, "path", true)
	if !ok {
		return
	}
	perm := fs.FileMode(0o755)
	if m := r.URL.Query().Get("mode"); m != "" {
		v, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid mode format")
			return
		}
		perm = fs.FileMode(v)
	}
	if err := b.fsroot.MkdirAll(rel, perm); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) moveFile(w http.ResponseWriter, r *http.Request, b *sandbox) {
	src, ok := pathOf(w, r, b, "source", true)
	if !ok {
		return
	}
	dst, ok := pathOf(w, r, b, "destination", true)
	if !ok {
		return
	}
	if _, err := b.fsroot.Stat(src); err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	if _, err := b.fsroot.Stat(path.Dir(dst)); err != nil {
		writeError(w, fsStatus(err), "%v", err)
		return
	}
	if _, err := b.fsroot.Stat(dst); err == nil {
		writeError(w, http.StatusConflict, "destination already exists")
		return
	}
	if err := b.fsroot.Rename(src, dst); err != nil {
		writeError(w, http.StatusBadRequest, "failed to move file: %v", err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// uploadFiles is the daemon's bulk upload: parts files[i].path then files[i].file; each file
// goes to a temporary file beside its destination (parents made) and is renamed into place,
// so a part that breaks off leaves nothing.
func (s *Server) uploadFiles(w http.ResponseWriter, r *http.Request, b *sandbox) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []string{"invalid multipart form"}})
		return
	}
	dests := map[string]string{}
	errs := []string{}
	files := []map[string]any{}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("reading part: %v", err))
			break
		}
		name := part.FormName()
		idx := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(name, "files["), "].path"), "].file")
		switch {
		case strings.HasSuffix(name, ".path"):
			data, err := io.ReadAll(part)
			if err != nil {
				errs = append(errs, fmt.Sprintf("path[%s]: %v", idx, err))
				continue
			}
			dest := strings.TrimSpace(string(data))
			if dest == "" {
				errs = append(errs, fmt.Sprintf("path[%s]: empty path", idx))
				continue
			}
			dests[idx] = dest
		case strings.HasSuffix(name, ".file"):
			dest, ok := dests[idx]
			if !ok {
				errs = append(errs, fmt.Sprintf("file[%s]: missing .path metadata", idx))
				continue
			}
			n, err := b.writeUploaded(part, dest)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", dest, err))
				continue
			}
			files = append(files, map[string]any{"path": dest, "bytes": n})
		}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": errs, "files": files})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": files})
}

func (b *sandbox) writeUploaded(src io.Reader, dest string) (int64, error) {
	rel, ok := b.relPath(dest)
	if !ok || rel == "." {
		return 0, fmt.Errorf("%s is outside the sandbox", dest)
	}
	dir := path.Dir(rel)
	if dir != "." {
		if err := b.fsroot.MkdirAll(dir, 0o755); err != nil {
			return 0, fmt.Errorf("mkdir %s: %w", dir, err)
		}
	}
	tmp := path.Join(dir, ".daytona-upload-"+randomHex(6))
	f, err := b.fsroot.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fmt.Errorf("create temp: %w", err)
	}
	n, err := io.Copy(f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = b.fsroot.Rename(tmp, rel)
	}
	if err != nil {
		_ = b.fsroot.Remove(tmp)
		return 0, err
	}
	return n, nil
}

// downloadFiles answers a bulk download as multipart/form-data: a part named "file" for each
// file (filename = its requested path), a part named "error" with a JSON body for each path
// that could not be read.
func (s *Server) downloadFiles(w http.ResponseWriter, r *http.Request, b *sandbox) {
	var req struct {
		Paths []string `json:"paths"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Paths) == 0 {
		writeError(w, http.StatusBadRequest, "paths are required")
		return
	}
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", mw.FormDataContentType())
	w.WriteHeader(http.StatusOK)
	for _, p := range req.Paths {
		if err := b.writeDownloadPart(mw, p); err != nil {
			status := fsStatus(err)
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="error"; filename=%q`, p))
			h.Set("Content-Type", "application/json")
			pw, perr := mw.CreatePart(h)
			if perr != nil {
				return
			}
			code := "FILE_NOT_FOUND"
			if status != http.StatusNotFound {
				code = "FILE_ERROR"
			}
			_, _ = pw.Write(jsonBytes(map[string]any{"message": err.Error(), "statusCode": status, "code": code}))
		}
	}
	_ = mw.Close()
}

func (b *sandbox) writeDownloadPart(mw *multipart.Writer, p string) error {
	rel, ok := b.relPath(p)
	if !ok {
		return fmt.Errorf("%s: %w", p, fs.ErrPermission)
	}
	f, err := b.fsroot.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s is a directory", p)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, p))
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	pw, err := mw.CreatePart(h)
	if err != nil {
		return err
	}
	_, err = io.Copy(pw, f)
	return err
}
