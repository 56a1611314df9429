// Package certs loads TLS certificates, keys and CA bundles from PEM files
// and reloads them in place, so that a renewed certificate (cert-manager
// renews in place; a Kubernetes Secret update swaps the files) is served on
// the next handshake without a restart or a dropped connection.
//
// A Store holds one certificate with its key, and optionally a CA bundle
// that the other end must chain to. Its tls.Configs read the current
// material on every handshake. Reload reads every file again and swaps all
// of it at once; if anything fails (a half-written renewal, a key that does
// not match the certificate) the previous material stays in use and the
// error is returned, so a bad update never breaks serving.
//
// Peers are dialed by pod IP, which no certificate names, so a client
// Config verifies the server's chain against the CA and its usage, not its
// host name: any certificate the CA issued for server use is accepted. The
// CA must therefore issue only to members of the cluster (a dedicated CA,
// such as a cert-manager CA Issuer of its own).
//
// A Store is safe for concurrent use.
package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Files names the PEM files of a Store. Cert and Key are both set or both
// empty (a Store without them only verifies); CA is optional.
type Files struct {
	Cert, Key, CA string
}

// Store is TLS material loaded from Files. Create it with Load.
type Store struct {
	files Files
	cur   atomic.Pointer[material]
}

// material is one consistent load of the files.
type material struct {
	cert *tls.Certificate // nil without Cert
	leaf *x509.Certificate
	pool *x509.CertPool // nil without CA
	raw  [3][]byte      // file contents, to tell whether a reload changed anything
}

// Load reads and checks f.
func Load(f Files) (*Store, error) {
	if (f.Cert == "") != (f.Key == "") {
		return nil, errors.New("certs: a certificate needs its key and a key its certificate")
	}
	if f.Cert == "" && f.CA == "" {
		return nil, errors.New("certs: no files")
	}
	s := &Store{files: f}
	m, err := s.load()
	if err != nil {
		return nil, err
	}
	s.cur.Store(m)
	return s, nil
}

func (s *Store) load() (*material, error) {
	m := &material{}
	read := func(i int, path string) error {
		if path == "" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("certs: %w", err)
		}
		m.raw[i] = b
		return nil
	}
	if err := errors.Join(read(0, s.files.Cert), read(1, s.files.Key), read(2, s.files.CA)); err != nil {
		return nil, err
	}
	if s.files.Cert != "" {
		c, err := tls.X509KeyPair(m.raw[0], m.raw[1])
		if err != nil {
			return nil, fmt.Errorf("certs: %s with %s: %w", s.files.Cert, s.files.Key, err)
		}
		m.cert, m.leaf = &c, c.Leaf
	}
	if s.files.CA != "" {
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(m.raw[2]) {
			return nil, fmt.Errorf("certs: %s holds no PEM certificate", s.files.CA)
		}
	}
	return m, nil
}

// Reload reads every file again. If all of it loads, it replaces the
// material at once and reports whether any file's content differed; if not,
// the previous material stays and the error says why.
func (s *Store) Reload() (changed bool, err error) {
	m, err := s.load()
	if err != nil {
		return false, err
	}
	old := s.cur.Swap(m)
	for i := range m.raw {
		if !bytes.Equal(m.raw[i], old.raw[i]) {
			return true, nil
		}
	}
	return false, nil
}

// NotAfter is when the current certificate expires; zero without one.
func (s *Store) NotAfter() time.Time {
	if leaf := s.cur.Load().leaf; leaf != nil {
		return leaf.NotAfter
	}
	return time.Time{}
}

// Pool is the current CA pool, nil without CA. It is a snapshot: a later
// Reload does not change it.
func (s *Store) Pool() *x509.CertPool { return s.cur.Load().pool }

// ServerConfig returns a server tls.Config (TLS 1.2 or later) presenting
// the current certificate. With requireClientCert, clients must present a
// certificate that chains to the current CA with client-auth usage; the CA
// is read on every handshake, so a reloaded one applies to the next.
// nextProtos are the ALPN protocols to offer ("h2" for gRPC; "h2",
// "http/1.1" for net/http): set them here, not on the returned Config,
// whose per-handshake copies would not see a later change.
func (s *Store) ServerConfig(requireClientCert bool, nextProtos ...string) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: nextProtos}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: nextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			if m.cert == nil {
				return nil, errors.New("certs: no certificate to serve")
			}
			c := base.Clone()
			c.Certificates = []tls.Certificate{*m.cert}
			if requireClientCert {
				if m.pool == nil {
					return nil, errors.New("certs: client certificates required but no CA loaded")
				}
				c.ClientAuth, c.ClientCAs = tls.RequireAndVerifyClientCert, m.pool
			}
			return c, nil
		},
	}
}

// ClientConfig returns a client tls.Config (TLS 1.2 or later) that presents
// the current certificate, if any, and accepts a server whose certificate
// chains to the current CA with server-auth usage, whatever host name it
// carries (see the package doc).
func (s *Store) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := s.cur.Load(); m.cert != nil {
				return m.cert, nil
			}
			return &tls.Certificate{}, nil // none: the server decides
		},
		// Verification is VerifyConnection's: the chain and usage, not the
		// host name, against the CA of this handshake's moment.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verifyServer(cs.PeerCertificates, time.Now())
		},
	}
}

func (s *Store) verifyServer(chain []*x509.Certificate, now time.Time) error {
	pool := s.cur.Load().pool
	if pool == nil {
		return errors.New("certs: no CA loaded to verify the server with")
	}
	if len(chain) == 0 {
		return errors.New("certs: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("certs: server certificate: %w", err)
	}
	return nil
}
