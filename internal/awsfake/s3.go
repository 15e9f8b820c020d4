package awsfake

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/xml"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

type listBucketResult struct {
	XMLName     xml.Name   `xml:"ListBucketResult"`
	Xmlns       string     `xml:"xmlns,attr"`
	Name        string     `xml:"Name"`
	Prefix      string     `xml:"Prefix"`
	KeyCount    int        `xml:"KeyCount"`
	MaxKeys     int        `xml:"MaxKeys"`
	IsTruncated bool       `xml:"IsTruncated"`
	Contents    []s3Object `xml:"Contents"`
}

type s3Object struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int    `xml:"Size"`
	StorageClass string `xml:"StorageClass"`
}

type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource,omitempty"`
	RequestID string   `xml:"RequestId"`
}

// serveS3 answers path-style ListObjectsV2 (GET /<bucket>?list-type=2) and GetObject
// (GET /<bucket>/<key>).
func (s *Server) serveS3(w http.ResponseWriter, r *http.Request, body []byte) {
	call, id, aerr := s.authenticate(r, body, "s3")
	call.Service, call.Form = "s3", r.URL.Query()
	bucket, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && key == "" && r.URL.Query().Get("list-type") == "2":
		call.Operation = "ListObjectsV2"
	case r.Method == http.MethodGet && key != "":
		call.Operation = "GetObject"
	default:
		call.Operation = r.Method + " " + r.URL.Path
	}
	fail := func(status int, code, msg string) {
		call.ErrorCode = code
		s.record(call)
		b, _ := xml.Marshal(s3Error{Code: code, Message: msg, Resource: r.URL.Path, RequestID: requestID()})
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(xml.Header))
		_, _ = w.Write(b)
	}
	switch {
	case aerr != nil:
		fail(http.StatusForbidden, aerr.s3, aerr.msg)
		return
	case id == nil:
		fail(http.StatusForbidden, "AccessDenied", "Anonymous access is not allowed")
		return
	}
	s.mu.Lock()
	stored, ok := s.buckets[bucket]
	objects := make(map[string][]byte, len(stored))
	var names []string
	for k, v := range stored {
		names = append(names, k)
		objects[k] = v // the stored slices are never modified
	}
	data, found := objects[key]
	s.mu.Unlock()
	if !ok {
		fail(http.StatusNotFound, "NoSuchBucket", "The specified bucket does not exist")
		return
	}
	switch call.Operation {
	case "ListObjectsV2":
		prefix := r.URL.Query().Get("prefix")
		res := listBucketResult{Xmlns: "http://s3.amazonaws.com/doc/2006-03-01/", Name: bucket, Prefix: prefix, MaxKeys: 1000}
		slices.Sort(names)
		for _, k := range names {
			if !strings.HasPrefix(k, prefix) {
				continue
			}
			sum := md5.Sum(objects[k])
			res.Contents = append(res.Contents, s3Object{
				Key: k, LastModified: time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
				ETag: `"` + hex.EncodeToString(sum[:]) + `"`, Size: len(objects[k]), StorageClass: "STANDARD",
			})
		}
		res.KeyCount = len(res.Contents)
		s.record(call)
		writeXML(w, http.StatusOK, res)
	case "GetObject":
		if !found {
			fail(http.StatusNotFound, "NoSuchKey", "The specified key does not exist.")
			return
		}
		s.record(call)
		sum := md5.Sum(data)
		w.Header().Set("Content-Type", "binary/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Header().Set("ETag", `"`+hex.EncodeToString(sum[:])+`"`)
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
		_, _ = w.Write(data)
	default:
		fail(http.StatusNotImplemented, "NotImplemented", "awsfake does not implement "+call.Operation)
	}
}
