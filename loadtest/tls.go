package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// httpScheme is how the tool reaches the nodes' HTTP port: "https://" once
// useTLS has run.
var httpScheme = "http://"

// dialOptions are added to every gRPC connection to a target.
var dialOptions []grpc.DialOption

// useTLS makes every connection of the tool, gRPC and HTTP, use TLS: the
// servers' certificates must chain to the CA in caFile, and the client
// presents certFile/keyFile when set (servers started with
// --tls-client-ca-file require it). Call it once, before any connection.
func useTLS(caFile, certFile, keyFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("--tls-ca: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return fmt.Errorf("--tls-ca %s: no PEM certificate", caFile)
	}
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if (certFile == "") != (keyFile == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		kp, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return fmt.Errorf("--tls-cert: %w", err)
		}
		cfg.Certificates = []tls.Certificate{kp}
	}
	dialOptions = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	httpClient.Transport = &http.Transport{TLSClientConfig: cfg}
	httpScheme = "https://"
	return nil
}
