package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestDurableOverlay: overlays/durable gives the limiter a state directory
// on its node that it can write, names its snapshot after the node, and
// says so to the namespace's Pod Security admission; the other overlays
// keep memory-only state and the restricted standard.
func TestDurableOverlay(t *testing.T) {
	t.Parallel()
	r := render(t, "overlays/durable")
	p := r.limiter(t)
	dir := p.Env["SHARDLIMITER_STATE_DIR"]
	if dir == "" {
		t.Fatal("SHARDLIMITER_STATE_DIR is not set")
	}
	if got := p.FieldRefs["SHARDLIMITER_SNAPSHOT_NAME"]; got != "spec.nodeName" {
		t.Errorf("SHARDLIMITER_SNAPSHOT_NAME from %q, want spec.nodeName (a pod's name changes with every pod)", got)
	}
	if p.Env["SHARDLIMITER_SNAPSHOT_INTERVAL"] == "" {
		t.Error("SHARDLIMITER_SNAPSHOT_INTERVAL is not set: the default is implicit")
	}
	mount := mountAt(p.Container, dir)
	if mount == nil || mount.ReadOnly {
		t.Fatalf("the limiter does not mount %s writable: %+v", dir, p.Container.VolumeMounts)
	}
	var vol *corev1.Volume
	for i, v := range p.Template.Spec.Volumes {
		if v.Name == mount.Name {
			vol = &p.Template.Spec.Volumes[i]
		}
	}
	if vol == nil || vol.HostPath == nil || vol.HostPath.Type == nil || *vol.HostPath.Type != corev1.HostPathDirectoryOrCreate {
		t.Fatalf("volume %q = %+v, want a hostPath DirectoryOrCreate", mount.Name, vol)
	}
	// The kubelet makes the directory root's: an init container must hand
	// it to the limiter's user before the limiter starts.
	uid := *cmpOr(p.Container.SecurityContext.RunAsUser, p.Template.Spec.SecurityContext.RunAsUser)
	var owner *corev1.Container
	for i, c := range p.Template.Spec.InitContainers {
		if mountAt(&c, vol.HostPath.Path) != nil || mountAt(&c, dir) != nil {
			owner = &p.Template.Spec.InitContainers[i]
		}
	}
	if owner == nil {
		t.Fatal("no init container prepares the state directory")
	}
	chown := fmt.Sprintf("chown %d:%d %s", uid, uid, dir)
	if !slices.ContainsFunc(owner.Command, func(s string) bool { return strings.Contains(s, chown) }) {
		t.Errorf("init container %q runs %q: want a chown of %s to %d", owner.Name, owner.Command, dir, uid)
	}
	if sc := owner.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("init container %q security context %+v: want drop ALL, add CHOWN alone, no privilege escalation", owner.Name, owner.SecurityContext)
	}
	// Pod Security admission: hostPath needs "privileged"; "restricted" is
	// still warned about and audited.
	ns := r.Namespaces[0].Labels
	if ns["pod-security.kubernetes.io/enforce"] != "privileged" || ns["pod-security.kubernetes.io/warn"] != "restricted" || ns["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("namespace labels %v: want enforce privileged, warn and audit restricted", ns)
	}

	// Memory only, and restricted, everywhere else.
	for _, dir := range []string{"overlays/daemonset", "overlays/secure"} {
		r := render(t, dir)
		p := r.limiter(t)
		if v, ok := p.Env["SHARDLIMITER_STATE_DIR"]; ok {
			t.Errorf("%s sets SHARDLIMITER_STATE_DIR=%q", dir, v)
		}
		for _, v := range p.Template.Spec.Volumes {
			if v.HostPath != nil {
				t.Errorf("%s has a hostPath volume %q", dir, v.Name)
			}
		}
		if got := r.Namespaces[0].Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
			t.Errorf("%s: namespace enforces %q, want restricted", dir, got)
		}
	}
}

func mountAt(c *corev1.Container, path string) *corev1.VolumeMount {
	for i, m := range c.VolumeMounts {
		if m.MountPath == path {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}
