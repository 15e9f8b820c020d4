package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandgate/sandgate/internal/fault"
)

// AnnotationSandboxdToken on a sandbox pod holds its sandboxd's bearer secret (256 bits,
// hex). Only the API server shows it: the pods have no service-account token and no
// downward API of their annotations, so nothing in the pod can read it.
const AnnotationSandboxdToken = "sandgate.io/sandboxd-token"

// maxTokenUpdates bounds the optimistic-concurrency attempts of ensureToken.
const maxTokenUpdates = 10

// tokenPattern is what a token the provider stored looks like.
var tokenPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// newSandboxdToken returns a fresh secret: 32 random bytes in hex.
func newSandboxdToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ensureToken returns the sandboxd token of pod, writing a fresh one into its annotation
// first when it has none (a warm pod of agent-sandbox, an attached pod). The write is an
// update with the pod's resourceVersion, so of two gateways writing at once one wins and the
// other, on the conflict, reads the pod again and takes the stored token. The token is given
// to sandboxd only after this (by the first tunnel; see tunnelDial).
//
// Errors: fault.Gone when the pod is gone; fault.Provision (forbidden: the identity needs
// update on pods) otherwise; ctx.Err().
func (p *Provider) ensureToken(ctx context.Context, c *clients, pod *corev1.Pod) (string, error) {
	pods := c.core.CoreV1().Pods(pod.Namespace)
	id := pod.Namespace + "/" + pod.Name
	cur := pod
	for range maxTokenUpdates {
		if tok := cur.Annotations[AnnotationSandboxdToken]; tok != "" {
			if !tokenPattern.MatchString(tok) {
				return "", fault.New(fault.Provision, "%s: pod %s has a malformed %s annotation", TypeName, id, AnnotationSandboxdToken)
			}
			return tok, nil
		}
		next := cur.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[AnnotationSandboxdToken] = newSandboxdToken()
		updated, err := pods.Update(ctx, next, metav1.UpdateOptions{}) // carries cur's resourceVersion
		switch {
		case err == nil:
			return updated.Annotations[AnnotationSandboxdToken], nil
		case apierrors.IsConflict(err):
			if cur, err = pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				if apierrors.IsNotFound(err) {
					return "", fault.New(fault.Gone, "%s: pod %s no longer exists", TypeName, id)
				}
				return "", provisionErr(err, "reading pod %s", id)
			}
			if cur.UID != pod.UID {
				return "", fault.New(fault.Gone, "%s: pod %s was replaced", TypeName, id)
			}
		case apierrors.IsNotFound(err):
			return "", fault.New(fault.Gone, "%s: pod %s no longer exists", TypeName, id)
		default:
			return "", provisionErr(err, "writing the sandboxd token annotation of pod %s (the identity needs update on pods)", id)
		}
	}
	return "", fault.New(fault.Provision, "%s: the sandboxd token annotation of pod %s kept changing", TypeName, id)
}
