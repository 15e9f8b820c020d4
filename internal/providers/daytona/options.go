package daytona

import (
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// TypeName is the provider's type name in profiles and the registry.
const TypeName = "daytona"

// Defaults of Config's fields and of the provider's tuning.
const (
	// DefaultAPIKeyEnv names the environment variable holding the API key.
	DefaultAPIKeyEnv = "DAYTONA_API_KEY"
	// DefaultAPIURL is Daytona's cloud API.
	DefaultAPIURL = "https://app.daytona.io/api"
	// DefaultImage is the image a sandbox is built from when the policy sets cpu or
	// memory_mb (Daytona sizes only sandboxes built from an image) and the block names
	// neither an image nor a snapshot.
	DefaultImage = "python:3.12-slim"
	// DefaultCreateTimeout bounds Create: the sandbox must be started within it (an image
	// that is not yet cached is built first, which takes minutes).
	DefaultCreateTimeout = 5 * time.Minute
	// DefaultKillGrace is the time between SIGTERM and SIGKILL for a timed-out program.
	DefaultKillGrace = 2 * time.Second
)

// Config is a daytona profile's settings (its daytona block); zero fields take their
// defaults.
type Config struct {
	// APIKeyEnv names the environment variable that holds the Daytona API key; default
	// DefaultAPIKeyEnv. The variable is read when the provider is built: missing or empty is
	// a fault.Config error (docs/semantics.md §2: a provider's API-key variable missing).
	APIKeyEnv string
	// APIURL is the Daytona API (a self-hosted one, or a test's fake); default DefaultAPIURL.
	APIURL string
	// Target is the region sandboxes are created in ("us", "eu"); default the organization's.
	Target string
	// Image builds sandboxes from this container image; exclusive with Snapshot.
	Image string
	// Snapshot creates sandboxes from this Daytona snapshot; exclusive with Image and with a
	// policy that sets cpu or memory_mb (Daytona sizes only sandboxes built from an image).
	Snapshot string
	// EnvVars are set in every sandbox (Daytona's env of the sandbox).
	EnvVars map[string]string
	// CreateTimeout bounds Create (build, start); default DefaultCreateTimeout.
	CreateTimeout time.Duration
}

// Options configure New.
type Options struct {
	// Config is the profile's daytona block.
	Config Config
	// Profile names the profile, for labels and messages.
	Profile string
	// Installation is the gateway's installation id (providers.NewInstallationID), for
	// labels; List keeps to it. "" leaves it out.
	Installation string
	// Policy is the profile's policy: network and resources shape every sandbox.
	Policy providers.Policy
	// IdleTimeout is the profile's idle timeout; the sandbox's auto-stop interval is
	// ceil(IdleTimeout/1 min) minutes (seed), at least one.
	IdleTimeout time.Duration
	// Getenv reads the API key's variable; default os.Getenv.
	Getenv func(string) string
	// HTTPClient makes every call; default a client without an overall timeout (executions
	// stream for as long as they run; every call carries its own context).
	HTTPClient *http.Client
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// createSpec is what every Create asks Daytona for, worked out once from the options.
type createSpec struct {
	image, snapshot string
	cpu, memoryGiB  int // 0: Daytona's default
	blockAll        bool
	allowList       string // comma-joined CIDRs
	autoStopMinutes int
}

// resolveCreate maps the block and the policy onto a createSpec (docs/semantics.md §12,
// daytona). Errors are fault.Config (a snapshot with resources; resources Daytona cannot give
// exactly under strict) or fault.Policy (allow-list entries that are not CIDRs, under
// strict); log receives the warnings of a non-strict policy.
func resolveCreate(o Options, log *slog.Logger) (createSpec, error) {
	c, pol := o.Config, o.Policy
	var s createSpec
	if c.Image != "" && c.Snapshot != "" {
		return s, fault.New(fault.Config, "%s: image and snapshot are mutually exclusive; set one of them", TypeName)
	}
	s.image, s.snapshot = c.Image, c.Snapshot
	if pol.CPU > 0 || pol.MemoryMB > 0 {
		if s.snapshot != "" {
			return s, fault.New(fault.Config, "%s: the policy sets cpu or memory_mb, which Daytona applies only to sandboxes built from an image; remove snapshot '%s' (or the resources)", TypeName, s.snapshot)
		}
		if s.image == "" {
			s.image = DefaultImage
		}
	}
	if pol.CPU > 0 {
		s.cpu = int(math.Ceil(pol.CPU))
		if float64(s.cpu) != pol.CPU {
			if pol.Strict {
				return s, fault.New(fault.Config, "%s: Daytona allocates whole CPU cores; policy cpu %g cannot be enforced exactly (use a whole number, or strict: false to round up)", TypeName, pol.CPU)
			}
			log.Warn("daytona: rounding the policy's cpu up to whole cores", "cpu", pol.CPU, "cores", s.cpu)
		}
	}
	if pol.MemoryMB > 0 {
		s.memoryGiB = (pol.MemoryMB + 1023) / 1024
		if s.memoryGiB*1024 != pol.MemoryMB {
			if pol.Strict {
				return s, fault.New(fault.Config, "%s: Daytona allocates memory in whole GiB; policy memory_mb %d cannot be enforced exactly (use a multiple of 1024, or strict: false to round up)", TypeName, pol.MemoryMB)
			}
			log.Warn("daytona: rounding the policy's memory up to whole GiB", "memory_mb", pol.MemoryMB, "memory_gib", s.memoryGiB)
		}
	}
	switch pol.NetworkEgress {
	case providers.EgressDeny:
		s.blockAll = true
	case providers.EgressAllowlist:
		cidrs, err := allowList(pol, log)
		if err != nil {
			return s, err
		}
		if len(cidrs) == 0 {
			// Every entry was a dropped domain: nothing may be reached.
			s.blockAll = true
		}
		s.allowList = strings.Join(cidrs, ",")
	}
	if o.IdleTimeout > 0 {
		s.autoStopMinutes = int(math.Ceil(o.IdleTimeout.Minutes()))
	}
	return s, nil
}

// allowList turns the policy's network_allow into CIDRs: a prefix stays as it is (masked), a
// bare address becomes a /32 or /128. Other entries (domains) cannot be expressed in
// Daytona's network allow-list: under strict they are a fault.Policy error, otherwise they
// are dropped with a warning.
func allowList(pol providers.Policy, log *slog.Logger) ([]string, error) {
	var out, dropped []string
	for _, e := range pol.NetworkAllow {
		e = strings.TrimSpace(e)
		if p, err := netip.ParsePrefix(e); err == nil {
			out = append(out, p.Masked().String())
			continue
		}
		if a, err := netip.ParseAddr(e); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()).String())
			continue
		}
		dropped = append(dropped, e)
	}
	if len(dropped) > 0 {
		if pol.Strict {
			return nil, fault.New(fault.Policy, "%s: the network allow-list takes CIDRs only; cannot enforce %s (use CIDRs, or strict: false to drop them)", TypeName, strings.Join(dropped, ", "))
		}
		log.Warn("daytona: dropping network_allow entries that are not CIDRs; they will not be reachable", "entries", dropped)
	}
	return out, nil
}

// dockerfileFor is the build Daytona runs for a sandbox from image: just the image.
func dockerfileFor(image string) string { return fmt.Sprintf("FROM %s\n", image) }
