package sandbox

import (
	"go.opentelemetry.io/otel/trace"

	"github.com/sandgate/sandgate/internal/sandbox/observe"
)

// The observation room (internal/sandbox/observe) owns the Observer, the domain's spans and
// the wrapper of every provider call (Service.obs).

// Observer is told what the domain did, for metrics (observe.Observer).
type Observer = observe.Observer

// Span attributes the domain sets (observe.AttrProfile and its kin).
var (
	attrProfile  = observe.AttrProfile
	attrProvider = observe.AttrProvider
	attrSession  = observe.AttrSession
	attrTask     = observe.AttrTask
	attrOp       = observe.AttrOp
	attrStatus   = observe.AttrStatus
)

// endSpan ends span, marking it failed with err (observe.EndSpan).
func endSpan(span trace.Span, err error) { observe.EndSpan(span, err) }
