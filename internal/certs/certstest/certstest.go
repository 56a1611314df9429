// Package certstest issues certificates for tests: a CA and leaf
// certificates signed by it, as PEM, with ECDSA P-256 keys (fast to make).
package certstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a test certificate authority.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

// Leaf describes a certificate to issue. Zero NotBefore/NotAfter mean an
// hour ago / a day from now.
type Leaf struct {
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	NotBefore  time.Time
	NotAfter   time.Time
	Client     bool // client-auth usage
	Server     bool // server-auth usage
}

// NewCA makes a self-signed CA called name.
func NewCA(t testing.TB, name string) *CA {
	t.Helper()
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &CA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// CertPEM is the CA's certificate.
func (ca *CA) CertPEM() []byte { return ca.pem }

// Issue signs a certificate for l and returns it and its key as PEM.
func (ca *CA) Issue(t testing.TB, l Leaf) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	if l.NotBefore.IsZero() {
		l.NotBefore = time.Now().Add(-time.Hour)
	}
	if l.NotAfter.IsZero() {
		l.NotAfter = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{CommonName: l.CommonName},
		DNSNames:     l.DNSNames,
		IPAddresses:  l.IPs,
		NotBefore:    l.NotBefore,
		NotAfter:     l.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

// Paths names the files WriteFiles wrote.
type Paths struct{ Cert, Key, CA string }

// WriteFiles issues a certificate for l and writes it, its key and the CA's
// certificate to dir as prefix.crt, prefix.key and prefix-ca.crt,
// replacing files of the same names.
func (ca *CA) WriteFiles(t testing.TB, dir, prefix string, l Leaf) Paths {
	t.Helper()
	cert, key := ca.Issue(t, l)
	p := Paths{
		Cert: filepath.Join(dir, prefix+".crt"),
		Key:  filepath.Join(dir, prefix+".key"),
		CA:   filepath.Join(dir, prefix+"-ca.crt"),
	}
	for path, b := range map[string][]byte{p.Cert: cert, p.Key: key, p.CA: ca.pem} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
