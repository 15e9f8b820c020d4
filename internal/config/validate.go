package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/egress"
)

// ErrInvalid is matched (errors.Is) by every problem Load and Validate report about the
// configuration's content, as opposed to failures to read it.
var ErrInvalid = errors.New("invalid configuration")

// FieldError is one problem with one key. Key is the dotted path as written in the file
// ("sandbox.profiles.web.scope", "auth.issuers[0].url"); Msg says what is wrong and, for
// enumerated keys, the allowed values.
type FieldError struct {
	Key string
	Msg string
}

func (e *FieldError) Error() string {
	if e.Key == "" {
		return e.Msg
	}
	return e.Key + ": " + e.Msg
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// problems collects FieldErrors in the order they are found.
type problems []error

func (p *problems) add(key, format string, args ...any) {
	*p = append(*p, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
}

// enum reports value when it is not one of allowed.
func (p *problems) enum(key, value string, allowed []string) {
	if !slices.Contains(allowed, value) {
		p.add(key, "%q is not allowed; use one of: %s", value, strings.Join(allowed, ", "))
	}
}

func (p *problems) positive(key string, v float64) {
	if v <= 0 {
		p.add(key, "must be greater than 0 (got %v)", v)
	}
}

func (p *problems) nonNegative(key string, v float64) {
	if v < 0 {
		p.add(key, "must not be negative (got %v)", v)
	}
}

// Validate checks the configuration (normally after ApplyDefaults) and returns every problem
// at once: an errors.Join of *FieldError, each naming its dotted key and, for enums, the
// allowed values. It returns nil when the rest is usable. CEL expressions are not compiled here
// (internal/principal does that), and provider types and blocks are not this package's (a
// BlockDecoder checks them: gateway.LoadConfig, gateway.Check).
//
// The sandbox rules follow docs/semantics.md §5 (profile fields, broker block) and §6 (the
// queue broker's required blocks and in_memory pairing).
func (c *Config) Validate() error {
	var p problems
	c.Server.validate(&p)
	if c.Database.MaxConns <= 0 {
		p.add("database.max_conns", "must be greater than 0 (got %d)", c.Database.MaxConns)
	}
	p.enum("log.level", c.Log.Level, logLevels)
	p.enum("log.format", c.Log.Format, logFormats)
	c.Auth.validate(&p)
	c.Sandbox.validate(&p)
	for tpl, prof := range c.Server.E2B.Templates {
		if _, ok := c.Sandbox.Profiles[prof]; !ok && c.Server.E2B.Enabled {
			p.add("server.e2b.templates."+tpl, "names profile %q, which sandbox.profiles does not configure", prof)
		}
	}
	if e := c.Telemetry.OTLPEndpoint; e != "" && !isHTTPURL(e) {
		p.add("telemetry.otlp_endpoint", "%q is not an absolute http or https URL (the OTLP/HTTP collector's base URL, e.g. http://otel-collector:4318)", e)
	}
	if c.Audit.Retention < minAuditRetention {
		p.add("audit.retention", "must be at least %s (got %s)", minAuditRetention, c.Audit.Retention)
	}
	for name, addr := range c.Egress.Hosts {
		key := "egress.hosts." + name
		if r, err := egress.ParseRule(name); err != nil || r.Name == "" || r.Wildcard || r.Port != 0 {
			p.add(key, "%q is not a host name (write the name alone, e.g. api.example.com)", name)
		}
		if _, err := netip.ParseAddrPort(addr); err != nil {
			if _, err := netip.ParseAddr(addr); err != nil {
				p.add(key, "%q is not an IP address or IP:port (e.g. 10.0.0.5 or 127.0.0.1:8443)", addr)
			}
		}
	}
	return errors.Join(p...)
}

// minAuditRetention bounds audit.retention from below: an audit log kept for less is no
// audit log.
const minAuditRetention = Duration(time.Hour)

func (s *Server) validate(p *problems) {
	if strings.TrimSpace(s.Addr) == "" {
		p.add("server.addr", "must not be empty; give host:port such as \":8080\"")
	}
	if s.PublicURL != "" {
		if u, err := url.Parse(s.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("server.public_url", "%q is not an absolute http or https URL", s.PublicURL)
		}
	}
	for _, t := range []struct {
		key string
		d   Duration
	}{
		{"server.read_header_timeout", s.ReadHeaderTimeout},
		{"server.read_timeout", s.ReadTimeout},
		{"server.write_timeout", s.WriteTimeout},
		{"server.idle_timeout", s.IdleTimeout},
		{"server.shutdown_timeout", s.ShutdownTimeout},
		{"server.stream_idle_timeout", s.StreamIdleTimeout},
	} {
		if t.d < 0 {
			p.add(t.key, "must not be negative (got %s)", t.d)
		}
	}
	if s.MaxBodyBytes <= 0 {
		p.add("server.max_body_bytes", "must be greater than 0 (got %d)", s.MaxBodyBytes)
	}
	if s.MCPMaxBatch < 0 {
		p.add("server.mcp_max_batch", "must not be negative (got %d); 1 allows no batch of more than one message", s.MCPMaxBatch)
	}
	if s.MetricsAddr != "" {
		if _, port, err := net.SplitHostPort(s.MetricsAddr); err != nil || port == "" {
			p.add("server.metrics_addr", "%q is not host:port (e.g. \":9090\" or \"127.0.0.1:9090\")", s.MetricsAddr)
		} else if s.MetricsAddr == s.Addr {
			p.add("server.metrics_addr", "must differ from server.addr: metrics are served on a listener of their own")
		}
	}
	s.validatePreview(p)
	for i, c := range s.TrustedProxies {
		if _, err := ParsePrefix(c); err != nil {
			p.add(fmt.Sprintf("server.trusted_proxies[%d]", i), "%q is not an address or CIDR prefix (e.g. 10.0.0.0/8 or 192.0.2.7)", c)
		}
	}
	if s.CORS.MaxAge < 0 {
		p.add("server.cors.max_age", "must not be negative (got %s)", s.CORS.MaxAge)
	}
	for i, o := range s.CORS.AllowedOrigins {
		if o != "*" && !isOrigin(o) {
			p.add(fmt.Sprintf("server.cors.allowed_origins[%d]", i), "%q is not an origin: give scheme://host[:port] with no path (e.g. https://app.example.com), or * for any", o)
		}
	}
}

// validatePreview checks server.preview_domain: a DNS name of at least two labels with an
// optional port, that neither is nor contains public_url's host (the console's origin would
// then share cookies with, or be mistaken for, a preview).
func (s *Server) validatePreview(p *problems) {
	if s.PreviewDomain == "" {
		return
	}
	host, _, err := SplitPreviewDomain(s.PreviewDomain)
	if err != nil {
		p.add("server.preview_domain", "%q: %v", s.PreviewDomain, err)
		return
	}
	if u, err := url.Parse(s.PublicURL); err == nil && u.Hostname() != "" {
		pub := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
		if pub == host || strings.HasSuffix(pub, "."+host) {
			p.add("server.preview_domain", "%q holds public_url's host %q: give previews a domain of their own (e.g. preview.%s), which the console's origin is not part of", s.PreviewDomain, pub, pub)
		}
	}
}

// SplitPreviewDomain parses server.preview_domain, "name[:port]", into its lower-case name
// and its port ("" when none). The name is a DNS name of two or more labels (letters, digits
// and hyphens; "preview.localhost" works for development), never an IP address.
func SplitPreviewDomain(v string) (host, port string, err error) {
	if strings.Contains(v, "://") || strings.ContainsAny(v, "/?#@*[] ") {
		return "", "", errors.New("give a DNS name, optionally with :port, without scheme, path or wildcard (e.g. preview.example.com)")
	}
	host = v
	if i := strings.LastIndexByte(v, ':'); i >= 0 {
		host, port = v[:i], v[i+1:]
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return "", "", fmt.Errorf("port %q is not a TCP port (1-65535)", port)
		}
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if _, err := netip.ParseAddr(host); err == nil {
		return "", "", errors.New("an IP address cannot have subdomains; give a DNS name (e.g. preview.example.com)")
	}
	labels := strings.Split(host, ".")
	if len(labels) < 2 || len(host) > 200 {
		return "", "", errors.New("give a DNS name of two or more labels, at most 200 characters, so that previews' hosts (port-session.<domain>) stay valid DNS names")
	}
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", "", fmt.Errorf("label %q is not a DNS label (1-63 letters, digits or inner hyphens)", l)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", "", fmt.Errorf("label %q is not a DNS label (1-63 letters, digits or inner hyphens)", l)
			}
		}
	}
	return host, port, nil
}

// ParsePrefix parses an entry of server.trusted_proxies: a CIDR prefix or a single address.
func ParsePrefix(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		pre, err := netip.ParsePrefix(strings.TrimSpace(v))
		return pre.Masked(), err
	}
	a, err := netip.ParseAddr(strings.TrimSpace(v))
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// isOrigin reports whether s is a serialized origin: an http or https URL with a host and
// nothing after it.
func isOrigin(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && u.User == nil &&
		u.Path == "" && u.RawQuery == "" && u.Fragment == "" && !strings.HasSuffix(s, "/")
}

// maxClockSkew bounds auth.clock_skew.
const maxClockSkew = Duration(5 * time.Minute)

// minAPIKeyTTL bounds auth.api_keys.max_ttl from below (and the lifetime a key may be given).
const minAPIKeyTTL = Duration(time.Minute)

func (a *Auth) validate(p *problems) {
	if a.ClockSkew < 0 || a.ClockSkew > maxClockSkew {
		p.add("auth.clock_skew", "must be between 0 and %s (got %s)", maxClockSkew, a.ClockSkew)
	}
	if k := a.APIKeys; k.MaxTTL < minAPIKeyTTL {
		p.add("auth.api_keys.max_ttl", "must be at least %s (got %s)", minAPIKeyTTL, k.MaxTTL)
	} else if k.DefaultTTL < minAPIKeyTTL || k.DefaultTTL > k.MaxTTL {
		p.add("auth.api_keys.default_ttl", "must be between %s and auth.api_keys.max_ttl (%s) (got %s)", minAPIKeyTTL, k.MaxTTL, k.DefaultTTL)
	}
	seen := map[string]int{}
	for i, iss := range a.Issuers {
		key := fmt.Sprintf("auth.issuers[%d]", i)
		if iss.URL == "" {
			p.add(key+".url", "required: the issuer identifier (the tokens' iss claim), an http or https URL")
		} else if !isHTTPURL(iss.URL) {
			p.add(key+".url", "%q is not an absolute http or https URL", iss.URL)
		} else if j, dup := seen[iss.URL]; dup {
			p.add(key+".url", "%q is already configured by auth.issuers[%d]", iss.URL, j)
		} else {
			seen[iss.URL] = i
		}
		if iss.DiscoveryURL != "" && !isHTTPURL(iss.DiscoveryURL) {
			p.add(key+".discovery_url", "%q is not an absolute http or https URL", iss.DiscoveryURL)
		}
		if len(iss.Audiences) == 0 {
			p.add(key+".audiences", "required: at least one audience the tokens' aud claim must contain")
		}
		for j, aud := range iss.Audiences {
			if strings.TrimSpace(aud) == "" {
				p.add(fmt.Sprintf("%s.audiences[%d]", key, j), "must not be empty")
			}
		}
		for j, alg := range iss.SigningAlgorithms {
			akey := fmt.Sprintf("%s.signing_algorithms[%d]", key, j)
			switch {
			case strings.EqualFold(alg, "none"):
				p.add(akey, "\"none\" is refused: it would accept unsigned tokens; use one of: %s", strings.Join(signingAlgs, ", "))
			case strings.HasPrefix(strings.ToUpper(alg), "HS"):
				p.add(akey, "%q is refused: HMAC algorithms need a secret shared with the issuer, which OIDC issuers publish no key for; use one of: %s", alg, strings.Join(signingAlgs, ", "))
			default:
				p.enum(akey, alg, signingAlgs)
			}
		}
		cm := iss.ClaimMappings
		for _, m := range []struct {
			name string
			m    ClaimOrExpression
		}{
			{"username", cm.Username},
			{"groups", cm.Groups},
			{"email", cm.Email},
			{"credentials.kubernetes_user", cm.Credentials.KubernetesUser},
			{"credentials.kubernetes_groups", cm.Credentials.KubernetesGroups},
			{"credentials.aws_role_arn", cm.Credentials.AWSRoleARN},
			{"credentials.run_as", cm.Credentials.RunAs},
		} {
			if m.m.Claim != "" && m.m.Expression != "" {
				p.add(key+".claim_mappings."+m.name, "set claim or expression, not both")
			}
		}
		for j, r := range iss.ClaimValidationRules {
			if strings.TrimSpace(r.Expression) == "" {
				p.add(fmt.Sprintf("%s.claim_validation_rules[%d].expression", key, j), "required: a CEL expression over claims that must be true")
			}
		}
		for j, gr := range iss.GroupRoles {
			if gr.Group == "" {
				p.add(fmt.Sprintf("%s.group_roles[%d].group", key, j), "required: the group whose members get these credentials")
			}
		}
	}
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

var profileNameRe = regexp.MustCompile(profileNamePattern)

func (s *Sandbox) validate(p *problems) {
	positiveInt(p, "sandbox.tool_output_max_chars", int64(s.ToolOutputMaxChars))
	positiveInt(p, "sandbox.max_output_bytes", s.MaxOutputBytes)
	positiveInt(p, "sandbox.max_file_bytes", s.MaxFileBytes)
	if s.MaxOutputBytes > 0 && s.KeptOutputMemoryBytes < 2*s.MaxOutputBytes {
		p.add("sandbox.kept_output_memory_bytes", "must be at least twice sandbox.max_output_bytes, the output one execution keeps of its stdout and stderr (got %d, max_output_bytes %d)", s.KeptOutputMemoryBytes, s.MaxOutputBytes)
	}
	s.Broker.validate(p)
	s.checkVisibility(p)

	if !s.synthesized {
		// The shorthand keys are ignored next to an explicit profiles map, but their values
		// must still make sense.
		if s.Scope != "" {
			p.enum("sandbox.scope", s.Scope, scopes)
		}
		if s.Environment != "" {
			p.enum("sandbox.environment", s.Environment, environments)
		}
	}

	if len(s.Profiles) > 0 {
		if _, ok := s.Profiles[s.DefaultProfile]; !ok {
			p.add("sandbox.default_profile", "names profile %q, which is not defined; defined profiles: %s",
				s.DefaultProfile, strings.Join(sortedKeys(s.Profiles), ", "))
		}
	}
	for _, name := range sortedKeys(s.Profiles) {
		prof := s.Profiles[name]
		prefix := s.ProfileKey(name) // "sandbox" for the shorthand: the keys the user wrote
		if prefix != "sandbox" && !profileNameRe.MatchString(name) {
			p.add(prefix, "profile name %q must match %s (lower-case letters, digits, '_', '.', '-'; at most 63 characters)", name, profileNamePattern)
		}
		prof.validateFields(p, prefix)
	}
}

func positiveInt(p *problems, key string, v int64) {
	if v <= 0 {
		p.add(key, "must be greater than 0 (got %d)", v)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (b *Broker) validate(p *problems) {
	const key = "sandbox.broker"
	p.enum(key+".flavor", b.Flavor, brokerFlavors)
	if b.WaitTimeout != nil {
		p.nonNegative(key+".wait_timeout", *b.WaitTimeout)
	}
	p.positive(key+".wait_poll_interval", b.WaitPollInterval)
	positiveInt(p, key+".inline_payload_max_bytes", int64(b.InlinePayloadMaxBytes))
	positiveInt(p, key+".response_ttl", int64(b.ResponseTTL))
	positiveInt(p, key+".sweep_interval", int64(b.SweepInterval))
	if b.LostAfter <= 0 {
		p.add(key+".lost_after", "must be greater than 0 (got %s)", b.LostAfter)
	}
	positiveInt(p, key+".spool.max_bytes", b.Spool.MaxBytes)
	if b.WorkerTimeoutCeiling != nil {
		p.positive(key+".worker_timeout_ceiling", *b.WorkerTimeoutCeiling)
	}
	if b.Flavor != FlavorQueue {
		return
	}
	// docs/semantics.md §10: the queue client needs both blocks, and in_memory pairs only with
	// in_memory.
	var queueType, storeType string
	if b.Queue == nil {
		p.add(key+".queue", "required when sandbox.broker.flavor is queue: give at least its type (the transport, e.g. postgres)")
	} else if strings.TrimSpace(b.Queue.Type) == "" {
		p.add(key+".queue.type", "required when sandbox.broker.flavor is queue: the transport (one of %s)", strings.Join(queueTypes, ", "))
	} else {
		queueType = b.Queue.Type
		p.enum(key+".queue.type", queueType, queueTypes)
		if b.Queue.MaxReceiveCount < 0 {
			p.add(key+".queue.max_receive_count", "must be at least 1, got %d", b.Queue.MaxReceiveCount)
		}
		if b.Queue.Consumers < 0 {
			p.add(key+".queue.consumers", "must be at least 1, got %d", b.Queue.Consumers)
		}
		if queueType == QueueNATS && b.Queue.NATS.URL != "" && !strings.HasPrefix(b.Queue.NATS.URL, "nats://") && !strings.HasPrefix(b.Queue.NATS.URL, "tls://") {
			p.add(key+".queue.nats.url", "must be a nats:// or tls:// URL, got %q", b.Queue.NATS.URL)
		}
		switch queueType {
		case QueueKafka:
			b.Queue.Kafka.validate(p, key+".queue.kafka")
		case QueueSQS:
			b.Queue.SQS.validate(p, key+".queue.sqs")
		}
	}
	if b.ResponseStore == nil {
		p.add(key+".response_store", "required when sandbox.broker.flavor is queue: where workers store completions (postgres)")
	} else {
		storeType = b.ResponseStore.Type
		p.enum(key+".response_store.type", storeType, []string{QueuePostgres, InMemory})
	}
	if b.Queue != nil && b.ResponseStore != nil && (queueType == InMemory) != (storeType == InMemory) {
		p.add(key, "queue type in_memory and response_store type in_memory are only valid together (queue type %q, response_store type %q)", queueType, storeType)
	}
}

// kafkaTopicRe is what Kafka accepts as a topic name.
var kafkaTopicRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,249}$`)

func (k *KafkaQueue) validate(p *problems, key string) {
	if len(k.Brokers) == 0 {
		p.add(key+".brokers", "give at least one broker as host:port")
	}
	for i, b := range k.Brokers {
		host, port, err := net.SplitHostPort(b)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 {
			p.add(fmt.Sprintf("%s.brokers[%d]", key, i), "%q is not host:port", b)
		}
	}
	if !kafkaTopicRe.MatchString(k.InputTopic) || k.InputTopic == "." || k.InputTopic == ".." {
		p.add(key+".input_topic", "%q is not a Kafka topic name (letters, digits, '.', '_', '-'; at most 249 characters)", k.InputTopic)
	}
	if strings.TrimSpace(k.GroupID) == "" {
		p.add(key+".group_id", "must not be empty")
	}
	if k.Partitions < 1 {
		p.add(key+".partitions", "must be at least 1, got %d", k.Partitions)
	}
	if k.SessionTimeout < Duration(time.Second) {
		p.add(key+".session_timeout", "must be at least 1s (Kafka brokers allow 6s to 30m by default), got %s", k.SessionTimeout)
	}
	if k.TLS.CAFile != "" && !k.TLS.Enabled {
		p.add(key+".tls.ca_file", "is set but tls.enabled is false; enable TLS or remove the CA file")
	}
	switch {
	case k.SASL.Mechanism != "":
		p.enum(key+".sasl.mechanism", k.SASL.Mechanism, kafkaSASLMechanisms)
		if k.SASL.Username == "" || k.SASL.Password == "" {
			p.add(key+".sasl", "mechanism %s needs both username and password", k.SASL.Mechanism)
		}
	case k.SASL.Username != "" || k.SASL.Password != "":
		p.add(key+".sasl.mechanism", "required when a username or password is set: one of %s", strings.Join(kafkaSASLMechanisms, ", "))
	}
}

// sqsMaxVisibility is SQS's longest visibility timeout.
const sqsMaxVisibility = Duration(12 * time.Hour)

func (q *SQSQueue) validate(p *problems, key string) {
	fifoURL := func(field, v string) {
		u, err := url.Parse(v)
		switch {
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			p.add(key+"."+field, "%q is not an absolute http or https URL (an SQS queue URL)", v)
		case !strings.HasSuffix(u.Path, ".fifo"):
			p.add(key+"."+field, "%q does not name a FIFO queue (its name ends in .fifo): Sandgate needs per-session order (MessageGroupId)", v)
		}
	}
	if q.InputURL == "" {
		p.add(key+".input_url", "required when sandbox.broker.queue.type is sqs: the URL of an SQS FIFO queue")
	} else {
		fifoURL("input_url", q.InputURL)
	}
	if q.DeadLetterURL != "" {
		fifoURL("dead_letter_url", q.DeadLetterURL)
	}
	if q.EndpointURL != "" && !isHTTPURL(q.EndpointURL) {
		p.add(key+".endpoint_url", "%q is not an absolute http or https URL", q.EndpointURL)
	}
	if q.VisibilityTimeout < Duration(time.Second) || q.VisibilityTimeout > sqsMaxVisibility {
		p.add(key+".visibility_timeout", "must be between 1s and %s (SQS's limits), got %s", sqsMaxVisibility, q.VisibilityTimeout)
	}
	if q.WaitTime < 0 || q.WaitTime > Duration(20*time.Second) {
		p.add(key+".wait_time", "must be between 0s and 20s (SQS's long-poll limit), got %s", q.WaitTime)
	}
}

// checkVisibility: an SQS message whose execution outlives the visibility timeout is
// delivered again and may run twice if its heartbeats stop, so the timeout must exceed the
// longest execution the queue can carry — the largest profile timeout, or
// worker_timeout_ceiling when that is lower (longer executions are refused at submit).
func (s *Sandbox) checkVisibility(p *problems) {
	b := s.Broker
	if b.Flavor != FlavorQueue || b.Queue == nil || b.Queue.Type != QueueSQS {
		return
	}
	var longest float64
	var which string
	for _, name := range sortedKeys(s.Profiles) {
		if t := s.Profiles[name].Policy.Timeout; t != nil && *t > longest {
			longest, which = *t, name
		}
	}
	if c := b.WorkerTimeoutCeiling; c != nil && *c < longest {
		longest, which = *c, "" // nothing longer than the ceiling runs on the queue
	}
	vis := b.Queue.SQS.VisibilityTimeout
	if longest == 0 || vis.D().Seconds() > longest {
		return
	}
	of := fmt.Sprintf("profile '%s' has policy.timeout %gs", which, longest)
	if which == "" {
		of = fmt.Sprintf("sandbox.broker.worker_timeout_ceiling is %gs", longest)
	}
	p.add("sandbox.broker.queue.sqs.visibility_timeout", "%s is not above the longest execution the queue carries (%s): an execution that outlives the visibility timeout is delivered to another worker and runs twice if its heartbeats stop; raise visibility_timeout above %gs (at most %s) or lower that timeout",
		vis, of, longest, sqsMaxVisibility)
}

// validateFields checks the keys that do not depend on the provider.
func (prof *Profile) validateFields(p *problems, prefix string) {
	p.enum(prefix+".scope", prof.Scope, scopes)
	p.enum(prefix+".environment", prof.Environment, environments)
	p.enum(prefix+".identity.mode", prof.Identity.Mode, identityModes)
	if prof.IdleTimeout <= 0 {
		p.add(prefix+".idle_timeout", "must be greater than 0 seconds (got %d)", prof.IdleTimeout)
	}
	p.enum(prefix+".idle_action", prof.IdleAction, idleActions)
	if prof.IdleAction != "" && prof.IdleAction != IdleReset {
		switch {
		case prof.Environment == EnvironmentAttached:
			p.add(prefix+".idle_action", "%s parks sandboxes the gateway manages; an attached environment keeps the seed's rules (reset drops only the binding)", prof.IdleAction)
		case prof.Scope == ScopePerCall:
			p.add(prefix+".idle_action", "%s needs sessions; a per_call sandbox is gone after its call", prof.IdleAction)
		}
	}
	pol := prof.Policy
	pk := prefix + ".policy"
	p.enum(pk+".network_egress", pol.NetworkEgress, egressModes)
	switch {
	case pol.NetworkEgress == EgressAllowlist && len(pol.NetworkAllow) == 0:
		p.add(pk+".network_allow", "must list at least one host when network_egress is allowlist")
	case pol.NetworkEgress != EgressAllowlist && len(pol.NetworkAllow) > 0:
		p.add(pk+".network_allow", "is only meaningful with network_egress: allowlist (network_egress is %q)", pol.NetworkEgress)
	}
	for i, e := range pol.NetworkAllow {
		if _, err := egress.ParseRule(e); err != nil {
			p.add(fmt.Sprintf("%s.network_allow[%d]", pk, i), "%v", err)
		}
	}
	if pol.Timeout != nil {
		p.positive(pk+".timeout", *pol.Timeout)
	}
	if pol.CPU != nil {
		p.positive(pk+".cpu", *pol.CPU)
	}
	if pol.MemoryMB != nil && *pol.MemoryMB <= 0 {
		p.add(pk+".memory_mb", "must be greater than 0 (got %d)", *pol.MemoryMB)
	}
	if pol.DiskMB != nil && *pol.DiskMB <= 0 {
		p.add(pk+".disk_mb", "must be greater than 0 (got %d)", *pol.DiskMB)
	}
}
