package kubernetes

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/sandgate/sandgate/internal/fault"
	"github.com/sandgate/sandgate/internal/providers"
)

// Volumes of created pods.
const (
	volumeWorkspace = "workspace"
	volumeTmp       = "tmp"
	volumeRun       = "sandgate-run"
	volumeBin       = "sandgate-bin"
)

// installContainer is the init container of kubernetes.sandboxd.image.
const installContainer = "sandboxd-install"

// terminationGrace is the pods' terminationGracePeriodSeconds (docs/semantics.md §12).
const terminationGrace = 5

// buildPod returns the pod of sandbox name (see the package doc for its shape).
func (p *Provider) buildPod(name string, pr providers.Principal, pol providers.Policy, token string) *corev1.Pod {
	cfg := p.cfg
	ctrSec := p.ctrSec.DeepCopy()
	if len(pol.FSAllowRead) > 0 || len(pol.FSAllowWrite) > 0 {
		ctrSec.ReadOnlyRootFilesystem = ptr.To(true) // seed: this beats any override
	}
	ctr := corev1.Container{
		Name:            ContainerName,
		Image:           cfg.Image,
		Command:         p.sandboxdCommand(),
		WorkingDir:      cfg.Workspace,
		Env:             envVars(p.containerEnv()),
		Resources:       resources(pol),
		SecurityContext: ctrSec,
		VolumeMounts: []corev1.VolumeMount{
			{Name: volumeWorkspace, MountPath: cfg.Workspace},
			{Name: volumeTmp, MountPath: "/tmp"},
			{Name: volumeRun, MountPath: SandboxdRun},
		},
	}
	spec := corev1.PodSpec{
		Containers:                    []corev1.Container{ctr},
		RestartPolicy:                 corev1.RestartPolicyNever,
		TerminationGracePeriodSeconds: ptr.To[int64](terminationGrace),
		AutomountServiceAccountToken:  ptr.To(false),
		EnableServiceLinks:            ptr.To(false),
		ShareProcessNamespace:         ptr.To(true),
		SecurityContext:               p.podSec.DeepCopy(),
		ServiceAccountName:            cfg.ServiceAccount,
		NodeSelector:                  maps.Clone(cfg.NodeSelector),
		Volumes: []corev1.Volume{
			{Name: volumeWorkspace, VolumeSource: corev1.VolumeSource{EmptyDir: workspaceVolume(pol)}},
			{Name: volumeTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: volumeRun, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory}}},
		},
	}
	if cfg.Sandboxd.Transport == TransportPodIP {
		spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "sandboxd", ContainerPort: SandboxdPort, Protocol: corev1.ProtocolTCP}}
	}
	if img := cfg.Sandboxd.Image; img != "" {
		// sandboxd from another image: an init container copies it into an emptyDir, with
		// sandboxd's own `install` (no shell or cp needed in that image).
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: volumeBin, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		spec.Containers[0].VolumeMounts = append(spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: volumeBin, MountPath: SandboxdBin, ReadOnly: true})
		spec.InitContainers = []corev1.Container{{
			Name:            installContainer,
			Image:           img,
			Command:         []string{cfg.Sandboxd.Path, "install", SandboxdBin},
			SecurityContext: p.ctrSec.DeepCopy(),
			VolumeMounts:    []corev1.VolumeMount{{Name: volumeBin, MountPath: SandboxdBin}},
		}}
	}
	if secs := int64(2 * p.idle.Seconds()); secs > 0 {
		spec.ActiveDeadlineSeconds = ptr.To(secs)
	}
	if cfg.RuntimeClassName != "" {
		spec.RuntimeClassName = ptr.To(cfg.RuntimeClassName)
	}
	for _, s := range cfg.ImagePullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	annotations := p.annotations(pr)
	annotations[AnnotationSandboxdToken] = token
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   cfg.Namespace,
			Labels:      p.labels(name),
			Annotations: annotations,
		},
		Spec: spec,
	}
}

// sandboxdCommand is the sandbox container's command: sandboxd serving its socket in the
// run emptyDir, awaiting its token from the gateway (see the package doc).
func (p *Provider) sandboxdCommand() []string {
	cmd := []string{p.sandboxdPath(), "serve", "--socket", SandboxdSocket, "--workspace", p.cfg.Workspace,
		"--state-file", sandboxdState, "--await-token"}
	if p.cfg.Sandboxd.Transport == TransportPodIP {
		// The TCP listener opens only once sandboxd has its token.
		cmd = append(cmd, "--listen", ":"+strconv.Itoa(SandboxdPort))
	}
	return cmd
}

// containerEnv is the sandbox container's environment: kubernetes.env, with HOME the
// workspace unless env sets it.
func (p *Provider) containerEnv() map[string]string {
	env := maps.Clone(p.cfg.Env)
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["HOME"]; !ok {
		env["HOME"] = p.cfg.Workspace
	}
	return env
}

// labels returns managed-by, the installation and the sandbox marker, then the configured
// labels, then the name label last (docs/semantics.md §12; New refuses configured labels with
// the reserved keys).
func (p *Provider) labels(name string) map[string]string {
	l := map[string]string{LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelSandbox: "true"}
	maps.Copy(l, p.cfg.Labels)
	l[LabelSandboxName] = name
	return l
}

func (p *Provider) annotations(pr providers.Principal) map[string]string {
	a := map[string]string{}
	if p.profile != "" {
		a[AnnotationProfile] = p.profile
	}
	if pr.Mode == providers.ModeUser && pr.Subject != "" {
		a[AnnotationOwner] = pr.Subject
	}
	return a
}

// envVars returns env sorted by name.
func envVars(env map[string]string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, corev1.EnvVar{Name: k, Value: env[k]})
	}
	return out
}

// workspaceVolume is the workspace's emptyDir: with policy disk_mb, its sizeLimit. The kubelet
// enforces a sizeLimit by evicting the pod once the folder holds more (checked periodically,
// not on each write: a program sees no ENOSPC, the sandbox ends and its session's next use
// makes a new, empty one).
func workspaceVolume(pol providers.Policy) *corev1.EmptyDirVolumeSource {
	if pol.DiskMB <= 0 {
		return &corev1.EmptyDirVolumeSource{}
	}
	return &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(resource.MustParse(strconv.Itoa(pol.DiskMB) + "Mi"))}
}

// resources turns the policy's cpu and memory into requests equal to limits.
func resources(pol providers.Policy) corev1.ResourceRequirements {
	list := corev1.ResourceList{}
	if pol.CPU > 0 {
		list[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(pol.CPU*1000+0.5), resource.DecimalSI)
	}
	if pol.MemoryMB > 0 {
		list[corev1.ResourceMemory] = resource.MustParse(strconv.Itoa(pol.MemoryMB) + "Mi")
	}
	if len(list) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
}

// networkPolicyNeeded reports whether sandboxes under pol need an egress NetworkPolicy, and
// refuses (fault.Policy) what cannot be enforced under a strict policy before any API call.
func (p *Provider) networkPolicyNeeded(pol providers.Policy) (bool, error) {
	egress := pol.NetworkEgress
	if egress == "" || egress == providers.EgressAllow {
		return false, nil
	}
	if !p.cfg.NetworkPolicy {
		if pol.Strict {
			return false, fault.New(fault.Policy, "%s: network_egress %s needs kubernetes.network_policy: true (an egress NetworkPolicy per pod); the policy is strict", TypeName, egress)
		}
		p.log.Warn("network_egress is not enforced: kubernetes.network_policy is off; egress is unrestricted", "network_egress", egress)
		return false, nil
	}
	if egress == providers.EgressAllowlist {
		_, domains := splitAllowlist(pol.NetworkAllow)
		if len(domains) > 0 {
			if pol.Strict {
				return false, fault.New(fault.Policy, "%s: a NetworkPolicy cannot allow domain names (%s); list CIDRs, or make the policy non-strict to drop them", TypeName, strings.Join(domains, ", "))
			}
			p.log.Warn("domain names in network_allow cannot be enforced by a NetworkPolicy and are dropped", "domains", domains)
		}
	}
	return true, nil
}

// splitAllowlist separates CIDRs (bare IPs become /32 or /128) from domain names.
func splitAllowlist(entries []string) (cidrs, domains []string) {
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if _, n, err := net.ParseCIDR(e); err == nil {
			cidrs = append(cidrs, n.String())
			continue
		}
		if ip := net.ParseIP(e); ip != nil {
			if ip.To4() != nil {
				cidrs = append(cidrs, ip.String()+"/32")
			} else {
				cidrs = append(cidrs, ip.String()+"/128")
			}
			continue
		}
		domains = append(domains, e)
	}
	return cidrs, domains
}

// buildNetworkPolicy returns the egress NetworkPolicy of sandbox name: named after it,
// selecting its pod by the labels of selector, allowing nothing (deny) or the policy's CIDRs
// (allowlist).
func (p *Provider) buildNetworkPolicy(name string, selector map[string]string, pol providers.Policy) (*networkingv1.NetworkPolicy, error) {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: p.cfg.Namespace,
			Labels:    map[string]string{LabelManagedBy: ManagedBy, LabelInstallation: p.installation, LabelSandbox: "true", LabelSandboxName: name},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: selector},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	if pol.NetworkEgress == providers.EgressAllowlist {
		cidrs, _ := splitAllowlist(pol.NetworkAllow)
		if len(cidrs) > 0 {
			rule := networkingv1.NetworkPolicyEgressRule{}
			for _, c := range cidrs {
				rule.To = append(rule.To, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
			}
			np.Spec.Egress = append(np.Spec.Egress, rule)
		}
	}
	return np, nil
}

// securityContexts returns the hardened pod and container security contexts with the
// configured overlays merged over them (JSON merge: a key given replaces the default's).
func securityContexts(cfg Config) (*corev1.PodSecurityContext, *corev1.SecurityContext, error) {
	pod := &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr.To(true),
		RunAsUser:      ptr.To(defaultUID),
		RunAsGroup:     ptr.To(defaultUID),
		FSGroup:        ptr.To(defaultUID),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	ctr := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr.To(false),
		Privileged:               ptr.To(false),
		ReadOnlyRootFilesystem:   ptr.To(true),
		RunAsNonRoot:             ptr.To(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	if err := overlay(pod, cfg.SecurityContext); err != nil {
		return nil, nil, fault.Wrap(fault.Config, err, "%s: security_context is not a pod security context", TypeName)
	}
	if err := overlay(ctr, cfg.ContainerSecurityContext); err != nil {
		return nil, nil, fault.Wrap(fault.Config, err, "%s: container_security_context is not a container security context", TypeName)
	}
	return pod, ctr, nil
}

// overlay merges the JSON form of patch over dst (keys of patch replace dst's, objects merge
// key by key); unknown keys are an error.
func overlay(dst any, patch map[string]any) error {
	if len(patch) == 0 {
		return nil
	}
	raw, err := json.Marshal(dst)
	if err != nil {
		return err
	}
	var base map[string]any
	if err := json.Unmarshal(raw, &base); err != nil {
		return err
	}
	merged, err := json.Marshal(mergeMaps(base, patch))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(merged))
	dec.DisallowUnknownFields()
	return dec.Decode(dst)
}

func mergeMaps(base, patch map[string]any) map[string]any {
	out := maps.Clone(base)
	for k, v := range patch {
		pm, pok := v.(map[string]any)
		bm, bok := out[k].(map[string]any)
		if pok && bok {
			out[k] = mergeMaps(bm, pm)
			continue
		}
		out[k] = v
	}
	return out
}

// warnWeakened logs a warning for each hardened default the overlays turned off.
func warnWeakened(log *slog.Logger, pod *corev1.PodSecurityContext, ctr *corev1.SecurityContext) {
	var weak []string
	if pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot {
		weak = append(weak, "security_context.runAsNonRoot")
	}
	if pod.RunAsUser != nil && *pod.RunAsUser == 0 {
		weak = append(weak, "security_context.runAsUser=0")
	}
	if ctr.Privileged != nil && *ctr.Privileged {
		weak = append(weak, "container_security_context.privileged")
	}
	if ctr.AllowPrivilegeEscalation == nil || *ctr.AllowPrivilegeEscalation {
		weak = append(weak, "container_security_context.allowPrivilegeEscalation")
	}
	if ctr.ReadOnlyRootFilesystem == nil || !*ctr.ReadOnlyRootFilesystem {
		weak = append(weak, "container_security_context.readOnlyRootFilesystem")
	}
	if ctr.Capabilities != nil && len(ctr.Capabilities.Add) > 0 {
		weak = append(weak, "container_security_context.capabilities.add")
	}
	if len(weak) > 0 {
		log.Warn("the kubernetes security context overlays weaken hardened defaults", "keys", weak)
	}
}

// checkLabels refuses invalid labels and the provider's reserved keys.
func checkLabels(labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k == LabelManagedBy || k == LabelInstallation || k == LabelSandbox || k == LabelSandboxName {
			return fault.New(fault.Config, "%s: label %q is reserved for the provider", TypeName, k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fault.New(fault.Config, "%s: label key %q: %s", TypeName, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			return fault.New(fault.Config, "%s: label %s value %q: %s", TypeName, k, labels[k], strings.Join(errs, "; "))
		}
	}
	return nil
}

// podReason summarises why a pod is not (or no longer) running: its status message or reason,
// a waiting or terminated container's reason and message, or an unsatisfied condition.
func podReason(pod *corev1.Pod) string {
	var parts []string
	if pod.Status.Reason != "" || pod.Status.Message != "" {
		parts = append(parts, strings.TrimSpace(pod.Status.Reason+" "+pod.Status.Message))
	}
	for _, cs := range pod.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			parts = append(parts, fmt.Sprintf("container %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message))
		case cs.State.Terminated != nil:
			parts = append(parts, fmt.Sprintf("container %s terminated: %s (exit code %d) %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message))
		}
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && (c.Reason != "" || c.Message != "") {
			parts = append(parts, fmt.Sprintf("%s: %s %s", c.Type, c.Reason, c.Message))
		}
	}
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return strings.Join(parts, "; ")
}
