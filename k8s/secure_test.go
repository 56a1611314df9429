package manifests

import (
	"encoding/base64"
	"path"
	"slices"
	"strings"
	"testing"
)

// gossipKeySecret is the Secret the operator creates (never generated).
const gossipKeySecret = "shardlimiter-gossip-key"

// TestSecure checks the wiring of gossip keys and certificates in
// overlays/secure and the chart's secure values: every key and certificate flag is set, each file lies in
// a directory mount (a subPath mount would never see a renewal) of the
// Secret that holds it, those Secrets are what the Certificates write (or
// the gossip key Secret), the peer certificate serves and authenticates
// clients, every Certificate's Issuer is in the rendering, and a gossip key
// Secret the chart generates holds valid keys.
func TestSecure(t *testing.T) {
	n := 0
	for _, src := range sources {
		if !src.want.secure {
			continue
		}
		n++
		t.Run(src.name, func(t *testing.T) {
			t.Parallel()
			checkSecure(t, render(t, src.name))
		})
	}
	if n < 2 {
		t.Errorf("%d secure sources, want the overlay's and the chart's", n)
	}
}

func checkSecure(t *testing.T, r *rendered) {
	p := r.limiter(t)
	secretOf := map[string]*certificate{}
	for _, c := range r.Certificates {
		secretOf[c.Spec.SecretName] = c
	}
	files := map[string]string{ // variable → the Secret that must hold its file
		"SHARDLIMITER_GOSSIP_KEY_FILE":    gossipKeySecret,
		"SHARDLIMITER_PEER_TLS_CERT_FILE": "", "SHARDLIMITER_PEER_TLS_KEY_FILE": "", "SHARDLIMITER_PEER_TLS_CA_FILE": "",
		"SHARDLIMITER_TLS_CERT_FILE": "", "SHARDLIMITER_TLS_KEY_FILE": "", "SHARDLIMITER_TLS_CLIENT_CA_FILE": "",
	}
	secrets := map[string]string{} // variable → Secret mounted at its directory
	for v, wantSecret := range files {
		file, ok := p.Env[v]
		if !ok {
			t.Errorf("%s is not set", v)
			continue
		}
		secret := p.secretAt(t, file)
		if secret == "" {
			t.Errorf("%s=%s is not in a Secret mounted as a directory", v, file)
			continue
		}
		secrets[v] = secret
		if wantSecret != "" && secret != wantSecret {
			t.Errorf("%s=%s comes from Secret %s, want %s", v, file, secret, wantSecret)
		}
		if wantSecret == "" && secretOf[secret] == nil {
			t.Errorf("%s=%s comes from Secret %s, which no Certificate writes", v, file, secret)
		}
	}
	sameSecret := func(prefix string) {
		var got []string
		for v, s := range secrets {
			if strings.HasPrefix(v, prefix) {
				got = append(got, s)
			}
		}
		if len(slices.Compact(slices.Sorted(slices.Values(got)))) != 1 {
			t.Errorf("the %s* files come from Secrets %v, want one", prefix, got)
		}
	}
	sameSecret("SHARDLIMITER_PEER_TLS_")
	sameSecret("SHARDLIMITER_TLS_")
	if c := secretOf[secrets["SHARDLIMITER_PEER_TLS_CERT_FILE"]]; c != nil &&
		(!slices.Contains(c.Spec.Usages, "server auth") || !slices.Contains(c.Spec.Usages, "client auth")) {
		t.Errorf("peer Certificate %s usages %v, want server auth and client auth", c.Name, c.Spec.Usages)
	}
	if c := secretOf[secrets["SHARDLIMITER_TLS_CERT_FILE"]]; c != nil && !slices.Contains(c.Spec.Usages, "server auth") {
		t.Errorf("API Certificate %s usages %v, want server auth", c.Name, c.Spec.Usages)
	}
	issuers := map[string]*issuer{}
	for _, i := range r.Issuers {
		issuers[i.Name] = i
	}
	for _, c := range r.Certificates {
		i := issuers[c.Spec.IssuerRef.Name]
		if i == nil || c.Spec.IssuerRef.Kind != "Issuer" {
			t.Errorf("Certificate %s: issuer %+v is not an Issuer of the overlay", c.Name, c.Spec.IssuerRef)
		}
		if c.Namespace != p.Namespace {
			t.Errorf("Certificate %s in namespace %q, want the limiter's %q", c.Name, c.Namespace, p.Namespace)
		}
		if i != nil && i.Spec.CA != nil && secretOf[i.Spec.CA.SecretName] == nil {
			t.Errorf("Issuer %s signs with Secret %s, which no Certificate writes", i.Name, i.Spec.CA.SecretName)
		}
	}
	for _, c := range r.Certificates {
		if c.Spec.IsCA {
			continue
		}
		for _, n := range c.Spec.DNSNames {
			if strings.Contains(n, ".svc") && !strings.Contains(n, "."+p.Namespace+".svc") {
				t.Errorf("Certificate %s names %s, outside the limiter's namespace %s", c.Name, n, p.Namespace)
			}
		}
	}
	for _, s := range r.Secrets {
		if s.Name == gossipKeySecret {
			checkGossipKeys(t, s.Data["keys"])
		}
	}
}

// checkGossipKeys: a key file holds one base64 AES key (16, 24 or 32 bytes)
// a line, as --gossip-key-file reads it.
func checkGossipKeys(t *testing.T, file []byte) {
	n := 0
	for i, l := range strings.Split(string(file), "\n") {
		if l = strings.TrimSpace(l); l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		n++
		k, err := base64.StdEncoding.DecodeString(l)
		if err != nil || (len(k) != 16 && len(k) != 24 && len(k) != 32) {
			t.Errorf("gossip key line %d: %d bytes, error %v; want base64 of 16, 24 or 32 bytes", i+1, len(k), err)
		}
	}
	if n == 0 {
		t.Errorf("gossip key Secret %s holds no key", gossipKeySecret)
	}
}

// TestNoSubPathMounts: a subPath mount never sees a Secret or ConfigMap
// update, so no overlay may mount the limiter's files that way.
func TestNoSubPathMounts(t *testing.T) {
	for _, src := range sources {
		dir := src.name
		p := render(t, dir).limiter(t)
		for _, m := range p.Container.VolumeMounts {
			if m.SubPath != "" || m.SubPathExpr != "" {
				t.Errorf("%s: volume %s is mounted with a subPath at %s", dir, m.Name, m.MountPath)
			}
		}
	}
}

// secretAt returns the Secret mounted (as a whole directory) at the
// directory holding file, or "".
func (p *limiterPod) secretAt(t *testing.T, file string) string {
	t.Helper()
	dir := path.Dir(file)
	for _, m := range p.Container.VolumeMounts {
		if path.Clean(m.MountPath) != dir || m.SubPath != "" {
			continue
		}
		if !m.ReadOnly {
			t.Errorf("volume %s at %s is not read-only", m.Name, m.MountPath)
		}
		for _, v := range p.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil {
				return v.Secret.SecretName
			}
		}
	}
	return ""
}
