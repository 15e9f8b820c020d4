package kubernetes

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/sandgate/sandgate/internal/fault"
)

// errNotReady is how a wait condition says "not yet".
var errNotReady = errors.New("not ready")

// watchFor gets an object, then watches it (by name) until check accepts it, check returns
// an error other than errNotReady, the object is deleted, or ctx ends. A watch that closes or
// errors (expired resource version) starts over with a fresh get; there is no polling.
//
// get returns the object and its resource version; a NotFound error of get or a Deleted event
// ends the wait with gone().
func watchFor[T runtime.Object](ctx context.Context,
	get func(context.Context) (T, string, error),
	watchFrom func(context.Context, metav1.ListOptions) (watch.Interface, error),
	name string,
	check func(T) error,
	gone func() error,
) (T, error) {
	var zero T
	for {
		obj, rv, err := get(ctx)
		if apierrors.IsNotFound(err) {
			return zero, gone()
		}
		if err != nil {
			return zero, err
		}
		if err := check(obj); !errors.Is(err, errNotReady) {
			return obj, err
		}
		w, err := watchFrom(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", name).String(),
			ResourceVersion: rv,
		})
		if err != nil {
			return zero, err
		}
		done, result, err := func() (bool, T, error) {
			defer w.Stop()
			for {
				select {
				case <-ctx.Done():
					return true, zero, ctx.Err()
				case ev, ok := <-w.ResultChan():
					if !ok {
						return false, zero, nil // closed: start over
					}
					switch ev.Type {
					case watch.Deleted:
						return true, zero, gone()
					case watch.Error, watch.Bookmark:
						if ev.Type == watch.Error {
							return false, zero, nil
						}
						continue
					}
					obj, ok := ev.Object.(T)
					if !ok {
						continue
					}
					if err := check(obj); !errors.Is(err, errNotReady) {
						return true, obj, err
					}
				}
			}
		}()
		if done {
			return result, err
		}
		select {
		case <-ctx.Done():
			return zero, ctx.Err()
		case <-time.After(100 * time.Millisecond): // don't spin on a watch that keeps failing
		}
	}
}

// waitPod waits, at most create_timeout, until pod ns/name is Running and Ready; pod is its
// last known state, checked first. Errors: fault.Provision (with the pod's last reason) when
// the pod ends, is deleted or is not ready in time; fault.Gone when it is missing or being
// deleted at the start; ctx.Err() when ctx ends first.
func (p *Provider) waitPod(ctx context.Context, c *clients, ns, name string, pod *corev1.Pod) (*corev1.Pod, error) {
	if isReady(pod) {
		return pod, nil
	}
	if err := goneErr(pod); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, p.createTimeout())
	defer cancel()
	last := pod
	pods := c.core.CoreV1().Pods(ns)
	id := ns + "/" + name
	ready, err := watchFor(wctx,
		func(ctx context.Context) (*corev1.Pod, string, error) {
			pod, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, "", err
			}
			return pod, pod.ResourceVersion, nil
		},
		pods.Watch, name,
		func(pod *corev1.Pod) error {
			last = pod
			if isReady(pod) {
				return nil
			}
			if pod.DeletionTimestamp != nil {
				return fault.New(fault.Provision, "%s: pod %s is being deleted", TypeName, id)
			}
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				return fault.New(fault.Provision, "%s: pod %s ended (phase %s) before it was ready: %s", TypeName, id, pod.Status.Phase, podReason(pod))
			}
			return errNotReady
		},
		func() error {
			return fault.New(fault.Provision, "%s: pod %s was deleted before it was ready", TypeName, id)
		},
	)
	if err == nil {
		return ready, nil
	}
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		reason := podReason(last)
		if reason == "" {
			reason = "phase " + string(last.Status.Phase)
			if last.Spec.NodeName == "" {
				reason += ", not scheduled to a node"
			}
		}
		return nil, fault.New(fault.Provision, "%s: pod %s was not ready within %s (create_timeout): %s", TypeName, id, p.createTimeout(), reason)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	var fe *fault.Error
	if errors.As(err, &fe) {
		return nil, err
	}
	return nil, provisionErr(err, "waiting for pod %s", id)
}

// isReady reports whether pod is Running with its Ready condition true and not being deleted.
func isReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
