package awsfake

import (
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const stsNamespace = "https://sts.amazonaws.com/doc/2011-06-15/"

// stsName is the constraint STS puts on RoleSessionName and SourceIdentity.
var stsName = regexp.MustCompile(`^[\w+=,.@-]{2,64}$`)

type stsCredentials struct {
	AccessKeyID     string `xml:"AccessKeyId"`
	SecretAccessKey string `xml:"SecretAccessKey"`
	SessionToken    string `xml:"SessionToken"`
	Expiration      string `xml:"Expiration"`
}

type stsAssumedRoleUser struct {
	Arn           string `xml:"Arn"`
	AssumedRoleID string `xml:"AssumedRoleId"`
}

type stsResponseMetadata struct {
	RequestID string `xml:"RequestId"`
}

type assumeRoleResponse struct {
	XMLName xml.Name `xml:"AssumeRoleResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		SourceIdentity   string             `xml:"SourceIdentity,omitempty"`
		AssumedRoleUser  stsAssumedRoleUser `xml:"AssumedRoleUser"`
		Credentials      stsCredentials     `xml:"Credentials"`
		PackedPolicySize int                `xml:"PackedPolicySize"`
	} `xml:"AssumeRoleResult"`
	ResponseMetadata stsResponseMetadata `xml:"ResponseMetadata"`
}

type assumeRoleWithWebIdentityResponse struct {
	XMLName xml.Name `xml:"AssumeRoleWithWebIdentityResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Result  struct {
		SubjectFromWebIdentityToken string             `xml:"SubjectFromWebIdentityToken"`
		Audience                    string             `xml:"Audience"`
		AssumedRoleUser             stsAssumedRoleUser `xml:"AssumedRoleUser"`
		Credentials                 stsCredentials     `xml:"Credentials"`
		Provider                    string             `xml:"Provider"`
	} `xml:"AssumeRoleWithWebIdentityResult"`
	ResponseMetadata stsResponseMetadata `xml:"ResponseMetadata"`
}

type stsErrorResponse struct {
	XMLName xml.Name `xml:"ErrorResponse"`
	Xmlns   string   `xml:"xmlns,attr"`
	Error   struct {
		Type    string `xml:"Type"`
		Code    string `xml:"Code"`
		Message string `xml:"Message"`
	} `xml:"Error"`
	RequestID string `xml:"RequestId"`
}

func (s *Server) serveSTS(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		stsError(w, http.StatusBadRequest, "MalformedInput", "the request body is not a form")
		return
	}
	call, id, aerr := s.authenticate(r, body, "sts")
	call.Service, call.Operation, call.Form = "sts", form.Get("Action"), form
	fail := func(status int, code, msg string) {
		call.ErrorCode = code
		s.record(call)
		stsError(w, status, code, msg)
	}
	if aerr != nil {
		fail(http.StatusForbidden, aerr.sts, aerr.msg)
		return
	}
	if form.Get("Version") != "2011-06-15" {
		fail(http.StatusBadRequest, "InvalidAction", "unsupported STS version "+form.Get("Version"))
		return
	}
	if s.throttled(call.Operation) {
		fail(http.StatusBadRequest, "Throttling", "Rate exceeded")
		return
	}
	switch call.Operation {
	case "AssumeRole":
		s.assumeRole(w, form, id, &call, fail)
	case "AssumeRoleWithWebIdentity":
		s.assumeRoleWithWebIdentity(w, form, &call, fail)
	default:
		fail(http.StatusBadRequest, "InvalidAction", "awsfake does not implement STS "+call.Operation)
	}
}

// checkAssume validates the parameters common to both operations; it returns an error
// message for a ValidationError, or "".
func (s *Server) checkAssume(form url.Values) string {
	role := form.Get("RoleArn")
	if !strings.HasPrefix(role, "arn:aws:iam::") || !strings.Contains(role, ":role/") {
		return fmt.Sprintf("1 validation error detected: Value '%s' at 'roleArn' failed to satisfy constraint", role)
	}
	if name := form.Get("RoleSessionName"); !stsName.MatchString(name) {
		return fmt.Sprintf("1 validation error detected: Value '%s' at 'roleSessionName' failed to satisfy constraint: Member must satisfy regular expression pattern: [\\w+=,.@-]*", name)
	}
	if v, ok := form["SourceIdentity"]; ok && (!stsName.MatchString(v[0]) || strings.HasPrefix(strings.ToLower(v[0]), "aws:")) {
		return fmt.Sprintf("1 validation error detected: Value '%s' at 'sourceIdentity' failed to satisfy constraint", v[0])
	}
	if d := form.Get("DurationSeconds"); d != "" {
		n, err := strconv.Atoi(d)
		if err != nil || n < 900 || n > 43200 {
			return fmt.Sprintf("1 validation error detected: Value '%s' at 'durationSeconds' failed to satisfy constraint", d)
		}
	}
	return ""
}

// issue creates a session for role and returns it.
func (s *Server) issue(form url.Values, kind string) *Identity {
	lifetime := time.Hour
	if d, err := strconv.Atoi(form.Get("DurationSeconds")); err == nil {
		lifetime = time.Duration(d) * time.Second
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.credentialLifetime > 0 {
		lifetime = s.credentialLifetime
	}
	id := &Identity{
		AccessKeyID:     "ASIA" + strings.ToUpper(randomHex(8)),
		SecretAccessKey: base64.StdEncoding.EncodeToString([]byte(randomHex(20)))[:40],
		SessionToken:    "FwoGZXIvYXdzE" + base64.StdEncoding.EncodeToString([]byte(randomHex(48))),
		Kind:            kind,
		RoleARN:         form.Get("RoleArn"),
		RoleSessionName: form.Get("RoleSessionName"),
		SourceIdentity:  form.Get("SourceIdentity"),
		Expires:         time.Now().Add(lifetime).Truncate(time.Second),
	}
	s.keys[id.AccessKeyID] = id
	return id
}

func (s *Server) roleUser(id *Identity) stsAssumedRoleUser {
	role := id.RoleARN[strings.LastIndex(id.RoleARN, "/")+1:]
	return stsAssumedRoleUser{
		Arn:           fmt.Sprintf("arn:aws:sts::%s:assumed-role/%s/%s", s.Account, role, id.RoleSessionName),
		AssumedRoleID: "AROA" + strings.ToUpper(randomHex(8)) + ":" + id.RoleSessionName,
	}
}

func (s *Server) denied(role string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deniedRoles[role]
}

func (s *Server) assumeRole(w http.ResponseWriter, form url.Values, caller *Identity, call *Call, fail func(int, string, string)) {
	if caller == nil {
		fail(http.StatusForbidden, "MissingAuthenticationToken", "Request is missing Authentication Token")
		return
	}
	if msg := s.checkAssume(form); msg != "" {
		fail(http.StatusBadRequest, "ValidationError", msg)
		return
	}
	role := form.Get("RoleArn")
	if s.denied(role) {
		fail(http.StatusForbidden, "AccessDenied", fmt.Sprintf("User: %s is not authorized to perform: sts:AssumeRole on resource: %s", callerARN(s, caller), role))
		return
	}
	id := s.issue(form, "assumed-role")
	s.mu.Lock()
	id.IssuedBy = caller.AccessKeyID
	s.mu.Unlock()
	var resp assumeRoleResponse
	resp.Xmlns = stsNamespace
	resp.Result.SourceIdentity = id.SourceIdentity
	resp.Result.AssumedRoleUser = s.roleUser(id)
	resp.Result.Credentials = stsCreds(id)
	resp.Result.PackedPolicySize = 6
	resp.ResponseMetadata.RequestID = requestID()
	s.record(*call)
	writeXML(w, http.StatusOK, resp)
}

func (s *Server) assumeRoleWithWebIdentity(w http.ResponseWriter, form url.Values, call *Call, fail func(int, string, string)) {
	if msg := s.checkAssume(form); msg != "" {
		fail(http.StatusBadRequest, "ValidationError", msg)
		return
	}
	token := form.Get("WebIdentityToken")
	s.mu.Lock()
	subject, trusted := s.webTokens[token]
	s.mu.Unlock()
	if !trusted {
		fail(http.StatusBadRequest, "InvalidIdentityToken", "Couldn't retrieve verification key from your identity provider")
		return
	}
	role := form.Get("RoleArn")
	if s.denied(role) {
		fail(http.StatusForbidden, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
		return
	}
	id := s.issue(form, "web-identity")
	s.mu.Lock()
	id.WebIdentitySubject = subject
	s.mu.Unlock()
	var resp assumeRoleWithWebIdentityResponse
	resp.Xmlns = stsNamespace
	resp.Result.SubjectFromWebIdentityToken = subject
	resp.Result.Audience = "sandgate"
	resp.Result.AssumedRoleUser = s.roleUser(id)
	resp.Result.Credentials = stsCreds(id)
	resp.Result.Provider = "sandgate-issuer"
	resp.ResponseMetadata.RequestID = requestID()
	s.record(*call)
	writeXML(w, http.StatusOK, resp)
}

func callerARN(s *Server, id *Identity) string {
	if id.Kind == "gateway" {
		return fmt.Sprintf("arn:aws:iam::%s:user/sandgate-gateway", s.Account)
	}
	return s.roleUser(id).Arn
}

func stsCreds(id *Identity) stsCredentials {
	return stsCredentials{
		AccessKeyID:     id.AccessKeyID,
		SecretAccessKey: id.SecretAccessKey,
		SessionToken:    id.SessionToken,
		Expiration:      id.Expires.UTC().Format(time.RFC3339),
	}
}

func stsError(w http.ResponseWriter, status int, code, msg string) {
	var e stsErrorResponse
	e.Xmlns = stsNamespace
	e.Error.Type = "Sender"
	e.Error.Code = code
	e.Error.Message = msg
	e.RequestID = requestID()
	writeXML(w, status, e)
}

func writeXML(w http.ResponseWriter, status int, v any) {
	b, err := xml.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/xml")
	w.Header().Set("X-Amzn-Requestid", requestID())
	w.WriteHeader(status)
	_, _ = w.Write([]byte(xml.Header))
	_, _ = w.Write(b)
}
