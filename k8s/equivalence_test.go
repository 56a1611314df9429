package manifests

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/diff"
)

// TestChartMatchesOverlays: with the values of a mode, the chart renders
// what the overlay of that mode renders: the same limiter container (ports,
// probes, shutdown hook, resources, security context, mounts, resolved
// environment), the same pod settings (grace period, volumes, scrape
// annotations), labels that include the overlay's, and the same Services,
// NetworkPolicies, PodDisruptionBudgets, rules, Certificates and Issuers,
// object by object. The chart may render more (its own labels, a generated
// gossip key); it may not render them differently.
func TestChartMatchesOverlays(t *testing.T) {
	pairs := []struct{ overlay, chart string }{
		{"overlays/daemonset", "chart/daemonset"},
		{"overlays/secure", "chart/secure"},
		{"overlays/sidecar", "chart/sidecar"},
	}
	for _, pair := range pairs {
		t.Run(pair.chart, func(t *testing.T) {
			t.Parallel()
			k, h := render(t, pair.overlay), render(t, pair.chart)
			d := &differ{t: t}
			d.pods(k.limiter(t), h.limiter(t))
			d.objects(k, h)
		})
	}
}

// differ reports the differences between an overlay's object and the
// chart's.
type differ struct{ t *testing.T }

func (d *differ) same(what string, overlay, chart any) {
	d.t.Helper()
	if !equality.Semantic.DeepEqual(overlay, chart) {
		d.t.Errorf("%s differs (- overlay, + chart):\n%s", what, diff.Diff(overlay, chart))
	}
}

// labels: the chart's labels include every label of the overlay.
func (d *differ) labels(what string, overlay, chart map[string]string) {
	d.t.Helper()
	for k, v := range overlay {
		if chart[k] != v {
			d.t.Errorf("%s: label %s=%q in the overlay, %q in the chart", what, k, v, chart[k])
		}
	}
}

func (d *differ) pods(k, h *limiterPod) {
	kc, hc := k.Container, h.Container
	d.same("workload kind", k.Kind, h.Kind)
	d.same("native sidecar", k.Native, h.Native)
	d.same("container ports", byName(kc.Ports, func(p corev1.ContainerPort) string { return p.Name }),
		byName(hc.Ports, func(p corev1.ContainerPort) string { return p.Name }))
	d.same("startupProbe", kc.StartupProbe, hc.StartupProbe)
	d.same("readinessProbe", kc.ReadinessProbe, hc.ReadinessProbe)
	d.same("livenessProbe", kc.LivenessProbe, hc.LivenessProbe)
	d.same("lifecycle", kc.Lifecycle, hc.Lifecycle)
	d.same("resources", kc.Resources, hc.Resources)
	d.same("securityContext", kc.SecurityContext, hc.SecurityContext)
	d.same("volumeMounts", byName(kc.VolumeMounts, func(m corev1.VolumeMount) string { return m.Name }),
		byName(hc.VolumeMounts, func(m corev1.VolumeMount) string { return m.Name }))
	d.same("environment", k.Env, h.Env)
	d.same("environment from the downward API", k.FieldRefs, h.FieldRefs)
	d.same("environment from resources", k.ResourceRefs, h.ResourceRefs)
	ks, hs := &k.Template.Spec, &h.Template.Spec
	d.same("terminationGracePeriodSeconds", ks.TerminationGracePeriodSeconds, hs.TerminationGracePeriodSeconds)
	d.same("enableServiceLinks", ks.EnableServiceLinks, hs.EnableServiceLinks)
	d.same("pod securityContext", ks.SecurityContext, hs.SecurityContext)
	d.same("automountServiceAccountToken", ks.AutomountServiceAccountToken, hs.AutomountServiceAccountToken)
	d.same("volumes", byName(ks.Volumes, func(v corev1.Volume) string { return v.Name }),
		byName(hs.Volumes, func(v corev1.Volume) string { return v.Name }))
	d.same("other containers", others(ks), others(hs))
	d.labels("pod template", k.Template.Labels, h.Template.Labels)
	for key, v := range k.Template.Annotations {
		if strings.HasPrefix(key, "prometheus.io/") && h.Template.Annotations[key] != v {
			d.t.Errorf("pod annotation %s = %q in the overlay, %q in the chart", key, v, h.Template.Annotations[key])
		}
	}
}

// byName indexes a list whose order does not matter by the items' names.
func byName[T any](list []T, name func(T) string) map[string]T {
	m := make(map[string]T, len(list))
	for _, v := range list {
		m[name(v)] = v
	}
	return m
}

// others are the pod's containers but the limiter.
func others(spec *corev1.PodSpec) []corev1.Container {
	var out []corev1.Container
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Name != limiterContainerName {
			out = append(out, c)
		}
	}
	return out
}

// objects compares the overlay's objects with the chart's of the same kind
// and name.
func (d *differ) objects(k, h *rendered) {
	each(d, "DaemonSet", k.DaemonSets, h.DaemonSets, func(what string, o, c *appsv1.DaemonSet) {
		d.same(what+" updateStrategy", o.Spec.UpdateStrategy, c.Spec.UpdateStrategy)
		d.same(what+" minReadySeconds", o.Spec.MinReadySeconds, c.Spec.MinReadySeconds)
	})
	each(d, "Deployment", k.Deployments, h.Deployments, func(what string, o, c *appsv1.Deployment) {
		// The pod template is compared by pods.
		os, cs := o.Spec, c.Spec
		os.Template, cs.Template = corev1.PodTemplateSpec{}, corev1.PodTemplateSpec{}
		d.same(what+" spec", os, cs)
	})
	each(d, "Service", k.Services, h.Services, func(what string, o, c *corev1.Service) {
		d.same(what+" spec", o.Spec, c.Spec)
	})
	each(d, "NetworkPolicy", k.NetworkPolicies, h.NetworkPolicies, func(what string, o, c *networkingv1.NetworkPolicy) {
		d.same(what+" spec", o.Spec, c.Spec)
	})
	d.same("number of PodDisruptionBudgets", len(k.PDBs), len(h.PDBs))
	each(d, "PodDisruptionBudget", k.PDBs, h.PDBs, func(what string, o, c *policyv1.PodDisruptionBudget) {
		d.same(what+" spec", o.Spec, c.Spec)
	})
	each(d, "ServiceAccount", k.ServiceAccounts, h.ServiceAccounts, func(what string, o, c *corev1.ServiceAccount) {
		d.same(what+" automountServiceAccountToken", o.AutomountServiceAccountToken, c.AutomountServiceAccountToken)
	})
	// The config ConfigMap has a hash suffix in the overlay; its content is
	// compared as the limiter's environment (pods).
	rules := func(cms []*corev1.ConfigMap) []*corev1.ConfigMap {
		return slices.DeleteFunc(slices.Clone(cms), func(cm *corev1.ConfigMap) bool { return !strings.HasSuffix(cm.Name, "-rules") })
	}
	each(d, "ConfigMap", rules(k.ConfigMaps), h.ConfigMaps, func(what string, o, c *corev1.ConfigMap) {
		d.same(what+" data", o.Data, c.Data)
	})
	each(d, "Certificate", k.Certificates, h.Certificates, func(what string, o, c *certificate) {
		d.same(what+" spec", o.Spec, c.Spec)
	})
	each(d, "Issuer", k.Issuers, h.Issuers, func(what string, o, c *issuer) {
		d.same(what+" spec", o.Spec, c.Spec)
	})
}

type object interface {
	GetName() string
	GetLabels() map[string]string
}

// each finds, for every overlay object, the chart's object of the same kind
// and name, checks that its labels include the overlay's, and compares the
// two with cmp.
func each[T object](d *differ, kind string, overlay, chart []T, cmp func(what string, o, c T)) {
	d.t.Helper()
	for _, o := range overlay {
		i := slices.IndexFunc(chart, func(c T) bool { return c.GetName() == o.GetName() })
		if i < 0 {
			d.t.Errorf("the overlay's %s %s is not in the chart's rendering", kind, o.GetName())
			continue
		}
		what := kind + " " + o.GetName()
		d.labels(what, o.GetLabels(), chart[i].GetLabels())
		cmp(what, o, chart[i])
	}
}
