package pki

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteIssuesAChainTheStandardLibraryVerifies(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt is not a PEM certificate")
	}
	serving, err := tls.LoadX509KeyPair(filepath.Join(dir, "apiserver.crt"), filepath.Join(dir, "apiserver.key"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(serving.Certificate[0])
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc", "10.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: host}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	for _, c := range Clients {
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, c.Stem+".crt"), filepath.Join(dir, c.Stem+".key"))
		if err != nil {
			t.Fatal(err)
		}
		cert, _ := x509.ParseCertificate(pair.Certificate[0])
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("%s: %v", c.Stem, err)
		}
		if cert.Subject.CommonName != c.User {
			t.Errorf("%s: user %q, want %q", c.Stem, cert.Subject.CommonName, c.User)
		}
	}
	for _, name := range []string{"ca.key", "sa.key", "admin.key"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || info.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v mode %v, want 0600", name, err, info.Mode().Perm())
		}
	}
}
