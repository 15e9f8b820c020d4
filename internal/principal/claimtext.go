package principal

import (
	"fmt"
	"unicode/utf8"
)

// Bounds of the claim values a Principal is made of. OpenID Connect Core 1.0 §2 limits "sub"
// to 255 ASCII characters; identity providers that use non-ASCII subjects exist, so the bound
// is 255 bytes of UTF-8. The other values (username, e-mail, groups, credentials) are bounded
// so that one token cannot make a principal row or a log line of unbounded size.
const (
	MaxSubjectBytes = 255
	MaxClaimBytes   = 1024
	MaxGroups       = 1000
)

// checkClaimText reports why s cannot be part of a principal (nil when it can): it must be
// valid UTF-8 without control characters — C0 (U+0000–U+001F), DEL and C1 (U+007F–U+009F) —
// and at most limit bytes long. Such values end in Postgres rows (which refuse U+0000),
// audit events, logs, terminals and container labels; a token carrying one is refused as a
// whole (401) rather than stored with its bytes changed. what names the claim in the message.
func checkClaimText(what, s string, limit int) error {
	if len(s) > limit {
		return fmt.Errorf("%w: the %s is %d bytes long; Sandgate accepts at most %d", ErrRejected, what, len(s), limit)
	}
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			return fmt.Errorf("%w: the %s is not valid UTF-8 (byte %d); ask your identity provider's administrator to fix the claim", ErrRejected, what, i)
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			return fmt.Errorf("%w: the %s contains the control character U+%04X at byte %d; Sandgate accepts printable UTF-8 only", ErrRejected, what, r, i)
		}
	}
	return nil
}

// validAt reports whether the U+FFFD decoded at byte i of s is really encoded there (and not
// the decoder's mark for an invalid byte).
func validAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 3
}

// checkPrincipalText applies checkClaimText to every text of p (Map's last step).
func checkPrincipalText(p Principal) error {
	if err := checkClaimText("'sub' claim", p.Subject, MaxSubjectBytes); err != nil {
		return err
	}
	fields := []struct {
		what string
		v    string
	}{
		{"username", p.Username}, {"e-mail", p.Email},
		{"kubernetes_user", p.Credentials.KubernetesUser}, {"aws_role_arn", p.Credentials.AWSRoleARN},
		{"run_as", p.Credentials.RunAs},
	}
	for _, f := range fields {
		if err := checkClaimText(f.what, f.v, MaxClaimBytes); err != nil {
			return err
		}
	}
	lists := []struct {
		what string
		v    []string
	}{{"group", p.Groups}, {"kubernetes_groups entry", p.Credentials.KubernetesGroups}}
	for _, l := range lists {
		if len(l.v) > MaxGroups {
			return fmt.Errorf("%w: the token carries %d %ss; Sandgate accepts at most %d", ErrRejected, len(l.v), l.what, MaxGroups)
		}
		for _, g := range l.v {
			if err := checkClaimText(l.what+" "+quoteShort(g), g, MaxClaimBytes); err != nil {
				return err
			}
		}
	}
	return nil
}

// quoteShort quotes s for a message, cut to 40 bytes.
func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return fmt.Sprintf("%q", s)
}
