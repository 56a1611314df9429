package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Checks of what the cluster enforces around the limiter container: its
// security context, resources, network policy and disruption budget.

func checkSecurity(t *testing.T, _ *rendered, p *limiterPod, _ overlayWant) {
	sc := p.Container.SecurityContext
	if sc == nil {
		t.Fatal("limiter has no securityContext")
	}
	pod := p.Template.Spec.SecurityContext
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	runAsNonRoot := cmpOr(sc.RunAsNonRoot, pod.RunAsNonRoot)
	runAsUser := cmpOr(sc.RunAsUser, pod.RunAsUser)
	seccomp := cmpOr(sc.SeccompProfile, pod.SeccompProfile)
	if runAsNonRoot == nil || !*runAsNonRoot {
		t.Error("runAsNonRoot is not true")
	}
	if runAsUser == nil || *runAsUser != 65532 {
		t.Errorf("runAsUser = %v, want 65532 (the image's USER)", deref(runAsUser))
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Error("privileged is true")
	}
	if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities = %+v, want drop [ALL] and no add", sc.Capabilities)
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("seccompProfile = %+v, want RuntimeDefault", seccomp)
	}
}

func cmpOr[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// checkResources: requests and limits set, and the node's memory budget
// read from the container's own memory limit (so that the limit is set in
// one place; the binary derives the Go runtime's soft limit from it).
func checkResources(t *testing.T, _ *rendered, p *limiterPod, _ overlayWant) {
	res := p.Container.Resources
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, okReq := res.Requests[name]
		lim, okLim := res.Limits[name]
		if !okReq || !okLim {
			t.Errorf("%s: request set %v, limit set %v, want both", name, okReq, okLim)
			continue
		}
		if req.Cmp(lim) > 0 {
			t.Errorf("%s request %s > limit %s", name, req.String(), lim.String())
		}
	}
	ref, ok := p.ResourceRefs["SHARDLIMITER_MAX_MEMORY"]
	if !ok {
		t.Fatalf("SHARDLIMITER_MAX_MEMORY is not read from the container's memory limit (literal %q): the budget and the limit can drift apart", p.Env["SHARDLIMITER_MAX_MEMORY"])
	}
	if ref.Resource != "limits.memory" || (ref.ContainerName != "" && ref.ContainerName != limiterContainerName) {
		t.Errorf("SHARDLIMITER_MAX_MEMORY reads %s of container %q, want limits.memory of %q", ref.Resource, ref.ContainerName, limiterContainerName)
	}
	if d := ref.Divisor; !d.IsZero() && d.Value() != 1 {
		t.Errorf("SHARDLIMITER_MAX_MEMORY divisor %s: the binary reads bytes, want 1 or none", d.String())
	}
	// An explicit GOMEMLIMIT overrides the soft limit the binary derives:
	// if one is set, it must still sit under the hard limit.
	if v, ok := p.Env["GOMEMLIMIT"]; ok {
		soft, err := goMemLimit(v)
		if err != nil {
			t.Fatal(err)
		}
		if hard := res.Limits[corev1.ResourceMemory]; soft >= hard.Value() || soft < hard.Value()/2 {
			t.Errorf("GOMEMLIMIT = %s (%d bytes), want between half the memory limit and the limit %s", v, soft, hard.String())
		}
	}
}

// checkNetworkPolicy: a policy selects the limiter pods, gossip and the
// peer port are open to members only, and the client gRPC port stays open
// to everyone.
func checkNetworkPolicy(t *testing.T, r *rendered, p *limiterPod, _ overlayWant) {
	var mine []*networkingv1.NetworkPolicy
	for _, np := range r.NetworkPolicies {
		if selectsLabelSelector(t, &np.Spec.PodSelector, p.Template.Labels) {
			mine = append(mine, np)
		}
	}
	if len(mine) == 0 {
		t.Fatalf("no NetworkPolicy selects the limiter pods (labels %v)", p.Template.Labels)
	}
	gossip := map[corev1.Protocol]bool{}
	grpcOpen, peerAllowed := false, false
	for _, np := range mine {
		for _, rule := range np.Spec.Ingress {
			for _, proto := range []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP} {
				if !ruleAllowsPort(rule, p, "gossip-"+strings.ToLower(string(proto)), proto) {
					continue
				}
				if !fromMembersOnly(t, rule, p) {
					t.Errorf("NetworkPolicy %s lets non-members reach gossip %s: %+v", np.Name, proto, rule.From)
				}
				gossip[proto] = true
			}
			if len(rule.From) == 0 && ruleAllowsPort(rule, p, "grpc", corev1.ProtocolTCP) {
				grpcOpen = true
			}
			if ruleAllowsPort(rule, p, "peer", corev1.ProtocolTCP) {
				if !fromMembersOnly(t, rule, p) {
					t.Errorf("NetworkPolicy %s lets non-members reach the peer port: %+v", np.Name, rule.From)
				}
				peerAllowed = true
			}
		}
	}
	if !gossip[corev1.ProtocolTCP] || !gossip[corev1.ProtocolUDP] {
		t.Errorf("gossip allowed for TCP %v, UDP %v; want both, from members", gossip[corev1.ProtocolTCP], gossip[corev1.ProtocolUDP])
	}
	if !peerAllowed {
		t.Error("the peer port is not open to members: forwarding and handoff would fail")
	}
	if !grpcOpen {
		t.Error("the gRPC port is not open to all sources: applications could not call the limiter")
	}
}

// ruleAllowsPort reports whether rule admits traffic to the limiter's
// container port named portName.
func ruleAllowsPort(rule networkingv1.NetworkPolicyIngressRule, p *limiterPod, portName string, proto corev1.Protocol) bool {
	cp, ok := p.port(intstr.FromString(portName), proto)
	if !ok {
		return false
	}
	if len(rule.Ports) == 0 {
		return true
	}
	for _, np := range rule.Ports {
		npProto := corev1.ProtocolTCP
		if np.Protocol != nil {
			npProto = *np.Protocol
		}
		switch {
		case npProto != proto:
		case np.Port == nil:
			return true
		case np.Port.Type == intstr.String && np.Port.StrVal == cp.Name:
			return true
		case np.Port.Type == intstr.Int && np.EndPort == nil && np.Port.IntVal == cp.ContainerPort:
			return true
		case np.Port.Type == intstr.Int && np.EndPort != nil && np.Port.IntVal <= cp.ContainerPort && cp.ContainerPort <= *np.EndPort:
			return true
		}
	}
	return false
}

func fromMembersOnly(t *testing.T, rule networkingv1.NetworkPolicyIngressRule, p *limiterPod) bool {
	if len(rule.From) == 0 {
		return false
	}
	for _, peer := range rule.From {
		if peer.IPBlock != nil || peer.NamespaceSelector != nil || peer.PodSelector == nil {
			return false
		}
		if !selectsLabelSelector(t, peer.PodSelector, p.Template.Labels) {
			return false
		}
	}
	return true
}

// checkPDB: every budget is one Kubernetes can apply to the pods it
// selects, and the limiter's pods have the budget of their controller: one
// member at a time for a Deployment, none for a DaemonSet (only an integer
// minAvailable is valid there, which cannot say "one node at a time" for a
// node count it does not know; kubectl drain skips DaemonSet pods anyway).
func checkPDB(t *testing.T, r *rendered, p *limiterPod, _ overlayWant) {
	var mine []*policyv1.PodDisruptionBudget
	for _, pdb := range r.PDBs {
		if !selectsLabelSelector(t, pdb.Spec.Selector, p.Template.Labels) {
			continue
		}
		mine = append(mine, pdb)
		if err := pdbValidFor(pdb, p.Kind); err != nil {
			t.Error(err)
		}
	}
	switch p.Kind {
	case "DaemonSet":
		if len(mine) != 0 {
			t.Errorf("%d PodDisruptionBudgets select the DaemonSet's pods, want none", len(mine))
		}
	default:
		if len(mine) != 1 {
			t.Fatalf("%d PodDisruptionBudgets select the limiter pods, want 1 (a pod under two budgets cannot be evicted)", len(mine))
		}
		pdb := mine[0]
		if mu := pdb.Spec.MaxUnavailable; mu == nil || mu.String() != "1" || pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, minAvailable %v; want maxUnavailable 1 only", pdb.Name, mu, pdb.Spec.MinAvailable)
		}
	}
}

// pdbValidFor reports why Kubernetes cannot apply pdb to pods of a
// controller of kind. The disruption controller derives maxUnavailable and
// percentages from the controller's scale subresource; Deployment,
// ReplicaSet, ReplicationController and StatefulSet have one, a DaemonSet
// does not: a budget over its pods may only use an integer minAvailable,
// and with anything else it allows no eviction at all.
func pdbValidFor(pdb *policyv1.PodDisruptionBudget, kind string) error {
	switch kind {
	case "Deployment", "ReplicaSet", "ReplicationController", "StatefulSet":
		if (pdb.Spec.MaxUnavailable == nil) == (pdb.Spec.MinAvailable == nil) {
			return fmt.Errorf("PodDisruptionBudget %s: want exactly one of maxUnavailable and minAvailable", pdb.Name)
		}
		return nil
	}
	if pdb.Spec.MaxUnavailable != nil {
		return fmt.Errorf("PodDisruptionBudget %s: maxUnavailable %s over pods of a %s, which has no scale subresource: Kubernetes allows only an integer minAvailable", pdb.Name, pdb.Spec.MaxUnavailable.String(), kind)
	}
	if ma := pdb.Spec.MinAvailable; ma == nil || ma.Type != intstr.Int {
		return fmt.Errorf("PodDisruptionBudget %s: minAvailable %v over pods of a %s: Kubernetes allows only an integer", pdb.Name, ma, kind)
	}
	return nil
}
