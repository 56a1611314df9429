package manifests

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// limiterContainerName is the name of the limiter container in every workload.
const limiterContainerName = "shardlimiter"

// Defaults of the binary (README.md, "Configuration"), used when a manifest
// leaves a flag unset.
const (
	defaultHTTPAddr      = ":8080"
	defaultGRPCAddr      = ":8081"
	defaultPeerAddr      = ":8082"
	defaultGossipAddr    = ":7946"
	defaultShutdownGrace = 5 * time.Second
	// defaultHandoffTimeout is --handoff-timeout's default.
	defaultHandoffTimeout = 5 * time.Second
)

// limiterPod is the pod template of the one workload of an overlay that runs
// the limiter, with the limiter container's environment resolved.
type limiterPod struct {
	Kind, Name, Namespace string
	Selector              *metav1.LabelSelector
	Template              *corev1.PodTemplateSpec
	Container             *corev1.Container
	// Native is true when the container is a native sidecar: an init
	// container with restartPolicy Always.
	Native bool
	// Env holds the literal value of each variable, from envFrom ConfigMaps
	// overridden by env entries; $(VAR) references are kept as written.
	Env map[string]string
	// FieldRefs maps variables set from the downward API to their field path.
	FieldRefs map[string]string
	// ResourceRefs maps variables set from the downward API to the
	// container resource they read.
	ResourceRefs map[string]*corev1.ResourceFieldSelector
	// Order is the position of each variable in env (for $(VAR) expansion,
	// which only sees variables defined earlier).
	Order map[string]int
}

// limiter finds the workload running the limiter container; there must be
// exactly one.
func (r *rendered) limiter(t *testing.T) *limiterPod {
	t.Helper()
	var found []*limiterPod
	for _, d := range r.DaemonSets {
		if p := newLimiterPod("DaemonSet", d.ObjectMeta, d.Spec.Selector, &d.Spec.Template); p != nil {
			found = append(found, p)
		}
	}
	for _, d := range r.Deployments {
		if p := newLimiterPod("Deployment", d.ObjectMeta, d.Spec.Selector, &d.Spec.Template); p != nil {
			found = append(found, p)
		}
	}
	if len(found) != 1 {
		t.Fatalf("found %d workloads with a %q container, want 1", len(found), limiterContainerName)
	}
	p := found[0]
	if err := r.resolveEnv(p); err != nil {
		t.Fatalf("%s %s: %v", p.Kind, p.Name, err)
	}
	return p
}

func newLimiterPod(kind string, meta metav1.ObjectMeta, sel *metav1.LabelSelector, tpl *corev1.PodTemplateSpec) *limiterPod {
	p := &limiterPod{Kind: kind, Name: meta.Name, Namespace: meta.Namespace, Selector: sel, Template: tpl}
	for i := range tpl.Spec.Containers {
		if tpl.Spec.Containers[i].Name == limiterContainerName {
			p.Container = &tpl.Spec.Containers[i]
		}
	}
	for i := range tpl.Spec.InitContainers {
		c := &tpl.Spec.InitContainers[i]
		if c.Name == limiterContainerName {
			p.Container = c
			p.Native = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	if p.Container == nil {
		return nil
	}
	return p
}

// resolveEnv fills Env, FieldRefs and Order from the container and the
// rendered ConfigMaps it refers to.
func (r *rendered) resolveEnv(p *limiterPod) error {
	p.Env, p.FieldRefs, p.Order = map[string]string{}, map[string]string{}, map[string]int{}
	p.ResourceRefs = map[string]*corev1.ResourceFieldSelector{}
	for _, src := range p.Container.EnvFrom {
		if src.ConfigMapRef == nil {
			return fmt.Errorf("envFrom %+v: only ConfigMaps are expected", src)
		}
		cm := r.configMap(src.ConfigMapRef.Name, p.Namespace)
		if cm == nil {
			return fmt.Errorf("envFrom ConfigMap %q is not in the overlay", src.ConfigMapRef.Name)
		}
		for k, v := range cm.Data {
			p.Env[src.Prefix+k] = v
		}
	}
	for i, e := range p.Container.Env {
		p.Order[e.Name] = i
		switch {
		case e.ValueFrom == nil:
			p.Env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			p.FieldRefs[e.Name] = e.ValueFrom.FieldRef.FieldPath
			delete(p.Env, e.Name)
		case e.ValueFrom.ResourceFieldRef != nil:
			p.ResourceRefs[e.Name] = e.ValueFrom.ResourceFieldRef
			delete(p.Env, e.Name)
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			cm := r.configMap(ref.Name, p.Namespace)
			if cm == nil {
				return fmt.Errorf("env %s: ConfigMap %q is not in the overlay", e.Name, ref.Name)
			}
			v, ok := cm.Data[ref.Key]
			if !ok {
				return fmt.Errorf("env %s: ConfigMap %q has no key %q", e.Name, ref.Name, ref.Key)
			}
			p.Env[e.Name] = v
		default:
			return fmt.Errorf("env %s: unexpected source %+v", e.Name, e.ValueFrom)
		}
	}
	return nil
}

func (r *rendered) configMap(name, namespace string) *corev1.ConfigMap {
	for _, cm := range r.ConfigMaps {
		if cm.Name == name && cm.Namespace == namespace {
			return cm
		}
	}
	return nil
}

// addrPort returns the port of the listen address in variable key (host:port,
// host optional), or of def when the manifest does not set it.
func (p *limiterPod) addrPort(t *testing.T, key, def string) int32 {
	t.Helper()
	addr, ok := p.Env[key]
	if !ok {
		addr = def
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("%s=%q: %v", key, addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		t.Fatalf("%s=%q: port %q is not a fixed port number", key, addr, port)
	}
	return int32(n)
}

func (p *limiterPod) httpPort(t *testing.T) int32 {
	return p.addrPort(t, "SHARDLIMITER_HTTP_ADDR", defaultHTTPAddr)
}

func (p *limiterPod) grpcPort(t *testing.T) int32 {
	return p.addrPort(t, "SHARDLIMITER_GRPC_ADDR", defaultGRPCAddr)
}

func (p *limiterPod) peerPort(t *testing.T) int32 {
	return p.addrPort(t, "SHARDLIMITER_PEER_ADDR", defaultPeerAddr)
}

// healthPort is the port of --health-addr; the test fails if it is unset.
func (p *limiterPod) healthPort(t *testing.T) int32 {
	t.Helper()
	if _, ok := p.Env["SHARDLIMITER_HEALTH_ADDR"]; !ok {
		t.Fatal("SHARDLIMITER_HEALTH_ADDR is not set")
	}
	return p.addrPort(t, "SHARDLIMITER_HEALTH_ADDR", "")
}

func (p *limiterPod) gossipPort(t *testing.T) int32 {
	return p.addrPort(t, "SHARDLIMITER_GOSSIP_ADDR", defaultGossipAddr)
}

func (p *limiterPod) shutdownGrace(t *testing.T) time.Duration {
	t.Helper()
	return p.duration(t, "SHARDLIMITER_SHUTDOWN_GRACE", defaultShutdownGrace)
}

// handoffTimeout is the limiter's --handoff-timeout: the longest a leaving
// node waits for the new owners to take its keys.
func (p *limiterPod) handoffTimeout(t *testing.T) time.Duration {
	t.Helper()
	return p.duration(t, "SHARDLIMITER_HANDOFF_TIMEOUT", defaultHandoffTimeout)
}

func (p *limiterPod) duration(t *testing.T, env string, def time.Duration) time.Duration {
	t.Helper()
	v, ok := p.Env[env]
	if !ok {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", env, v, err)
	}
	return d
}

// port finds the limiter's container port that ref (a name or a number)
// designates.
func (p *limiterPod) port(ref intstr.IntOrString, proto corev1.Protocol) (corev1.ContainerPort, bool) {
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	for _, cp := range p.Container.Ports {
		cpProto := cp.Protocol
		if cpProto == "" {
			cpProto = corev1.ProtocolTCP
		}
		if cpProto != proto {
			continue
		}
		if ref.Type == intstr.String && cp.Name == ref.StrVal ||
			ref.Type == intstr.Int && cp.ContainerPort == ref.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

// goMemLimit parses a GOMEMLIMIT value (bytes with an optional B, KiB, MiB,
// GiB or TiB suffix).
func goMemLimit(v string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = s, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("GOMEMLIMIT %q: %w", v, err)
	}
	return n * mult, nil
}
