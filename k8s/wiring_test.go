package manifests

import (
	"cmp"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// overlayWant is what differs between the sources (render_test.go).
type overlayWant struct {
	kind          string // workload kind carrying the limiter
	nativeSidecar bool   // limiter is an init container with restartPolicy Always
	localTraffic  bool   // client Service has internalTrafficPolicy Local
	secure        bool   // gossip key, peer mTLS and client mTLS (TestSecure)
	spread        bool   // pods spread over zones and nodes
	monitoring    bool   // ServiceMonitor and PrometheusRule
}

func TestWiring(t *testing.T) {
	checks := []struct {
		name  string
		check func(*testing.T, *rendered, *limiterPod, overlayWant)
	}{
		{"workload", checkWorkload},
		{"ports", checkPorts},
		{"probes", checkProbes},
		{"scrape", checkScrape},
		{"services", checkServices},
		{"join", checkJoin},
		{"grace", checkGrace},
		{"security", checkSecurity},
		{"resources", checkResources},
		{"networkpolicy", checkNetworkPolicy},
		{"pdb", checkPDB},
	}
	for _, src := range sources {
		dir, want := src.name, src.want
		t.Run(dir, func(t *testing.T) {
			t.Parallel()
			r := render(t, dir)
			p := r.limiter(t)
			for _, c := range checks {
				t.Run(c.name, func(t *testing.T) { c.check(t, r, p, want) })
			}
		})
	}
}

func selects(sel map[string]string, podLabels map[string]string) bool {
	return len(sel) > 0 && labels.SelectorFromSet(sel).Matches(labels.Set(podLabels))
}

func selectsLabelSelector(t *testing.T, sel *metav1.LabelSelector, podLabels map[string]string) bool {
	t.Helper()
	if sel == nil || len(sel.MatchLabels)+len(sel.MatchExpressions) == 0 {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %+v: %v", sel, err)
	}
	return s.Matches(labels.Set(podLabels))
}

// checkWorkload: what the API server would reject or what makes the pod
// misbehave before the binary even runs.
func checkWorkload(t *testing.T, r *rendered, p *limiterPod, want overlayWant) {
	if p.Kind != want.kind {
		t.Errorf("limiter runs in a %s, want a %s", p.Kind, want.kind)
	}
	if p.Native != want.nativeSidecar {
		t.Errorf("limiter native sidecar (init container, restartPolicy Always) = %v, want %v", p.Native, want.nativeSidecar)
	}
	spec := &p.Template.Spec
	if !selectsLabelSelector(t, p.Selector, p.Template.Labels) {
		t.Errorf("%s selector %v does not match its pod template labels %v", p.Kind, p.Selector, p.Template.Labels)
	}
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		t.Errorf("enableServiceLinks is not false: Services named shardlimiter* inject SHARDLIMITER_* variables")
	}
	if sa := spec.ServiceAccountName; sa != "" {
		if !slices.ContainsFunc(r.ServiceAccounts, func(s *corev1.ServiceAccount) bool { return s.Name == sa }) {
			t.Errorf("serviceAccountName %q is not in the overlay", sa)
		}
	}
	names := map[string]bool{}
	numbers := map[string]bool{}
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		for _, e := range c.Env {
			for _, msg := range validation.IsEnvVarName(e.Name) {
				t.Errorf("container %s env %q: %s", c.Name, e.Name, msg)
			}
		}
		for _, cp := range c.Ports {
			for _, msg := range validation.IsValidPortName(cp.Name) {
				t.Errorf("container %s port name %q: %s", c.Name, cp.Name, msg)
			}
			if names[cp.Name] {
				t.Errorf("port name %q used twice in the pod", cp.Name)
			}
			names[cp.Name] = true
			key := fmt.Sprintf("%d/%s", cp.ContainerPort, cmp.Or(cp.Protocol, corev1.ProtocolTCP))
			if numbers[key] {
				t.Errorf("port %s used by two containers of the pod", key)
			}
			numbers[key] = true
		}
	}
}

// checkPorts: the container ports named http, grpc, peer, gossip-tcp and
// gossip-udp (and health, where --health-addr is set) are the ports of the
// listen addresses the binary is given.
func checkPorts(t *testing.T, _ *rendered, p *limiterPod, _ overlayWant) {
	want := []struct {
		name  string
		port  int32
		proto corev1.Protocol
	}{
		{"http", p.httpPort(t), corev1.ProtocolTCP},
		{"grpc", p.grpcPort(t), corev1.ProtocolTCP},
		{"peer", p.peerPort(t), corev1.ProtocolTCP},
		{"gossip-tcp", p.gossipPort(t), corev1.ProtocolTCP},
		{"gossip-udp", p.gossipPort(t), corev1.ProtocolUDP},
	}
	if _, ok := p.Env["SHARDLIMITER_HEALTH_ADDR"]; ok {
		want = append(want, struct {
			name  string
			port  int32
			proto corev1.Protocol
		}{"health", p.healthPort(t), corev1.ProtocolTCP})
	}
	for _, w := range want {
		cp, ok := p.port(intstr.FromString(w.name), w.proto)
		if !ok {
			t.Errorf("no %s container port named %q", w.proto, w.name)
			continue
		}
		if cp.ContainerPort != w.port {
			t.Errorf("container port %q = %d, want %d (from the listen address)", w.name, cp.ContainerPort, w.port)
		}
	}
	if len(p.Container.Ports) != len(want) {
		t.Errorf("limiter has %d container ports, want %d", len(p.Container.Ports), len(want))
	}
}

func checkProbes(t *testing.T, _ *rendered, p *limiterPod, _ overlayWant) {
	c := p.Container
	probes := []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{
		{"readinessProbe", c.ReadinessProbe, "/readyz"},
		{"livenessProbe", c.LivenessProbe, "/healthz"},
		{"startupProbe", c.StartupProbe, ""},
	}
	for _, pr := range probes {
		if pr.probe == nil || pr.probe.HTTPGet == nil {
			t.Errorf("%s is not an httpGet probe (the image has no shell)", pr.name)
			continue
		}
		get := pr.probe.HTTPGet
		if pr.path != "" && get.Path != pr.path {
			t.Errorf("%s path = %q, want %q", pr.name, get.Path, pr.path)
		}
		if pr.path == "" && get.Path != "/healthz" && get.Path != "/readyz" {
			t.Errorf("%s path = %q, want /healthz or /readyz", pr.name, get.Path)
		}
		// With --health-addr the probes use that plain listener (the API
		// port may require client certificates the kubelet lacks).
		want, wantName := p.httpPort(t), "http"
		if _, ok := p.Env["SHARDLIMITER_HEALTH_ADDR"]; ok {
			want, wantName = p.healthPort(t), "health"
		}
		cp, ok := p.port(get.Port, corev1.ProtocolTCP)
		if !ok || cp.ContainerPort != want {
			t.Errorf("%s port %s does not resolve to the %s port %d", pr.name, get.Port.String(), wantName, want)
		}
		if get.Scheme != "" && get.Scheme != corev1.URISchemeHTTP {
			t.Errorf("%s scheme = %s, want HTTP", pr.name, get.Scheme)
		}
	}
}

func checkScrape(t *testing.T, _ *rendered, p *limiterPod, _ overlayWant) {
	a := p.Template.Annotations
	want := map[string]string{
		"prometheus.io/scrape": "true",
		"prometheus.io/port":   fmt.Sprint(p.httpPort(t)),
		"prometheus.io/path":   "/metrics",
	}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("pod annotation %s = %q, want %q", k, a[k], v)
		}
	}
}

// checkServices: every Service selects the limiter pods and targets its
// ports; the headless one serves gossip discovery, the client one the API.
func checkServices(t *testing.T, r *rendered, p *limiterPod, want overlayWant) {
	var headless, client int
	for _, svc := range r.Services {
		if svc.Namespace != p.Namespace {
			t.Errorf("Service %s in namespace %q, pods in %q", svc.Name, svc.Namespace, p.Namespace)
		}
		if !selects(svc.Spec.Selector, p.Template.Labels) {
			t.Errorf("Service %s selector %v does not match pod labels %v", svc.Name, svc.Spec.Selector, p.Template.Labels)
		}
		for _, sp := range svc.Spec.Ports {
			target := sp.TargetPort
			if target.Type == intstr.Int && target.IntVal == 0 {
				target = intstr.FromInt32(sp.Port)
			}
			if _, ok := p.port(target, sp.Protocol); !ok {
				t.Errorf("Service %s port %s targets %s, not a %s port of the limiter", svc.Name, sp.Name, target.String(), sp.Protocol)
			}
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless++
			checkHeadless(t, svc, p)
			continue
		}
		client++
		if _, ok := p.port(svcTarget(svc, "grpc"), corev1.ProtocolTCP); !ok {
			t.Errorf("client Service %s has no port targeting the grpc container port", svc.Name)
		}
		for _, sp := range svc.Spec.Ports {
			if cp, ok := p.port(sp.TargetPort, corev1.ProtocolTCP); ok && cp.Name == "peer" {
				t.Errorf("client Service %s exposes the peer port to clients", svc.Name)
			}
		}
		local := svc.Spec.InternalTrafficPolicy != nil && *svc.Spec.InternalTrafficPolicy == corev1.ServiceInternalTrafficPolicyLocal
		if local != want.localTraffic {
			t.Errorf("client Service %s internalTrafficPolicy Local = %v, want %v", svc.Name, local, want.localTraffic)
		}
	}
	if headless != 1 || client != 1 {
		t.Errorf("found %d headless and %d client Services, want 1 and 1", headless, client)
	}
}

func svcTarget(svc *corev1.Service, name string) intstr.IntOrString {
	for _, sp := range svc.Spec.Ports {
		if sp.Name == name {
			return sp.TargetPort
		}
	}
	return intstr.FromString("<none>")
}

func checkHeadless(t *testing.T, svc *corev1.Service, p *limiterPod) {
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service %s: publishNotReadyAddresses is false: starting pods could not find each other", svc.Name)
	}
	for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
		ok := slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool {
			cp, found := p.port(sp.TargetPort, sp.Protocol)
			return sp.Protocol == proto && found && cp.ContainerPort == p.gossipPort(t) && sp.Port == p.gossipPort(t)
		})
		if !ok {
			t.Errorf("headless Service %s has no %s port %d for gossip", svc.Name, proto, p.gossipPort(t))
		}
	}
}

var envRef = regexp.MustCompile(`^\$\(([A-Za-z_][A-Za-z0-9_]*)\)$`)

// checkJoin: the seed is the headless Service's DNS name with the gossip
// port; a namespace in it is the Service's, literally or from the downward API.
func checkJoin(t *testing.T, r *rendered, p *limiterPod, _ overlayWant) {
	var svc *corev1.Service
	for _, s := range r.Services {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			svc = s
		}
	}
	if svc == nil {
		t.Fatal("no headless Service")
	}
	join, ok := p.Env["SHARDLIMITER_JOIN"]
	if !ok || join == "" {
		t.Fatal("SHARDLIMITER_JOIN is not set")
	}
	if got := p.FieldRefs["SHARDLIMITER_ADVERTISE_ADDR"]; got != "status.podIP" {
		t.Errorf("SHARDLIMITER_ADVERTISE_ADDR from %q, want the downward API status.podIP", got)
	}
	if got := p.FieldRefs["SHARDLIMITER_NODE_NAME"]; got != "metadata.name" {
		t.Errorf("SHARDLIMITER_NODE_NAME from %q, want the downward API metadata.name", got)
	}
	for _, seed := range strings.Split(join, ",") {
		host, port, err := net.SplitHostPort(seed)
		if err != nil {
			t.Errorf("join seed %q is not host:port: %v", seed, err)
			continue
		}
		if port != fmt.Sprint(p.gossipPort(t)) {
			t.Errorf("join seed %q: port %s, want the gossip port %d", seed, port, p.gossipPort(t))
		}
		name, rest, _ := strings.Cut(host, ".")
		if name != svc.Name {
			t.Errorf("join seed %q does not name the headless Service %s", seed, svc.Name)
		}
		if rest == "" {
			continue // Resolved in the pod's own namespace.
		}
		ns, domain, _ := strings.Cut(rest, ".")
		if domain != "svc" && domain != "svc.cluster.local" {
			t.Errorf("join seed %q: %q after the namespace, want svc or svc.cluster.local", seed, domain)
		}
		checkJoinNamespace(t, seed, ns, svc, p)
	}
}

func checkJoinNamespace(t *testing.T, seed, ns string, svc *corev1.Service, p *limiterPod) {
	m := envRef.FindStringSubmatch(ns)
	if m == nil {
		if ns != svc.Namespace {
			t.Errorf("join seed %q: namespace %q, headless Service is in %q", seed, ns, svc.Namespace)
		}
		return
	}
	v := m[1]
	if p.FieldRefs[v] != "metadata.namespace" {
		t.Errorf("join seed %q: $(%s) is not the downward API metadata.namespace", seed, v)
	}
	if p.Order[v] >= p.Order["SHARDLIMITER_JOIN"] {
		t.Errorf("join seed %q: $(%s) is defined after SHARDLIMITER_JOIN and would not be expanded", seed, v)
	}
	if svc.Namespace != p.Namespace {
		t.Errorf("join seed %q: pod namespace %q, headless Service in %q", seed, p.Namespace, svc.Namespace)
	}
}

// checkGrace: the pod's grace period covers the limiter's whole shutdown
// (preStop sleep, then the handoff of its keys, up to --handoff-timeout,
// then --shutdown-grace), after the application containers'
// preStop sleeps when the limiter is a native sidecar (it stops after them).
func checkGrace(t *testing.T, _ *rendered, p *limiterPod, _ overlayWant) {
	spec := &p.Template.Spec
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatal("terminationGracePeriodSeconds is not set")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	ls := p.Container.Lifecycle
	if ls == nil || ls.PreStop == nil || ls.PreStop.Sleep == nil {
		t.Fatal("limiter has no preStop sleep (lifecycle.preStop.sleep.seconds)")
	}
	if ls.PreStop.Exec != nil {
		t.Error("limiter preStop uses exec: the image has no shell")
	}
	need := time.Duration(ls.PreStop.Sleep.Seconds)*time.Second + p.handoffTimeout(t) + p.shutdownGrace(t)
	if p.Native {
		for _, c := range spec.Containers {
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
				need += time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
			}
		}
	}
	if grace <= need {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than preStop sleep + handoff timeout + shutdown grace = %v", grace, need)
	}
}
