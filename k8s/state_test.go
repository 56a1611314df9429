package manifests

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestDurableOverlay: overlays/durable and the chart with state.enabled
// give the limiter a state directory on its node that it can write, name
// its snapshot after the node, and (the overlay, which owns the namespace)
// say so to the namespace's Pod Security admission; the other sources keep
// memory-only state and the restricted standard.
func TestDurableOverlay(t *testing.T) {
	t.Parallel()
	r := render(t, "overlays/durable")
	checkHostPathState(t, r.limiter(t), "/var/lib/shardlimiter")
	// Pod Security admission: hostPath needs "privileged"; "restricted" is
	// still warned about and audited.
	ns := r.Namespaces[0].Labels
	if ns["pod-security.kubernetes.io/enforce"] != "privileged" || ns["pod-security.kubernetes.io/warn"] != "restricted" || ns["pod-security.kubernetes.io/audit"] != "restricted" {
		t.Errorf("namespace labels %v: want enforce privileged, warn and audit restricted", ns)
	}
	checkHostPathState(t, render(t, "chart/durable").limiter(t), "/var/lib/shardlimiter")

	// Memory only, and restricted, everywhere else.
	for _, dir := range []string{"overlays/daemonset", "overlays/secure", "chart/daemonset", "chart/deployment", "chart/secure"} {
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
		if len(p.Template.Spec.InitContainers) != 0 {
			t.Errorf("%s has init containers %v", dir, p.Template.Spec.InitContainers)
		}
		if len(r.StatefulSets) != 0 {
			t.Errorf("%s renders a StatefulSet", dir)
		}
		if len(r.Namespaces) > 0 {
			if got := r.Namespaces[0].Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
				t.Errorf("%s: namespace enforces %q, want restricted", dir, got)
			}
		}
	}
}

// checkHostPathState: the limiter writes its snapshots to a directory it
// owns, a hostPath at hostDir on its node, in a file named after the node.
func checkHostPathState(t *testing.T, p *limiterPod, hostDir string) {
	t.Helper()
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
	if vol.HostPath.Path != hostDir {
		t.Errorf("hostPath %s, want %s", vol.HostPath.Path, hostDir)
	}
	// The kubelet makes the directory root's: an init container must hand
	// it to the limiter's user before the limiter starts.
	uid := *cmpOr(p.Container.SecurityContext.RunAsUser, p.Template.Spec.SecurityContext.RunAsUser)
	var owner *corev1.Container
	for i, c := range p.Template.Spec.InitContainers {
		if m := mountAt(&c, dir); m != nil && m.Name == vol.Name {
			owner = &p.Template.Spec.InitContainers[i]
		}
	}
	if owner == nil {
		t.Fatalf("no init container mounts volume %s at %s to prepare it", vol.Name, dir)
	}
	chown := fmt.Sprintf("chown %d:%d %s", uid, uid, dir)
	if !slices.ContainsFunc(owner.Command, func(s string) bool { return strings.Contains(s, chown) }) {
		t.Errorf("init container %q runs %q: want a chown of %s to %d", owner.Name, owner.Command, dir, uid)
	}
	if sc := owner.SecurityContext; sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Add, []corev1.Capability{"CHOWN"}) ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("init container %q security context %+v: want drop ALL, add CHOWN alone, no privilege escalation", owner.Name, owner.SecurityContext)
	}
}

// TestChartStateValues: the chart's state values reach the pods: another
// directory on the node, another interval.
func TestChartStateValues(t *testing.T) {
	t.Parallel()
	r, err := renderChart(t, "state.enabled=true", "state.hostPath=/data/limits", "state.snapshotInterval=1m30s", "state.initImage=registry.example.com/busybox:1.37.0")
	if err != nil {
		t.Fatal(err)
	}
	p := r.limiter(t)
	checkHostPathState(t, p, "/data/limits")
	if got := p.Env["SHARDLIMITER_SNAPSHOT_INTERVAL"]; got != "1m30s" {
		t.Errorf("SHARDLIMITER_SNAPSHOT_INTERVAL = %q, want 1m30s", got)
	}
	if got := p.Template.Spec.InitContainers[0].Image; got != "registry.example.com/busybox:1.37.0" {
		t.Errorf("init image %q, want state.initImage", got)
	}
	// The schema takes every positive Go duration (TestChartSchemaRejects
	// has the ones it refuses).
	for _, d := range []string{"500ms", "0.5s", "2h", "1h0m0s"} {
		r, err := renderChart(t, "state.enabled=true", "state.snapshotInterval="+d)
		if err != nil {
			t.Errorf("state.snapshotInterval=%s: %v", d, err)
			continue
		}
		if got := r.limiter(t).Env["SHARDLIMITER_SNAPSHOT_INTERVAL"]; got != d {
			t.Errorf("state.snapshotInterval=%s: SHARDLIMITER_SNAPSHOT_INTERVAL = %q", d, got)
		}
	}
}

// TestChartStateful: in deployment mode, state.enabled runs the limiters
// as a StatefulSet whose every pod has its own claim, mounted where the
// limiter writes, and names its file after the pod (which its replacement
// keeps); the kubelet gives the volume to the limiter's group, so the pod
// keeps the restricted standard (no hostPath, no root init container).
func TestChartStateful(t *testing.T) {
	t.Parallel()
	r := render(t, "chart/stateful")
	p := r.limiter(t)
	if p.Kind != "StatefulSet" || len(r.Deployments) != 0 {
		t.Fatalf("the limiter runs in a %s beside %d Deployments, want a StatefulSet alone", p.Kind, len(r.Deployments))
	}
	sts := r.StatefulSets[0]
	var headless string
	for _, svc := range r.Services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = svc.Name
		}
	}
	if sts.Spec.ServiceName != headless {
		t.Errorf("serviceName %q, want the headless Service %q", sts.Spec.ServiceName, headless)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3 (examples/deployment-values.yaml)", deref(sts.Spec.Replicas))
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType || sts.Spec.MinReadySeconds <= 0 {
		t.Errorf("updateStrategy %+v, minReadySeconds %d: want RollingUpdate, one ready member at a time", sts.Spec.UpdateStrategy, sts.Spec.MinReadySeconds)
	}
	dir := p.Env["SHARDLIMITER_STATE_DIR"]
	if dir == "" {
		t.Fatal("SHARDLIMITER_STATE_DIR is not set")
	}
	if got := p.FieldRefs["SHARDLIMITER_SNAPSHOT_NAME"]; got != "metadata.name" {
		t.Errorf("SHARDLIMITER_SNAPSHOT_NAME from %q, want metadata.name (a StatefulSet pod's name is stable)", got)
	}
	mount := mountAt(p.Container, dir)
	if mount == nil || mount.ReadOnly {
		t.Fatalf("the limiter does not mount %s writable: %+v", dir, p.Container.VolumeMounts)
	}
	// The mount's volume is the claim template's, not a pod volume.
	if slices.ContainsFunc(p.Template.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name }) {
		t.Errorf("volume %s is a pod volume: want the claim template's", mount.Name)
	}
	i := slices.IndexFunc(sts.Spec.VolumeClaimTemplates, func(c corev1.PersistentVolumeClaim) bool { return c.Name == mount.Name })
	if i < 0 || len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Fatalf("volumeClaimTemplates %v, want one named %s", sts.Spec.VolumeClaimTemplates, mount.Name)
	}
	claim := sts.Spec.VolumeClaimTemplates[i].Spec
	if !slices.Equal(claim.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Errorf("claim access modes %v, want ReadWriteOnce", claim.AccessModes)
	}
	if got := claim.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("1Gi")) != 0 {
		t.Errorf("claim size %s, want the default 1Gi", got.String())
	}
	if claim.StorageClassName != nil {
		t.Errorf("storageClassName %q, want none (the cluster's default)", *claim.StorageClassName)
	}
	sc := p.Template.Spec.SecurityContext
	gid := *cmpOr(p.Container.SecurityContext.RunAsGroup, sc.RunAsGroup)
	if sc.FSGroup == nil || *sc.FSGroup != gid {
		t.Errorf("fsGroup %v, want the limiter's group %d: the kubelet must give it the volume", deref(sc.FSGroup), gid)
	}
	if len(p.Template.Spec.InitContainers) != 0 {
		t.Errorf("init containers %v: the claim needs none", p.Template.Spec.InitContainers)
	}
	for _, v := range p.Template.Spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("hostPath volume %q in StatefulSet mode", v.Name)
		}
	}

	// The claim's values.
	r, err := renderChart(t, "mode=deployment", "state.enabled=true",
		"state.persistentVolumeClaim.storageClassName=fast-ssd", "state.persistentVolumeClaim.size=5Gi")
	if err != nil {
		t.Fatal(err)
	}
	claim = r.StatefulSets[0].Spec.VolumeClaimTemplates[0].Spec
	if claim.StorageClassName == nil || *claim.StorageClassName != "fast-ssd" {
		t.Errorf("storageClassName %v, want fast-ssd", deref(claim.StorageClassName))
	}
	if got := claim.Resources.Requests[corev1.ResourceStorage]; got.Cmp(resource.MustParse("5Gi")) != 0 {
		t.Errorf("claim size %s, want 5Gi", got.String())
	}
}

// TestChartStateSidecar: sidecar mode renders no limiter pods, so
// state.enabled there is refused with a message saying what to do, not
// silently ignored.
func TestChartStateSidecar(t *testing.T) {
	t.Parallel()
	_, err := renderChart(t, "mode=sidecar", "state.enabled=true")
	if err == nil {
		t.Fatal("mode=sidecar with state.enabled rendered, want an error")
	}
	for _, want := range []string{"state.enabled", "sidecar", "SHARDLIMITER_STATE_DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
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
