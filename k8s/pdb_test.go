package manifests

import (
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestPDBValidFor: the rule checkPDB applies, on budgets the API server
// accepts but the disruption controller cannot use.
func TestPDBValidFor(t *testing.T) {
	t.Parallel()
	one, two, half := intstr.FromInt32(1), intstr.FromInt32(2), intstr.FromString("50%")
	budget := func(maxUnavailable, minAvailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
		p := &policyv1.PodDisruptionBudget{}
		p.Name = "shardlimiter"
		p.Spec.MaxUnavailable, p.Spec.MinAvailable = maxUnavailable, minAvailable
		return p
	}
	tests := []struct {
		name  string
		pdb   *policyv1.PodDisruptionBudget
		kind  string
		valid bool
	}{
		{"DaemonSet maxUnavailable 1", budget(&one, nil), "DaemonSet", false},
		{"DaemonSet maxUnavailable 50%", budget(&half, nil), "DaemonSet", false},
		{"DaemonSet minAvailable 50%", budget(nil, &half), "DaemonSet", false},
		{"DaemonSet neither", budget(nil, nil), "DaemonSet", false},
		{"DaemonSet minAvailable 2", budget(nil, &two), "DaemonSet", true},
		{"Deployment maxUnavailable 1", budget(&one, nil), "Deployment", true},
		{"Deployment minAvailable 50%", budget(nil, &half), "Deployment", true},
		{"Deployment both", budget(&one, &two), "Deployment", false},
		{"StatefulSet maxUnavailable 1", budget(&one, nil), "StatefulSet", true},
	}
	for _, tt := range tests {
		err := pdbValidFor(tt.pdb, tt.kind)
		if (err == nil) != tt.valid {
			t.Errorf("%s: pdbValidFor = %v, want valid %v", tt.name, err, tt.valid)
		}
	}
}
